"""Where pipelining wins: the best plan without stages against the best pipelined plan.

For each scenario, :func:`taps_core.search.planner.search` without stages (``pipeline=False``) and
:func:`taps_core.search.pipeline.search_pipeline` (stages across hosts, 1F1B, TAPS inside each
stage) run on the same workload and memory limit; the row says which is faster, by how much, the
pipeline's shape (stages x micro-batches, bubble) and whether any layer splits a model
dimension (heads, hidden, FFN) across hosts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks.config import BenchConfig
from taps_core.cluster.presets import preset
from taps_core.errors import InfeasibleError
from taps_core.models import build_graph, load_model_config
from taps_core.plan.records import Plan
from taps_core.search.pipeline import search_pipeline
from taps_core.search.planner import search


@dataclass
class PipelineRow:
    model: str
    cluster: str
    batch: int
    flat_s: float | None  # step time without stages (None: nothing fits)
    flat_status: str
    flat_split_across: bool | None  # a layer splits a model dimension across hosts
    piped_s: float | None
    piped_status: str
    stages: int | None
    microbatches: int | None
    bubble_fraction: float | None
    piped_split_across: bool | None
    piped_memory_gib: float | None
    wall_flat_s: float
    wall_piped_s: float
    summary: str = ""

    @property
    def winner(self) -> str:
        if self.piped_s is None:
            return "no stages" if self.flat_s is not None else "neither fits"
        if self.flat_s is None or self.piped_s < self.flat_s:
            return "pipeline"
        return "no stages"


def _splits_across(plan: Plan) -> bool:
    """Some layer splits a letter other than the batch across hosts."""
    return any(
        {ch for ch, _ in op.strategy.inter} - {"b"} for op in plan.ops if op.layer is not None
    )


def run_one(model: str, cluster: str, batch: int, budget_s: float) -> PipelineRow:
    topo = preset(cluster)
    graph = build_graph(load_model_config(model).with_workload(batch_size=batch))
    start = time.perf_counter()
    try:
        flat: Plan | None = search(graph, topo, pipeline=False, time_budget_s=budget_s)
    except InfeasibleError:
        flat = None
    wall_flat = time.perf_counter() - start
    start = time.perf_counter()
    piped = search_pipeline(graph, topo, time_budget_s=budget_s)
    wall_piped = time.perf_counter() - start
    pi = piped.pipeline if piped is not None else None
    return PipelineRow(
        model,
        cluster,
        batch,
        flat.total_time_s if flat else None,
        flat.search.status if flat else "does not fit",
        _splits_across(flat) if flat else None,
        piped.total_time_s if piped else None,
        piped.search.status if piped else "no pipeline fits",
        len(pi.stages) if pi else None,
        pi.microbatches if pi else None,
        pi.bubble_fraction if pi else None,
        _splits_across(piped) if piped else None,
        piped.memory.total / 2**30 if piped else None,
        wall_flat,
        wall_piped,
        (piped.search.note if piped else ""),
    )


def run(cfg: BenchConfig, log: Callable[[str], None] = print) -> list[PipelineRow]:
    rows = []
    for model, cluster, batch in cfg.pipeline_scenarios:
        row = run_one(model, cluster, batch, cfg.pipeline_budget_s)
        rows.append(row)
        log(
            f"pipelining {model} on {cluster} (batch {batch}): no stages "
            f"{row.flat_s if row.flat_s is None else round(row.flat_s, 4)} s "
            f"({row.wall_flat_s:.1f} s search), pipeline "
            f"{row.piped_s if row.piped_s is None else round(row.piped_s, 4)} s "
            f"({row.wall_piped_s:.1f} s search): {row.winner}"
        )
    return rows
