"""Plans from the engine, executed on the emulated cluster and checked against one process.

The driver side (:func:`plans_for`, :func:`execute`) builds the model graph with
``taps_core.models.build_graph`` from a config, asks ``taps_core.search.baselines.compare``
for the TAPS, volume-based, Megatron-style and data-parallel plans on a topology, launches
:func:`run_plans` on every rank, and compares the loss and every parameter gradient with the
single-process reference of :mod:`validation.reference` (same seed, same weights).
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validation.launcher import DEFAULT_TIMEOUT_S, launch

PLAN_LABELS = ("taps", "volume", "megatron", "data_parallel")
RTOL, ATOL = 1e-4, 1e-5
RUN_FN = "validation.plans:run_plans"

# small models for the correctness check (the brief's sizes) and larger ones for timing
MODELS: dict[str, dict[str, Any]] = {
    "mlp-small": {"model_type": "mlp", "hidden_size": 64, "intermediate_size": 256,
                  "num_hidden_layers": 2, "batch_size": 8, "seq_length": 16, "dtype": "float32"},
    "gpt-tiny": {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                 "vocab_size": 128, "n_positions": 16, "seq_length": 16, "batch_size": 4,
                 "dtype": "float32"},
    # timing: big enough for cross-node traffic to dominate, short enough for a few steps
    "gpt-m512": {"model_type": "gpt2", "n_embd": 512, "n_layer": 2, "n_head": 8,
                 "vocab_size": 2048, "n_positions": 32, "seq_length": 32, "batch_size": 4,
                 "dtype": "float32"},
    "gpt-m768": {"model_type": "gpt2", "n_embd": 768, "n_layer": 1, "n_head": 8,
                 "vocab_size": 4096, "n_positions": 64, "seq_length": 64, "batch_size": 16,
                 "dtype": "float32"},
}


def build(config: dict[str, Any], name: str | None = None):
    """The engine graph of a config dict (HF-style keys, GPT-2 aliases understood)."""
    from taps_core.models import build_graph, config_from_dict

    return build_graph(config_from_dict(config, name=name))


def strategy_to_json(s) -> dict[str, list]:
    return {"inter": [list(x) for x in s.inter], "intra": [list(x) for x in s.intra]}


def strategy_from_json(d: dict[str, list]):
    from taps_core.ir.strategies import Strategy

    return Strategy(tuple((ch, int(f)) for ch, f in d["inter"]),
                    tuple((ch, int(f)) for ch, f in d["intra"]))


def plans_for(graph, topology, labels: tuple[str, ...] = PLAN_LABELS) -> dict[str, Any]:
    """``taps_core.search.baselines.compare`` restricted to ``labels``; raises if one misfits."""
    from taps_core.plan.records import NotFitting
    from taps_core.search.baselines import compare

    got = compare(graph, topology)
    out = {}
    for label in labels:
        plan = got[label]
        if isinstance(plan, NotFitting):
            raise ValueError(f"plan {label} does not fit: {plan.reason}")
        out[label] = plan
    return out


def random_plan(graph, seed: int, nodes: int = 2, ranks_per_node: int = 2):
    """A plan look-alike with a seeded random strategy of the engine's space for every op:
    not a good plan, a test of the executor (it exercises reshards the planner avoids)."""
    import random
    from types import SimpleNamespace

    from taps_core.ir.strategies import Mesh, SearchSpace, op_strategies

    rng = random.Random(seed)
    mesh = Mesh(nodes, ranks_per_node)
    return SimpleNamespace(ops=[
        SimpleNamespace(name=op.name, strategy=rng.choice(op_strategies(graph, op, mesh,
                                                                        SearchSpace())))
        for op in graph.ops])


# ---- rank side -------------------------------------------------------------------------------


def run_plans(ctx: Any, *, config: dict[str, Any], plans: dict[str, dict[str, Any]], seed: int,
              out_dir: str, steps: int = 0, warmup: int = 1, impl: str = "p2p",
              ) -> dict[str, Any]:
    """Rank job: for every plan, one checked step (gradients saved to ``out_dir``), then
    ``warmup`` + ``steps`` timed steps. Returns per plan the collectives of the checked step
    and the timed steps' records."""
    import torch
    import torch.distributed as dist

    from validation.comm import Comm
    from validation.executor import PlanExecutor
    from validation.layout import MeshCoords
    from validation.reference import init_tensors

    graph = build(config)
    params, data = init_tensors(graph, seed)
    mesh = MeshCoords(ctx.world_size // ctx.ranks_per_node, ctx.ranks_per_node)
    out: dict[str, Any] = {}
    for label, chosen in plans.items():
        strategies = {op: strategy_from_json(s) for op, s in chosen.items()}
        comm = Comm(mesh, ctx.rank, impl=impl, timed=False)
        ex = PlanExecutor(graph, strategies, mesh, comm, params, data)
        loss = ex.step()
        torch.save({"loss": loss, "replication": ex.output_replication,
                    "grads": ex.gradients()}, Path(out_dir) / f"{label}-rank{ctx.rank}.pt")
        checked = comm.records
        timed = []
        comm.timed = True
        for i in range(warmup + steps if steps else 0):
            comm.records = []
            dist.barrier()
            t0 = time.perf_counter()
            ex.step()
            dist.barrier()
            wall = time.perf_counter() - t0
            if i >= warmup:
                timed.append({"wall_s": wall, "records": comm.records})
        out[label] = {"records": checked, "steps": timed}
    return out


# ---- driver side -----------------------------------------------------------------------------


@dataclass
class PlanCheck:
    """One plan's executed step against the single-process reference."""

    label: str
    loss: float
    ref_loss: float
    max_abs_err: float
    max_rel_err: float
    worst_param: str
    replica_spread: float
    ok: bool
    collectives: int
    strategies: dict[str, str] = field(default_factory=dict)


def check_plan(graph, label: str, out_dir: Path, world: int, ref_loss: float,
               ref_grads: dict[str, Any], records: list[dict[str, Any]],
               rtol: float = RTOL, atol: float = ATOL) -> PlanCheck:
    """Assemble the ranks' loss and gradients of one plan and compare with the reference."""
    import torch

    from validation.executor import assemble

    parts = [torch.load(out_dir / f"{label}-rank{r}.pt", weights_only=False) for r in range(world)]
    loss = sum(p["loss"] / p["replication"] for p in parts)
    grads, spread = assemble(graph, [p["grads"] for p in parts])
    worst, abs_err, rel_err, ok = "", 0.0, 0.0, math.isclose(loss, ref_loss, rel_tol=rtol,
                                                             abs_tol=atol)
    for name, ref in ref_grads.items():
        got = grads[name]
        diff = (got - ref).abs()
        err = float(diff.max())
        if err >= abs_err:
            worst, abs_err = name, err
        rel_err = max(rel_err, float((diff / ref.abs().clamp(min=atol)).max()))
        ok = ok and bool(torch.allclose(got, ref, rtol=rtol, atol=atol))
    ok = ok and spread <= atol
    return PlanCheck(label, loss, ref_loss, abs_err, rel_err, worst, spread, ok, len(records))


def execute(config: dict[str, Any], plans: dict[str, Any], *, nodes: int = 2,
            ranks_per_node: int = 2, seed: int = 0, steps: int = 0, warmup: int = 1,
            impl: str = "p2p", timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Run ``plans`` (label -> engine Plan) of ``config`` on the cluster that is up.

    Returns ``{"checks": {label: PlanCheck}, "runs": {label: rank results}}`` where rank results
    are the per-rank return values of :func:`run_plans` for that plan.
    """
    from validation.reference import reference_grads

    graph = build(config)
    chosen = {label: {op.name: strategy_to_json(op.strategy) for op in plan.ops}
              for label, plan in plans.items()}
    with tempfile.TemporaryDirectory(prefix="taps-plans-") as tmp:
        results = launch(RUN_FN, nodes=nodes, ranks_per_node=ranks_per_node,
                         timeout_s=timeout_s,
                         kwargs={"config": config, "plans": chosen, "seed": seed,
                                 "out_dir": tmp, "steps": steps, "warmup": warmup,
                                 "impl": impl})
        ref_loss, ref_grads = reference_grads(graph, seed)
        checks = {}
        for label, plan in plans.items():
            chk = check_plan(graph, label, Path(tmp), nodes * ranks_per_node, ref_loss,
                             ref_grads, results[0][label]["records"])
            chk.strategies = {op.name: op.strategy.label() for op in plan.ops}
            checks[label] = chk
    runs = {label: [res[label] for res in results] for label in plans}
    return {"checks": checks, "runs": runs}
