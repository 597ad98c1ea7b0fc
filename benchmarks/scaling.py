"""Planning real training runs: Megatron-LM's GPT scaling runs (1.7B to 1T on 32 to 3072 A100s).

``python -m benchmarks.scaling [--quick] [--no-write]`` plans each run of Narayanan et al.
2021, Table 1 (GPT, sequence 2048, vocabulary 51200, DGX A100 nodes, the published global
batch) with :func:`taps_core.search.planner.search`, prices the published configuration with the
same model (:func:`taps_core.search.fixed_config.plan_fixed`: their TP x PP, micro-batch 1, full
recomputation, the distributed optimizer) and prints one table row per run: search time, step
time, chosen TP / PP / DP / ZeRO / recomputation and the published step derived from their
measured TFLOP/s per GPU. The table is written into docs/RESULTS.md between the markers
:data:`BEGIN` and :data:`END` (the rest of that file is the main benchmark run's).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.results_block import kept_block, write_block
from taps_core.cluster.presets import preset
from taps_core.memo import clear_all
from taps_core.models import build_graph
from taps_core.models.config import config_from_dict
from taps_core.plan.records import Plan
from taps_core.search.configs import configuration_in
from taps_core.search.fixed_config import FixedConfig, plan_fixed
from taps_core.search.planner import search

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- scaling:begin -->", "<!-- scaling:end -->"
SEQ, VOCAB = 2048, 51200
TARGET_S = 2.0  # the search time the planning-at-scale issue asks for (seconds)


@dataclass(frozen=True)
class Run:
    """One published run: the model's shape, the cluster, the batch and what experts ran."""

    params_b: float  # billions, as published
    heads: int
    hidden: int
    layers: int
    gpus: int
    batch: int
    tp: int
    pp: int
    tflops_per_gpu: float  # measured, with full recomputation

    def published_step_s(self) -> float:
        """The measured step (seconds) from the paper's FLOP count
        ``96 B s l h^2 (1 + s / 6h + V / 16lh)`` at the measured TFLOP/s per GPU."""
        h, lay = self.hidden, self.layers
        flops = 96 * self.batch * SEQ * lay * h * h * (1 + SEQ / (6 * h) + VOCAB / (16 * lay * h))
        return flops / (self.gpus * self.tflops_per_gpu * 1e12)


# Narayanan et al. 2021 (Megatron-LM on DGX A100 clusters), Table 1
RUNS = (
    Run(1.7, 24, 2304, 24, 32, 512, 1, 1, 137),
    Run(3.6, 32, 3072, 30, 64, 512, 2, 1, 138),
    Run(7.5, 32, 4096, 36, 128, 512, 4, 1, 142),
    Run(18.4, 48, 6144, 40, 256, 1024, 8, 1, 135),
    Run(39.1, 64, 8192, 48, 512, 1536, 8, 2, 138),
    Run(76.1, 80, 10240, 60, 1024, 1792, 8, 4, 140),
    Run(145.6, 96, 12288, 80, 1536, 2304, 8, 8, 148),
    Run(310.1, 128, 16384, 96, 1920, 2160, 8, 16, 155),
    Run(529.6, 128, 20480, 105, 2520, 2520, 8, 35, 163),
    Run(1008.0, 160, 25600, 128, 3072, 3072, 8, 64, 163),
)
QUICK = RUNS[:2]


@dataclass(frozen=True)
class Row:
    """What the planner chose for one run, and what the published configuration costs."""

    run: Run
    search_s: float
    step_s: float
    status: str
    chosen: str  # the configuration text, or the flat plan's description
    published_priced_s: float  # their configuration under the same cost model
    published_fits: bool
    proof_s: float | None = None  # the search with stages searched and every shape bounded
    proof_step_s: float | None = None  # its plan's step (seconds)
    proof_status: str = ""
    bound_s: float | None = None  # the certified lower bound on any plan (seconds)


