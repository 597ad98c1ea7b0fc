"""docs/TRAFFIC.md: one GPT-3 layer under five configurations, bytes per GPU per collective,
worked by hand (the formula and its numbers) beside the engine's figure for the same plan.

Run: ``python -m benchmarks.traffic_table --out docs/TRAFFIC.md`` (a second; prints otherwise).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

from taps_core.cluster.presets import preset
from taps_core.models import build_graph, load_model_config
from taps_core.search.fixed_config import parse_fixed, plan_fixed

H, S, HEADS, LAYER = 12288, 2048, 96, 1
LAYER_PARAMS = 12 * H * H + 13 * H  # q, k, v, o, up, down weights and biases, two LayerNorms
MB = 1e6


@dataclass(frozen=True)
class Row:
    """One collective of the layer: what it moves, how many times a step, bytes per GPU."""

    what: str
    formula: str
    per_gpu_bytes: float


@dataclass(frozen=True)
class Case:
    spec: str
    title: str
    rows: tuple[Row, ...]


def _ar(p: int) -> float:
    return 2 * (p - 1) / p


def cases() -> list[Case]:
    """The five configurations on two DGX A100 nodes (16 GPUs), global batch 32, bf16."""
    act = lambda b: b * S * H * 2
    w8 = (12 * H * H + 7 * H) * 2 / 8  # a GPU's TP-split weights (1/8 of the big matrices)
    whole = 6 * H * 2  # the two row biases and two LayerNorms (weight, bias) stay whole
    return [
        Case("tp=8", "TP 8 inside a node, DP 2 across nodes, no micro-batches", (
            Row("TP all-reduce of the activation, 2 fwd + 2 bwd", "4 x 2*7/8 x 16*2048*12288*2",
                4 * _ar(8) * act(16)),
            Row("DP all-reduce of the TP-split weights' gradients", "2*1/2 x (12h^2+7h)*2/8",
                _ar(2) * w8),
            Row("DP all-reduce of whole weights (each of 8 copies sends 1/8, then gathers)",
                "2*1/2 x 6h*2/8 + 7/8 x 6h*2", _ar(2) * whole / 8 + 7 / 8 * whole),
        )),
        Case("tp=8,pp=2,mbs=1", "TP 8 x PP 2, 32 micro-batches of 1 sequence, DP 1", (
            Row("TP all-reduce per micro-batch, 2 fwd + 2 bwd", "32 x 4 x 2*7/8 x 2048*12288*2",
                32 * 4 * _ar(8) * act(1)),
        )),
        Case("tp=8,sp=1", "TP 8 with sequence parallelism, DP 2", (
            Row("all-gather before Q/K/V and MLP up, fwd; reduce-scatter of their input grad",
                "4 x 7/8 x 16*2048*12288*2", 4 * 7 / 8 * act(16)),
            Row("reduce-scatter after attn out and MLP down, fwd; all-gather of their grad",
                "4 x 7/8 x 16*2048*12288*2", 4 * 7 / 8 * act(16)),
            Row("DP all-reduce of the TP-split weights' gradients", "2*1/2 x (12h^2+7h)*2/8",
                _ar(2) * w8),
            Row("all-reduce of whole weights over TP x DP (16 GPUs: 8 inside, then 2 across)",
                "7/8 x S + 2*1/2 x S/8 + 7/8 x S, S = 6h*2",
                7 / 8 * whole + _ar(2) * whole / 8 + 7 / 8 * whole),
        )),
        Case("tp=4,zero=2", "TP 4 x DP 4 (2 per node x 2 nodes), ZeRO-2", (
            Row("TP all-reduce of an 8-sequence activation, 2 fwd + 2 bwd",
                "4 x 2*3/4 x 8*2048*12288*2", 4 * _ar(4) * act(8)),
            Row("ZeRO-2 reduce-scatter of the TP-split gradients (inside, then across on 1/2)",
                "1/2 x W + 1/2 x W/2, W = (12h^2+7h)*2/4", (0.5 + 0.25) * (12 * H * H + 7 * H) / 2),
            Row("ZeRO-2 all-gather of the updated parameters (across on 1/2, then inside)",
                "1/2 x W/2 + 1/2 x W", (0.25 + 0.5) * (12 * H * H + 7 * H) / 2),
            Row("whole weights (4 copies per replica): RS and AG over 2 inside and 2 across",
                "(1/2 + 1/2 x 1/8) x S + (1/2 x 1/8 + 7/8) x S, S = 6h*2",
                (0.5 + 0.5 / 8) * whole + (0.5 / 8 + 7 / 8) * whole),
        )),
        Case("tp=8,pp=2,mbs=2,recompute=full", "TP 8 x PP 2, 16 micro-batches of 2, recomputed", (
            Row("TP all-reduce per micro-batch: 2 fwd, 2 fwd again (recomputed), 2 bwd",
                "16 x 6 x 2*7/8 x 2*2048*12288*2", 16 * 6 * _ar(8) * act(2)),
        )),
    ]


def _engine_per_gpu(spec: str) -> tuple[float, int]:
    graph = build_graph(replace(load_model_config("gpt3-175b"), num_hidden_layers=4))
    plan = plan_fixed(graph, preset("dgx-a100:2"), parse_fixed(spec), memory_limit_bytes=1e18)
    gpus = plan.pipeline.stages[0].gpus if plan.pipeline is not None else 16
    sent = sum(op.comm_bytes for op in plan.ops if op.layer == LAYER)
    return sent / gpus, gpus


def table() -> str:
    """The whole document (markdown)."""
    out = [
        "# One GPT-3 layer's traffic, by hand and by the engine",
        "",
        "GPT-3 175B (h = 12288, 96 heads, sequence 2048, bf16) on two DGX A100 nodes (8 GPUs "
        "each), global batch 32. Bytes are what **one GPU sends** in one training step for one "
        "layer. Ring collectives over p GPUs send 2(p-1)/p x S (all-reduce) or (p-1)/p x S "
        "(all-gather, reduce-scatter) per GPU; a group spanning hosts runs inside the host first. "
        "The engine's column is `python -m taps_core plan gpt3-175b --topology dgx-a100:2 "
        "--fixed SPEC` summed over the layer's ops; the formulas are checked by "
        "tests/test_textbook.py, which also draws random configurations of GPT- and Llama-shaped "
        "models and compares every op.",
        "",
        "Regenerate: `python -m benchmarks.traffic_table --out docs/TRAFFIC.md`.",
        "",
    ]
    for case in cases():
        engine, gpus = _engine_per_gpu(case.spec)
        hand = sum(r.per_gpu_bytes for r in case.rows)
        out += [f"## `--fixed {case.spec}`: {case.title}", "",
                "| collective | formula (bytes per GPU) | MB per GPU |", "|---|---|---:|"]
        out += [f"| {r.what} | `{r.formula}` | {r.per_gpu_bytes / MB:,.1f} |" for r in case.rows]
        out += [
            f"| **layer, by hand** | | **{hand / MB:,.1f}** |",
            f"| **layer, engine** | | **{engine / MB:,.1f}** |",
            "",
            f"All {gpus} GPUs of a stage: {hand * gpus / 1e9:,.1f} GB by hand, "
            f"{engine * gpus / 1e9:,.1f} GB by the engine.",
            "",
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the markdown here (default: print)")
    args = parser.parse_args(argv)
    text = table()
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
