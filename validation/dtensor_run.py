"""The DTensor export run on the emulated cluster: same loss and gradients as one process.

``python -m validation.dtensor_run`` (root; brings a 2-node x 2-rank cluster up when none is up
and removes it after) plans a small GPT-2 with the engine, exports each plan with
``taps_core.export`` (``--format dtensor``), and on every rank executes the exported Python
snippet as it is: ``build_mesh("cpu")`` (gloo), ``parallelize(model, mesh)`` (which calls
``parallelize_module``) and ``loss_and_backward``. The data-parallel side is an all-reduce of
the gradients over ``mesh["dp"]`` (what DDP does at ZeRO stage 0). Every rank's loss and full
gradients (``DTensor.full_tensor()``) are compared with one process running the unsplit model
on the whole batch.

Plans: the engine's Megatron-style plan (without pipeline stages) and its data-parallel plan,
plus two hand-made plans of the engine's strategy space that reach the export's other paths:
Megatron-LM's layout with sequence parallelism and a vocabulary-parallel loss, and a mixed
plan (whole attention and a gathered MLP inside a sequence-split block, then a whole block).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from validation.dtensor_config import TinyGPTConfig, TinyLlamaConfig
from validation.launcher import launch

RTOL, ATOL = 1e-4, 1e-5
RUN_FN = "validation.dtensor_run:run_exports"
# the emulated levels' speeds (as in the plan-execution test): the engine splits the small model
LEVELS = {
    "intra": {"alpha_s": 2e-4, "bandwidth_Bps": 1e8},
    "inter": {"alpha_s": 3e-4, "bandwidth_Bps": 2.4e7},
}


Model = TinyGPTConfig | TinyLlamaConfig


@dataclass(frozen=True)
class Case:
    """One plan to run: the model it was made for and its plan JSON."""

    label: str
    model: Model
    plan: dict[str, Any]

    @property
    def family(self) -> str:
        """The module tree the plan runs on: ``gpt2`` (ours) or ``llama`` (Hugging Face's)."""
        return "llama" if isinstance(self.model, TinyLlamaConfig) else "gpt2"


@dataclass
class DTensorCheck:
    """One exported plan on the cluster against the single-process reference."""

    label: str
    mesh: list[int]  # [dp, tp]
    styles: dict[str, int]  # parallel style -> how many modules use it
    loss: float
    ref_loss: float
    max_abs_err: float  # over every rank and every parameter gradient
    max_rel_err: float
    worst_param: str
    step_s: float  # slowest rank: forward, backward, gradient sync and the check's
    # full-gradient gathers (seconds)
    ok: bool


# ---- driver side: plans and their exports -------------------------------------------------------


def engine_plans(nodes: int = 2, ranks_per_node: int = 2) -> list[Case]:
    """The engine's Megatron-style (untied model) and data-parallel plans of the small GPT-2."""
    from taps_core.models import build_graph, config_from_dict
    from taps_core.plan.report import plan_to_json
    from taps_core.search.baselines import data_parallel_filter, megatron_filter
    from taps_core.search.planner import search
    from validation.calibrate import build_topology

    topo = build_topology(nodes, ranks_per_node, LEVELS)
    out = []
    for label, model, rule in (
        ("megatron", TinyGPTConfig(tie_word_embeddings=False), megatron_filter),
        ("data_parallel", TinyGPTConfig(), lambda _g, t: data_parallel_filter(t)),
    ):
        graph = build_graph(config_from_dict(model.engine_config(), name="tiny-gpt2"))
        plan = search(graph, topo, label=label, allow=rule(graph, topo))
        out.append(Case(label, model, plan_to_json(plan)))
    return out


def variant(base: dict[str, Any], label: str, rule: Callable[[str], tuple[dict, bool]]) -> dict:
    """A copy of plan JSON ``base`` whose ops take ``rule(op name) -> (intra splits, partial)``
    inside nodes and the batch split 2 ways across nodes."""
    ops = []
    for op in base["ops"]:
        intra, partial = rule(op["name"])
        strategy: dict[str, Any] = {"inter": {"b": 2}, "intra": intra}
        if partial:
            strategy["partial"] = True
        ops.append({**op, "strategy": strategy})
    return {**base, "label": label, "ops": ops}


def _megatron_sp(name: str) -> tuple[dict, bool]:
    """Megatron-LM with sequence parallelism: heads / FFN / vocabulary over the two GPUs of a
    node, norms and residual adds on half the sequence, row-parallel ops reduce-scattering."""
    tail = name.split(".", 1)[1] if name.startswith("L") else name
    if tail in ("embed", "lm_head", "loss"):
        return {"v": 2}, tail == "embed"
    if tail.startswith("attn."):
        return {"n": 2}, tail == "attn.o"
    if tail.startswith("mlp."):
        return {"f": 2}, tail == "mlp.down"
    return {"s": 2}, False  # embed_pos, ln1, ln2, add1, add2, ln_f


def _mixed(name: str) -> tuple[dict, bool]:
    """Layer 0 sequence-split with whole attention and an MLP gathered before its down
    projection; layer 1 whole, Megatron tensor-parallel; embedding, LM head and loss whole."""
    if name.startswith("L0."):
        tail = name[3:]
        if tail.startswith("attn."):
            return {}, False
        if tail in ("mlp.up", "mlp.gelu"):
            return {"f": 2}, False
        return ({}, False) if tail == "mlp.down" else ({"s": 2}, False)
    if name.startswith("L1."):
        tail = name[3:]
        if tail.startswith("attn."):
            return {"n": 2}, False
        if tail.startswith("mlp."):
            return {"f": 2}, False
        return {}, False
    return ({"s": 2}, False) if name == "embed_pos" else ({}, False)


def cases(nodes: int = 2, ranks_per_node: int = 2) -> list[Case]:
    """The engine plans plus the two hand-made variants (on the tied model)."""
    found = engine_plans(nodes, ranks_per_node)
    base = next(c for c in found if c.label == "data_parallel")
    return [
        *found,
        Case("megatron-sp", base.model, variant(base.plan, "megatron-sp", _megatron_sp)),
        Case("mixed", base.model, variant(base.plan, "mixed", _mixed)),
    ]


def export_snippet(case: Case) -> tuple[str, dict[str, Any]]:
    """The exported Python snippet and JSON of ``case`` (the plan's model and workload)."""
    import json

    from taps_core.export import export_plan

    with tempfile.TemporaryDirectory(prefix="taps-dtensor-") as tmp:
        cfg_path = Path(tmp) / "tiny-gpt2.json"
        cfg_path.write_text(json.dumps(case.model.engine_config()))
        result = export_plan(case.plan, "dtensor", model=str(cfg_path))
    assert result.python is not None
    return result.python, result.data


# ---- rank side ----------------------------------------------------------------------------------


def run_exports(ctx: Any, *, cases: list[dict[str, Any]], seed: int, out_dir: str) -> dict:
    """Rank job: for each exported snippet, one training step; loss and full gradients saved
    to ``out_dir/LABEL-rankR.pt``. Returns the step time per label (seconds)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from validation.dtensor_model import batch, build

    times = {}
    for case in cases:
        label, cfg = case["label"], TinyGPTConfig(**case["model"])
        ns: dict[str, Any] = {}
        exec(compile(case["python"], f"<dtensor export {label}>", "exec"), ns)
        mesh = ns["build_mesh"]("cpu")
        model = ns["parallelize"](build(cfg, seed), mesh)
        dp, d = mesh["dp"].size(), mesh.get_local_rank("dp")
        ids, labels = batch(cfg, seed)
        rows = slice(d * cfg.batch_size // dp, (d + 1) * cfg.batch_size // dp)
        dist.barrier()
        start = time.perf_counter()
        loss = ns["loss_and_backward"](model.logits(ids[rows]), labels[rows]).detach().clone()
        group = mesh["dp"].get_group()
        dist.all_reduce(loss, group=group)
        grads = {}
        for name, p in model.named_parameters():
            g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad.clone()
            dist.all_reduce(g, group=group)  # the data-parallel sync (DDP at ZeRO-0)
            grads[name] = g / dp
        times[label] = time.perf_counter() - start
        torch.save({"loss": float(loss) / dp, "grads": grads},
                   Path(out_dir) / f"{label}-rank{ctx.rank}.pt")
    return times


# ---- driver side: run and compare ---------------------------------------------------------------


def reference(cfg: TinyGPTConfig, seed: int) -> tuple[float, dict[str, Any]]:
    """Loss and parameter gradients of one process on the whole batch."""
    from torch.nn import functional

    from validation.dtensor_model import batch, build

    model = build(cfg, seed)
    ids, labels = batch(cfg, seed)
    loss = functional.cross_entropy(model.logits(ids).flatten(0, 1), labels.flatten())
    loss.backward()
    return loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}


def validate(*, nodes: int = 2, ranks_per_node: int = 2, seed: int = 0,
             timeout_s: float = 120.0) -> list[DTensorCheck]:
    """Export, run on the cluster that is up, and compare every plan with one process."""
    import torch

    chosen = cases(nodes, ranks_per_node)
    exported = {c.label: export_snippet(c) for c in chosen}
    world = nodes * ranks_per_node
    with tempfile.TemporaryDirectory(prefix="taps-dtensor-") as tmp:
        payload = [{"label": c.label, "model": c.model.as_dict(), "python": exported[c.label][0]}
                   for c in chosen]
        times = launch(RUN_FN, nodes=nodes, ranks_per_node=ranks_per_node, timeout_s=timeout_s,
                       kwargs={"cases": payload, "seed": seed, "out_dir": tmp})
        checks = []
        for case in chosen:
            ref_loss, ref_grads = reference(case.model, seed)
            data = exported[case.label][1]
            worst, abs_err, rel_err, ok, loss = "", 0.0, 0.0, True, math.nan
            for r in range(world):
                got = torch.load(Path(tmp) / f"{case.label}-rank{r}.pt", weights_only=False)
                loss = got["loss"]
                ok = ok and math.isclose(loss, ref_loss, rel_tol=RTOL, abs_tol=ATOL)
                ok = ok and set(got["grads"]) == set(ref_grads)
                for name, ref in ref_grads.items():
                    diff = (got["grads"][name] - ref).abs()
                    if float(diff.max()) >= abs_err:
                        worst, abs_err = name, float(diff.max())
                    rel_err = max(rel_err, float((diff / ref.abs().clamp(min=ATOL)).max()))
                    ok = ok and bool(torch.allclose(got["grads"][name], ref, rtol=RTOL,
                                                    atol=ATOL))
            styles: dict[str, int] = {}
            for style in data["tp_plan"].values():
                styles[style["style"]] = styles.get(style["style"], 0) + 1
            checks.append(DTensorCheck(
                case.label, data["mesh"]["shape"], styles, loss, ref_loss, abs_err, rel_err,
                worst, max(t[case.label] for t in times), ok))
    return checks


def main(argv: list[str] | None = None) -> int:
    """CLI: bring a cluster up if needed, run the checks, print one line per plan."""
    from validation.session import ensure_cluster

    p = argparse.ArgumentParser(prog="python -m validation.dtensor_run", description=__doc__
                                .splitlines()[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds for the whole launch")
    args = p.parse_args(argv)
    start = time.perf_counter()
    with ensure_cluster(args.nodes, args.ranks_per_node):
        checks = validate(nodes=args.nodes, ranks_per_node=args.ranks_per_node, seed=args.seed,
                          timeout_s=args.timeout)
    for c in checks:
        styles = ", ".join(f"{n} {k}" for k, n in sorted(c.styles.items())) or "no TP styles"
        print(f"{c.label:<14} dp {c.mesh[0]} x tp {c.mesh[1]}  loss {c.loss:.6f} (one process "
              f"{c.ref_loss:.6f})  max |grad diff| {c.max_abs_err:.2e} (rel {c.max_rel_err:.1e}, "
              f"{c.worst_param})  step {c.step_s * 1e3:.0f} ms  {'OK' if c.ok else 'MISMATCH'}"
              f"  [{styles}]")
    print(f"{sum(c.ok for c in checks)}/{len(checks)} plans match; "
          f"{time.perf_counter() - start:.1f} s in all")
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