def chosen_configuration(plan: Plan) -> str:
    """The plan as ``tp=..,pp=..,..`` when it is a framework configuration (or its stage
    shape), else "per-op plan, no stages" / "per-op plan, N stages"."""
    found = configuration_in(plan.search.note)
    if found and plan.search.algorithm.endswith("-exhaustive"):  # the configuration itself
        return found
    stages = len(plan.pipeline.stages) if plan.pipeline is not None else 1
    shape = f"{stages} stages" if stages > 1 else "no stages"
    return f"per-op plan, {shape}" + (f" ({found} shape)" if found else "")


def plan_run(run: Run, prove: bool = True) -> Row:
    """Plan one run and price its published configuration; with ``prove``, plan it again
    with every pipeline shape bounded (``search(..., prove_stages=True)``)."""
    cfg = config_from_dict(
        {
            "model_type": "gpt3", "hidden_size": run.hidden, "num_hidden_layers": run.layers,
            "num_attention_heads": run.heads, "vocab_size": VOCAB,
            "max_position_embeddings": SEQ, "dtype": "bfloat16",
        },
        name=f"gpt-{run.params_b:g}b",
    )
    graph = build_graph(cfg.with_workload(batch_size=run.batch, seq_length=SEQ))
    topology = preset(f"dgx-a100:{run.gpus // 8}")
    clear_all()  # timed as a fresh process plans it
    start = time.perf_counter()
    plan = search(graph, topology)
    elapsed = time.perf_counter() - start
    dp = run.gpus // (run.tp * run.pp)
    theirs = plan_fixed(
        graph, topology, FixedConfig(run.tp, run.pp, dp, 1, False, "full", 1),
    )
    row = Row(
        run, elapsed, plan.total_time_s, plan.search.status, chosen_configuration(plan),
        theirs.total_time_s, theirs.memory.total <= topology.gpu.memory_bytes,
    )
    if not prove:
        return row
    clear_all()
    start = time.perf_counter()
    proved = search(graph, topology, prove_stages=True, pipeline=True)
    assert proved.total_time_s <= plan.total_time_s * (1 + 1e-12), "refined plans are no slower"
    return replace(row, proof_s=time.perf_counter() - start, proof_step_s=proved.total_time_s,
                   proof_status=proved.search.status, bound_s=proved.search.lower_bound_s)


def _proof_cells(r: Row) -> str:
    """The proof columns: its time, status, certified bound (seconds) and the gap to it."""
    if r.proof_s is None or r.bound_s is None or r.proof_step_s is None:
        return "- | - | - | - | -"
    return (f"{r.proof_s:.2f} | {r.proof_step_s:.4g} | {r.proof_status} | {r.bound_s:.4g} | "
            f"{gap_text(r.proof_step_s, r.bound_s)}")


def gap_text(step_s: float, bound_s: float) -> str:
    """How far ``step_s`` may be from the optimum, as a percentage of it: one decimal from
    0.1%, else two significant digits (a small gap stays visible, not "0.0%")."""
    gap = 100 * (step_s - bound_s) / step_s
    return f"{gap:.1f}%" if gap >= 0.1 or gap == 0 else f"{gap:.2g}%"


