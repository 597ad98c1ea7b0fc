"""A framework configuration's stage before the links price it, kept across link speeds.

A stage's step is its compute plus, per collective phase, ``steps x alpha + bytes x beta`` of the
links it runs on (:class:`~taps_core.costs.collectives.TopologyCost`); its compute, memory and
phases depend on the model, the mode and the host type (GPU, GPUs per host, compute efficiency),
never on a bandwidth. :class:`StageShape` keeps the phases summed per (level, group size,
pattern), so pricing a stage at any link speed is a handful of multiply-adds, and
:func:`shape_memo` keeps the shapes of one model, mode and host type for the process: a
bandwidth sweep, an edited link or a second page prices each configuration's stages once.
It is a memo of pure results (the same figures with it cold), bounded to a few models.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import GpuSpec
from taps_core.costs.collectives import Phase, TopologyCost
from taps_core.costs.ops import Memory
from taps_core.ir.graph import OpGraph
from taps_core.memo import LruMemo
from taps_core.models import build_graph
from taps_core.plan.evaluate import PricingMemo, evaluate
from taps_core.plan.records import Plan, SearchInfo
from taps_core.search.fixed_config import Layout3D, fixed_choices, one_stage
from taps_core.search.pipeline import SYNC_LABELS, stage_graph
from taps_core.search.sends import tied_shard_bytes

# (level, group size, pattern) -> (steps, bytes per rank), summed over a stage's phases
PhaseSums = tuple[tuple[tuple[str, int, str], int, float], ...]


def phase_sums(phases: Iterable[Phase]) -> PhaseSums:
    """``phases`` summed per (level, group size, pattern), in a fixed order."""
    sums: dict[tuple[str, int, str], list[float]] = {}
    for p in phases:
        acc = sums.setdefault(p.route, [0, 0.0])
        acc[0] += p.steps
        acc[1] += p.per_rank_bytes
    return tuple((key, int(steps), nbytes) for key, (steps, nbytes) in sorted(sums.items()))


def sums_seconds(sums: PhaseSums, comm: TopologyCost) -> float:
    """Seconds of the summed phases on ``comm``'s links (steps x alpha + bytes x beta)."""
    total = 0.0
    for (level, q, pattern), steps, nbytes in sums:
        alpha, beta = comm.coefficients(level, q, pattern)
        total += steps * alpha + nbytes * beta
    return total


@dataclass(frozen=True)
class StageShape:
    """A stage's compute (seconds per step), memory (bytes per device, one micro-batch in
    flight) and phases summed: all of them and the once-per-step sync ones."""

    compute_s: float
    memory: Memory
    comm: PhaseSums
    sync: PhaseSums


def shape_of(plan: Plan) -> StageShape:
    """The shape of a stage plan priced by :func:`~taps_core.plan.evaluate.evaluate`."""
    phases = [(label, p) for op in plan.ops for label, p in op.phases]
    return StageShape(
        plan.compute_time_s,
        plan.memory,
        phase_sums(p for _, p in phases),
        phase_sums(p for label, p in phases if label.startswith(SYNC_LABELS)),
    )


class ShapeMemo:
    """The stage shapes, small graphs and tied-weight exchanges of one model, mode and host
    type (see the module docstring); filled as configurations are priced."""

    def __init__(self, cfg: object, mode: str) -> None:
        self.cfg, self.mode = cfg, mode
        self._graphs: dict[tuple[int, int], OpGraph] = {}
        # a stage's graph and its op costs, shared by every layout priced on it (op costs and
        # conversions depend on the host type, not on how many hosts a stage spans)
        self._stage_graphs: dict[tuple[int, int, bool, bool], tuple[OpGraph, PricingMemo]] = {}
        self._shapes: dict[tuple[object, ...], tuple[StageShape, Plan]] = {}
        self._tied: dict[Layout3D, float | None] = {}

    def micro(self, samples: int, layers: int) -> OpGraph:
        """The model with ``layers`` layers at a micro-batch of ``samples``."""
        key = (samples, layers)
        if key not in self._graphs:
            cfg = replace(self.cfg, num_hidden_layers=layers)  # type: ignore[type-var]
            self._graphs[key] = build_graph(cfg.with_workload(batch_size=samples))
        return self._graphs[key]

    def shape(
        self, lay: Layout3D, head: bool, tail: bool, layers: int, links: LinkModel
    ) -> StageShape:
        """The shape of a stage of ``layers`` layers of ``lay`` (with the model's head and
        tail where asked), evaluated once on the first hosts of ``links``."""
        return self._stage(lay, head, tail, layers, links)[0]

    def tied_bytes(self, lay: Layout3D, links: LinkModel) -> float | None:
        """Bytes per GPU the first and last stage exchange per step for a tied embedding's
        gradient (:func:`~taps_core.search.sends.tied_shard_bytes`), None without one."""
        lay = one_stage(lay)
        if lay not in self._tied:
            one = self.micro(lay.micro_batch_size * lay.dp, 1)
            last = self._stage(lay, False, True, 1, links)[1]
            first = self._stage(lay, True, False, 1, links)[1]
            self._tied[lay] = tied_shard_bytes(one, last, first)
        return self._tied[lay]

    def _stage_graph(
        self, samples: int, layers: int, head: bool, tail: bool
    ) -> tuple[OpGraph, PricingMemo]:
        """A stage of ``layers`` layers at a micro-batch of ``samples`` (with the model's head
        and tail where asked) and the op costs priced on it so far."""
        key = (samples, layers, head, tail)
        if key not in self._stage_graphs:
            micro = self.micro(samples, layers)
            sg = micro if head and tail else stage_graph(
                micro, 0, layers - 1, head=head, tail=tail
            )
            self._stage_graphs[key] = (sg, PricingMemo())
        return self._stage_graphs[key]

    def _stage(
        self, lay: Layout3D, head: bool, tail: bool, layers: int, links: LinkModel
    ) -> tuple[StageShape, Plan]:
        lay = one_stage(lay)
        key = (lay, head, tail, layers)
        if key not in self._shapes:
            stage_links = links.first_hosts(lay.hosts_per_stage)
            sg, memo = self._stage_graph(lay.micro_batch_size * lay.dp, layers, head, tail)
            info = SearchInfo(algorithm="fixed", time_s=0.0, num_strategies=0, status="fixed")
            plan = evaluate(
                sg, stage_links, self.mode, fixed_choices(sg, lay), label="stage",
                cost_model="topology", search=info, memory_limit_bytes=float("inf"),
                microbatches=lay.microbatches, memo=memo, per_link=False,
            )
            # the plan's strategies serve tied_bytes; its times are this link speed's: unread
            self._shapes[key] = (shape_of(plan), plan)
        return self._shapes[key]


_MEMOS: LruMemo[ShapeMemo] = LruMemo(8)


def shape_memo(
    cfg: object, mode: str, gpu: GpuSpec, gpus_per_node: int, compute_efficiency: float
) -> ShapeMemo:
    """The process's :class:`ShapeMemo` of one model config, mode and host type (the last 8
    used; the GPU, GPUs per host and compute efficiency are what op costs depend on)."""
    key = (cfg, mode, gpu, gpus_per_node, compute_efficiency)
    return _MEMOS.get_or(key, lambda: ShapeMemo(cfg, mode))