def table(rows: list[Row]) -> str:
    """The rows as a markdown table."""
    head = (
        "| params | GPUs | batch | search (s) | step (s) | status | chosen | with proof (s) | "
        "step, proven (s) | status, proven | certified bound (s) | gap | published TP x PP | "
        "published, same model (s) | published, measured (s) |\n"
        "|---:|---:|---:|---:|---:|---|---|---:|---:|---|---:|---:|---|---:|---:|\n"
    )
    lines = [
        f"| {r.run.params_b:g}B | {r.run.gpus} | {r.run.batch} | {r.search_s:.2f} | "
        f"{r.step_s:.2f} | {r.status} | `{r.chosen}` | {_proof_cells(r)} | "
        f"{r.run.tp} x {r.run.pp} | "
        f"{r.published_priced_s:.2f}{'' if r.published_fits else ' (does not fit)'} | "
        f"{r.run.published_step_s():.2f} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def section(rows: list[Row], quick: bool) -> str:
    """The docs/RESULTS.md block: what was run, the table, how to read it."""
    return (
        f"{BEGIN}\n## Planning Megatron-LM's GPT runs (1.7B to 1T parameters)\n\n"
        "`python -m benchmarks.scaling` on this machine (2 cores); each run of Narayanan et al. "
        "2021, Table 1 (sequence 2048, vocabulary 51200, DGX A100, the published batch) "
        "planned by `taps_core.search.planner.search` with default settings. "
        "*published, same model*: "
        "their TP x PP with micro-batch 1, full recomputation and the distributed optimizer "
        "priced by the same cost model (`plan --fixed`); *published, measured*: their step "
        "from the measured TFLOP/s per GPU. The cost model assumes 50% of peak for compute, "
        "which is near what they measured (44-52%). "
        "*status* `feasible`: every framework configuration was priced and TAPS's per-op "
        "search without stages ran to its proof; where the fastest configuration has stages "
        "and wins, every stage of its shape was searched per op (*chosen*: per-op plan, that "
        "shape); other pipeline shapes are not proven by the default search. *with proof*: "
        "`plan --pipeline on --prove-stages` "
        "(`search(..., pipeline=True, prove_stages=True)`): every pipeline shape (stage count x "
        "micro-batch count, any layer split, any per-op plan per stage; every stage count that "
        "divides the hosts, up to one layer per stage) is bounded "
        "(`taps_core.search.pipeline_bound`), the framework's pipeline shape and the two open "
        "shapes of least bound are planned per op, stage by stage; *status, proven* is "
        "`optimal` when no shape can beat the plan, else *certified bound* is the least bound "
        "of the open shapes and *gap* how far *step, proven* may be from the optimum. A "
        "shape's bound is each stage's exact optimum without memory (its ops' cheapest options "
        "without gradient sync for the stages it does not pace), a tied embedding's exchange "
        "between the first and last stage, and, where that optimum does not fit, the "
        "Lagrangian bound of each stage's plans that fit with the micro-batches 1F1B keeps in "
        "flight. "
        + speed_sentence(rows)
        + "\n\n"
        + ("(quick slice)\n\n" if quick else "")
        + table(rows)
        + f"\n{END}\n"
    )


def speed_sentence(rows: list[Row], target_s: float = TARGET_S) -> str:
    """How this run's search times compare with the issue's target (seconds), from the rows."""
    default = [r.search_s for r in rows]
    proofs = [r.proof_s for r in rows if r.proof_s is not None]
    over = [r for r in rows if r.search_s > target_s]
    text = (
        f"Default searches took {min(default):.1f}-{max(default):.1f} s "
        f"({len(over)} of {len(rows)} above the {target_s:g} s target)"
    )
    if proofs:
        text += f"; searches with proof {min(proofs):.1f}-{max(proofs):.1f} s"
    return text + "."


def write_section(text: str, path: Path) -> None:
    """Replace the scaling block in ``path`` (append it when absent)."""
    write_block(path, BEGIN, END, text)


def kept_section(path: Path) -> str | None:
    """The scaling block in ``path`` (with its markers), or None."""
    return kept_block(path, BEGIN, END)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the two smallest runs only")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs alone")
    args = ap.parse_args(argv)
    rows = []
    for run in QUICK if args.quick else RUNS:
        rows.append(plan_run(run))
        r = rows[-1]
        print(f"{run.params_b:g}B on {run.gpus} GPUs: {r.search_s:.2f} s search, "
              f"{r.step_s:.2f} s step ({r.chosen}); published {r.published_priced_s:.2f} s "
              f"same model, {run.published_step_s():.2f} s measured; with proof "
              f"{_proof_cells(r)}", file=sys.stderr)
    text = section(rows, args.quick)
    print(table(rows))
    if not args.no_write:
        write_section(text, ROOT / "docs" / "RESULTS.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
