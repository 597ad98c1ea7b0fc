"""Pipeline stages across hosts on top of the intra-operator search (Alpa's two levels).

The layers are cut into ``p`` contiguous stages, each on ``nodes / p`` hosts; the global
batch flows through them as ``m`` micro-batches under a 1F1B schedule (Narayanan et al. 2021).
Inside each stage the exact TAPS search (:func:`~taps_core.search.flat.search_fixed`) chooses
every op's sharding and the memory levers, with stage ``i`` holding the activations of
``min(p - i, m)`` micro-batches at once (1F1B's in-flight count; the middle stages share one
plan, sized for the most in flight among them). Between stages only the
boundary activation moves, point to point, forward and (its gradient) backward for every
micro-batch, and a tied embedding's gradient once per step between the first and the last
stage (:mod:`taps_core.search.sends`); those two stages are re-planned against each other's
split of the tied weight.

The outer search goes through stage counts (most stages first), micro-batch counts (p, 2p, 4p,
... in increasing order, until the step stops improving) and layer splits (balanced, or the last
stage one layer lighter for the LM head), skipping a setting whose compute alone cannot beat the
best pipeline found, and stopping after two stage counts in a row that do worse; stages with the
same layers and position share one search. The outer search is a guided enumeration, not a
proof: each stage's plan is exact for that stage (:mod:`taps_core.search.pipeline_bound` bounds
every shape, which is what proves a plan over all of them). Stages keep
ZeRO at stage 1 (the distributed optimizer: ZeRO-2/3 re-gather per micro-batch, which
pipelines do not use).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology, host_renamer
from taps_core.costs.collectives import TopologyCost, VolumeCost
from taps_core.errors import InfeasibleError, InvalidInputError, TapsError
from taps_core.ir.graph import OpGraph
from taps_core.ir.strategies import SearchSpace
from taps_core.plan.evaluate import evaluate, link_traffic, plan_record
from taps_core.plan.records import OpChoice, OpPlan, PipelineInfo, Plan, SearchInfo, StageInfo
from taps_core.search.flat import choices_of, micro_graph, search_fixed
from taps_core.search.memory_fit import within_limit
from taps_core.search.problem import BuildMemo, SearchProblem, StrategyFilter
from taps_core.search.sends import (
    boundary_sends,
    embedding_exchange_extra,
    plus_seconds,
    send_flows,
    stage_send_seconds,
    tied_exchange,
    tied_shard_bytes,
    with_tied_exchange,
)
from taps_core.solver.clock import cpu_seconds

SCOUT_STAGE_BUDGET_S = 4.0  # a stage's exact search while comparing settings (then in full)
PIPELINE_ZERO = (1,)  # the distributed optimizer; ZeRO-2/3 re-gather per micro-batch


def objective(plan: Plan, cost_model: str) -> float:
    """What a planner minimises: the step under its own cost model (seconds)."""
    return plan.total_time_s if cost_model == "topology" else plan.volume_objective_s


def layer_range(graph: OpGraph) -> tuple[int, int] | None:
    """(first, last) layer index of the model, or None without layers."""
    layers = [op.layer for op in graph.ops if op.layer is not None]
    return (min(layers), max(layers)) if layers else None


def stage_graph(graph: OpGraph, first: int, last: int, *, head: bool, tail: bool) -> OpGraph:
    """The ops of layers ``first..last``, with the ops before the layers when ``head`` and
    after them when ``tail``. Activations from another stage become inputs; a tied weight
    whose owner lives on another stage is held as its own copy (as Megatron does)."""
    positions = [i for i, op in enumerate(graph.ops) if op.layer is not None]
    lo, hi = positions[0], positions[-1]
    ops = tuple(
        op
        for i, op in enumerate(graph.ops)
        if (op.layer is not None and first <= op.layer <= last)
        or (op.layer is None and ((head and i < lo) or (tail and i > hi)))
    )
    names = {t for op in ops for t in (*op.inputs, op.output)}
    tensors = {}
    for name in names:
        t = graph.tensors[name]
        if t.tied and t.tied_to not in names:
            t = replace(t, tied=False, tied_to="")
        tensors[name] = t
    return OpGraph(
        graph.name, tensors, ops, graph.batch_letter, {**graph.meta, "stage": (first, last)}
    )


@dataclass(frozen=True)
class _StagePlan:
    plan: Plan
    sync_s: float  # once per step
    volume_sync_s: float  # the same under the volume model


@dataclass
class _StageCache:
    """What one pipeline search has planned (stage plans by stage key), the tables its
    stage searches share when they build on hosts of the same width (:class:`BuildMemo`) and
    the memory multiplier (seconds per byte) the last memory-bound stage search of a width,
    micro-batch count and cost model (and place: first, last, between) settled at: the next
    one's dual search starts there."""

    plans: dict[tuple, _StagePlan | None] = field(default_factory=dict)
    memos: dict[tuple[int, str], BuildMemo] = field(default_factory=dict)
    multipliers: dict[tuple, float] = field(default_factory=dict)

    def memo(self, links: LinkModel, cost_model: str) -> BuildMemo:
        """The build memo of a stage priced on ``links`` (a stage's hosts) by ``cost_model``."""
        key = (links.topology.nodes, cost_model)
        found = self.memos.get(key)
        if found is None or found.topology is not links.topology:
            comm = TopologyCost(links) if cost_model == "topology" else VolumeCost()
            found = self.memos[key] = BuildMemo(links.topology, comm)
        return found


SYNC_LABELS = ("grad_sync", "zero gather")  # labels of the once-per-step weight phases


def _sync_seconds(plan: Plan, comm: TopologyCost | VolumeCost) -> float:
    """Seconds of the plan's weight phases (gradient sync; once per step at ZeRO <= 1)."""
    return sum(
        comm.seconds(p) for op in plan.ops for lbl, p in op.phases if lbl.startswith(SYNC_LABELS)
    )


def candidate_splits(layers: int, p: int) -> list[tuple[int, ...]]:
    """Layer counts per stage tried per shape: balanced, and balanced with the last stage one
    layer lighter (for the LM head)."""
    q, r = divmod(layers, p)
    base = tuple(q + (1 if i < r else 0) for i in range(p))
    out = [base]
    if p > 1 and base[-1] > 1:
        lighter = list(base)
        lighter[-1] -= 1
        lighter[(r if r < p - 1 else 0)] += 1
        out.append(tuple(lighter))
    return list(dict.fromkeys(out))


def all_stage_counts(nodes: int, layers: int) -> tuple[int, ...]:
    """Every stage count of the pipeline space, most first: 2 <= p <= the hosts and the layers
    (at least one layer per stage, as Megatron-LM requires), dividing the hosts."""
    return tuple(p for p in range(min(nodes, layers), 1, -1) if nodes % p == 0)


def valid_microbatches(batch: int, hosts_per_stage: int) -> list[int]:
    """Every micro-batch count m of the pipeline space: it divides the batch and the
    micro-batch still splits over a stage's hosts."""
    return [
        m for m in range(1, batch + 1) if batch % m == 0 and (batch // m) % hosts_per_stage == 0
    ]


def _microbatch_options(batch: int, hosts_per_stage: int, p: int) -> list[int]:
    """Micro-batch counts m tried (of :func:`valid_microbatches`): p, 2p, 4p, ... and the
    largest possible."""
    valid = valid_microbatches(batch, hosts_per_stage)
    if not valid:
        return []
    picks = {max(valid)}
    m = p
    while m <= max(valid):
        fit = [v for v in valid if v >= m]
        if fit:
            picks.add(fit[0])
        m *= 2
    return sorted(picks)


def search_pipeline(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str = "train",
    cost_model: str = "topology",
    memory_limit_bytes: float | None = None,
    allow_for: Callable[[OpGraph, Topology], StrategyFilter | None] | None = None,
    space: SearchSpace = SearchSpace(),
    label: str = "taps",
    links: LinkModel | None = None,
    time_budget_s: float | None = 60.0,
    stage_counts: tuple[int, ...] | None = None,
) -> Plan | None:
    """The best pipelined plan (None when no pipeline applies or fits); see the module doc.

    ``allow_for(stage_graph, stage_topology)`` restricts each stage's strategies (a baseline);
    ``stage_counts`` limits the stage counts tried (default: every divisor of the hosts >= 2).
    """

    span = layer_range(graph)
    cfg = graph.meta.get("config")
    if mode != "train" or span is None or cfg is None or not hasattr(cfg, "with_workload"):
        return None
    nodes = topology.nodes
    layers = span[1] - span[0] + 1
    # most stages first: their stage searches are the smallest
    counts = stage_counts or all_stage_counts(nodes, layers)
    if not counts:
        return None
    start = time.perf_counter()
    deadline = math.inf if time_budget_s is None else cpu_seconds() + time_budget_s
    links = links or LinkModel(topology)
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    batch = cfg.batch_size
    peak = topology.gpu.peak_flops * topology.compute_efficiency
    work = sum(graph.flops(op) for op in graph.ops) * 3.0  # forward + backward of the step
    floor_s = work / (peak * topology.num_gpus)  # every GPU busy, no bubble, no comm
    cache = _StageCache()
    best: Plan | None = None  # the fastest pipeline so far, scored by ``best_score`` (s)
    best_score = math.inf
    tried = 0
    worse_in_a_row = 0
    for p in counts:
        hosts = nodes // p
        best_p: float | None = None
        for m in _microbatch_options(batch, hosts, p):
            if best is not None and floor_s * (m + p - 1) / m >= best_score:
                continue  # even a perfectly balanced, silent pipeline is slower
            if cpu_seconds() > deadline:
                break
            micro = micro_graph(graph, m)
            best_m: float | None = None
            for split in candidate_splits(layers, p):
                tried += 1
                plan = _assemble(
                    micro, topology, links, mode, cost_model, limit, p, m, split, span[0],
                    cache, allow_for, space, deadline,
                    SCOUT_STAGE_BUDGET_S,
                )
                score = None if plan is None else objective(plan, cost_model)
                if score is not None and (best is None or score < best_score):
                    best, best_score = plan, score
                    chosen = (micro, p, m, split)
                if score is not None and (best_m is None or score < best_m):
                    best_m = score
            if best_m is not None and best_p is not None and best_m > best_p:
                break  # more micro-batches stopped paying: smaller ones per GPU are slower
            if best_m is not None and (best_p is None or best_m < best_p):
                best_p = best_m
        if best_p is not None and best is not None and best_p > best_score:
            worse_in_a_row += 1
            if worse_in_a_row >= 2:
                break  # fewer, larger stages kept getting slower
        else:
            worse_in_a_row = 0
    if best is None:
        return None
    plan = best
    if plan.search.status != "optimal" and cpu_seconds() < deadline:
        # the scouting stage searches were cut short: plan the chosen setting in full
        micro, p, m, split = chosen
        again = _assemble(
            micro, topology, links, mode, cost_model, limit, p, m, split, span[0],
            _StageCache(memos=cache.memos), allow_for, space, deadline,
        )
        if again is not None and objective(again, cost_model) <= best_score * (1 + 1e-12):
            plan = again
    # "optimal" is never claimed for a pipeline: its stage plans may be proven optimal, but
    # the stage count, layer split and micro-batch count come from a guided enumeration
    stages = "proven optimal" if plan.search.status == "optimal" else "best found"
    info = SearchInfo(
        algorithm="pipeline + " + plan.search.algorithm,
        time_s=time.perf_counter() - start,
        num_strategies=plan.search.num_strategies,
        status="feasible",
        note=f"{len(plan.pipeline.stages)} stages x {plan.pipeline.microbatches} micro-batches, "
        f"best of {tried} pipeline settings (a guided enumeration, not a proof); each stage's "
        f"plan: {stages}",
    )
    return replace(plan, label=label, search=info)


def _assemble(
    micro: OpGraph,
    topology: Topology,
    links: LinkModel,
    mode: str,
    cost_model: str,
    limit: float,
    p: int,
    m: int,
    split: tuple[int, ...],
    first_layer: int,
    cache: _StageCache,
    allow_for: Callable[[OpGraph, Topology], StrategyFilter | None] | None,
    space: SearchSpace,
    deadline: float,
    stage_budget_s: float = math.inf,
) -> Plan | None:
    """Plan every stage of one (p, m, split) setting and put the pipeline together; a stage's
    exact memory-bound search gets at most ``stage_budget_s`` seconds."""
    hosts = topology.nodes // p
    stage_plans: list[_StagePlan] = []
    ranges = stage_ranges(first_layer, split)
    for i, (a, b) in enumerate(ranges):
        head, tail = i == 0, i == p - 1
        # in flight under 1F1B: p - i micro-batches; the middle stages share one plan sized
        # for the most of them (stage 1's), so stages with equal layers are searched once
        copies = min(p if head else (1 if tail else p - 1), m)
        key = (b - a + 1, head, tail, copies, hosts, m)
        # the last stage prices its tied exchange against the first stage's embedding
        first = stage_plans[0].plan if tail and p > 1 else None
        if first is not None:
            key = (*key, split[0])
        if key not in cache.plans and cpu_seconds() > deadline:
            return None  # out of time: this setting stays unplanned
        if key not in cache.plans:
            cache.plans[key] = _plan_stage(
                micro, links, mode, cost_model, limit, a, b, head, tail, copies, hosts, m,
                allow_for, space,
                min(deadline, cpu_seconds() + stage_budget_s), cache, first,
            )
        found = cache.plans[key]
        if found is None:
            return None
        stage_plans.append(found)
    plan = _put_together(micro, topology, links, mode, cost_model, limit, m, ranges, stage_plans)
    if p > 1 and cost_model == "topology":
        agreed = _agree_on_tied(micro, links, mode, limit, ranges, stage_plans, m, allow_for,
                                space, deadline, cache)
        if agreed is not stage_plans:
            other = _put_together(micro, topology, links, mode, cost_model, limit, m, ranges,
                                  agreed)
            plan = min(plan, other, key=lambda pl: pl.total_time_s)
    return plan


TIED_ROUNDS = 3  # first and last stage re-planned against each other at most this often


def _agree_on_tied(
    micro: OpGraph,
    links: LinkModel,
    mode: str,
    limit: float,
    ranges: list[tuple[int, int]],
    stage_plans: list[_StagePlan],
    m: int,
    allow_for: Callable[[OpGraph, Topology], StrategyFilter | None] | None,
    space: SearchSpace,
    deadline: float,
    cache: _StageCache,
) -> list[_StagePlan]:
    """The first and the last stage re-planned in turn, each against the other's split of a
    tied embedding (its exchange is a whole weight where they differ), while that lowers their
    seconds plus the exchange's; ``stage_plans`` itself when nothing changes (no tied weight
    across them, or no better pair)."""
    p = len(ranges)
    hosts = links.topology.nodes // p
    shard = tied_shard_bytes(micro, stage_plans[-1].plan)
    if shard is None or shard == tied_shard_bytes(micro, stage_plans[-1].plan,
                                                  stage_plans[0].plan):
        return stage_plans  # no tied weight across them, or they split it alike already
    plans = stage_plans

    def total(first: _StagePlan, last: _StagePlan) -> float:
        return first.plan.total_time_s + last.plan.total_time_s + tied_exchange(
            micro, links, first.plan, last.plan, hosts, p)[0]

    for _ in range(TIED_ROUNDS):
        (a, b), (c, d) = ranges[0], ranges[-1]
        first = _plan_stage(micro, links, mode, "topology", limit, a, b, True, False,
                            min(p, m), hosts, m, allow_for, space, deadline, cache,
                            last=plans[-1].plan)
        if first is None:
            break
        last = _plan_stage(micro, links, mode, "topology", limit, c, d, False, True, 1, hosts, m,
                           allow_for, space, deadline, cache, first.plan)
        if last is None or total(first, last) >= total(plans[0], plans[-1]) * (1 - 1e-12):
            break
        plans = [first, *plans[1:-1], last]
    return plans


def plan_setting(
    graph: OpGraph,
    topology: Topology,
    *,
    p: int,
    m: int,
    split: tuple[int, ...],
    mode: str = "train",
    cost_model: str = "topology",
    memory_limit_bytes: float | None = None,
    space: SearchSpace = SearchSpace(),
    links: LinkModel | None = None,
    deadline: float = math.inf,
) -> Plan | None:
    """The pipeline of one setting (``p`` stages of ``split`` layers, ``m`` micro-batches) with
    every stage's plan searched exactly (None when a stage cannot fit or time runs out)."""

    return best_setting(
        graph, topology, p=p, m=m, splits=(split,), mode=mode, cost_model=cost_model,
        memory_limit_bytes=memory_limit_bytes, space=space, links=links, deadline=deadline,
    )


def best_setting(
    graph: OpGraph,
    topology: Topology,
    *,
    p: int,
    m: int,
    splits: tuple[tuple[int, ...], ...],
    mode: str = "train",
    cost_model: str = "topology",
    memory_limit_bytes: float | None = None,
    space: SearchSpace = SearchSpace(),
    links: LinkModel | None = None,
    deadline: float = math.inf,
) -> Plan | None:
    """The fastest of :func:`plan_setting` over ``splits`` (the first of equal ones; None when
    none can be planned), stages with the same layers and position searched once for all."""
    span = layer_range(graph)
    for split in splits:
        if span is None or topology.nodes % p or sum(split) != span[1] - span[0] + 1:
            raise InvalidInputError("split", split, f"{p} stage sizes summing to the layers")
    assert span is not None
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    micro, links, cache = micro_graph(graph, m), links or LinkModel(topology), _StageCache()
    best: Plan | None = None
    for split in splits:
        plan = _assemble(micro, topology, links, mode, cost_model, limit, p, m, split, span[0],
                         cache, None, space, deadline)
        if plan is not None and (best is None or plan.total_time_s < best.total_time_s * (
                1 - 1e-12)):
            best = plan
    return best


def balanced_split(layers: int, p: int) -> tuple[int, ...]:
    """Layer counts of ``p`` stages as even as possible, the first stages one heavier."""
    return candidate_splits(layers, p)[0]


def stage_ranges(first_layer: int, split: tuple[int, ...]) -> list[tuple[int, int]]:
    """First and last layer of each stage."""
    ranges, lo = [], first_layer
    for n in split:
        ranges.append((lo, lo + n - 1))
        lo += n
    return ranges


def in_flight(i: int, p: int, m: int) -> int:
    """Micro-batches whose activations stage ``i`` of ``p`` holds at once under 1F1B."""
    return min(p - i, m)


def assemble_stages(
    micro: OpGraph,
    topology: Topology,
    links: LinkModel,
    mode: str,
    cost_model: str,
    limit: float,
    p: int,
    m: int,
    split: tuple[int, ...],
    first_layer: int,
    stage_plan: Callable[[OpGraph, LinkModel, int], Plan],
) -> Plan:
    """A pipeline whose stage plans come from ``stage_plan(stage_graph, stage_links,
    micro-batches in flight)`` (a given configuration, not a search), put together as
    :func:`search_pipeline` does."""
    sub_links = links.first_hosts(topology.nodes // p)
    ranges = stage_ranges(first_layer, split)
    stage_plans = []
    for i, (a, b) in enumerate(ranges):
        sg = stage_graph(micro, a, b, head=i == 0, tail=i == p - 1)
        plan = stage_plan(sg, sub_links, in_flight(i, p, m))
        stage_plans.append(
            _StagePlan(
                plan, _sync_seconds(plan, TopologyCost(sub_links)),
                _sync_seconds(plan, VolumeCost()),
            )
        )
    return _put_together(micro, topology, links, mode, cost_model, limit, m, ranges, stage_plans)


def recost_pipeline(plan: Plan, graph: OpGraph, links: LinkModel) -> Plan:
    """A pipelined ``plan`` of ``graph`` costed on ``links`` (the same cluster shape, e.g.
    another network bandwidth): its stages, layer split, micro-batches and every op's choice
    kept, each stage evaluated on its own hosts and put together as the search does. On the
    links it was planned on, it gives the plan's own figures."""
    pi = plan.pipeline
    span = layer_range(graph)
    if pi is None or span is None:
        raise InvalidInputError("plan", plan.label, "a pipelined plan of a layered model")
    p, m = len(pi.stages), pi.microbatches
    chosen: dict[int, dict[str, OpChoice]] = {}
    for op in plan.ops:
        chosen.setdefault(op.stage or 0, {})[op.name] = OpChoice(op.strategy, op.zero,
                                                                 op.recompute, op.selective)
    stages = iter(range(p))

    def stage_plan(sg: OpGraph, sub: LinkModel, copies: int) -> Plan:
        mine = chosen[next(stages)]  # called once per stage, in order
        return evaluate(
            sg, sub, plan.mode, {op.name: mine[op.name] for op in sg.ops}, label="stage",
            cost_model=plan.cost_model, search=plan.search,
            memory_limit_bytes=plan.memory_limit_bytes, microbatches=m,
            activation_copies=copies,
        )

    out = assemble_stages(
        micro_graph(graph, m), links.topology, links, plan.mode, plan.cost_model,
        plan.memory_limit_bytes, p, m, pi.layer_split, span[0], stage_plan,
    )
    return replace(out, label=plan.label, search=plan.search)


def _put_together(
    micro: OpGraph,
    topology: Topology,
    links: LinkModel,
    mode: str,
    cost_model: str,
    limit: float,
    m: int,
    ranges: list[tuple[int, int]],
    stage_plans: list[_StagePlan],
) -> Plan:
    """The pipeline of planned stages: sends, the 1F1B step, one merged Plan."""
    p = len(ranges)
    hosts = topology.nodes // p
    # boundary sends, per micro-batch, forward and backward
    boundary = _boundary_bytes(micro, ranges)
    sends = boundary_sends(links, p, boundary)
    send_s = stage_send_seconds(sends)
    stages: list[StageInfo] = []
    loads = np.zeros(len(links.links))
    p2p_bytes = 0.0
    send_vol = [0.0] * p
    flows: list[tuple[int, int, float]] = []
    volume = VolumeCost()
    for i, send in enumerate(sends):
        per_gpu = boundary[i] / (hosts * topology.gpus_per_node)
        send_vol[i] += volume.seconds_per_byte * per_gpu
        send_vol[i + 1] += volume.seconds_per_byte * per_gpu
        loads += m * (send.forward_loads + send.backward_loads)
        flows += send_flows(send.src, send.dst, topology.gpus_per_node, m * boundary[i])
        flows += send_flows(send.dst, send.src, topology.gpus_per_node, m * boundary[i])
        p2p_bytes += m * (send.forward_bytes + send.backward_bytes)
    tied_s, tied_bytes, tied_loads, tied_flows = tied_exchange(
        micro, links, stage_plans[0].plan, stage_plans[-1].plan, hosts, p)
    loads += tied_loads
    for i, sp in enumerate(stage_plans):
        own = sp.plan.total_time_s - sp.sync_s
        own_vol = sp.plan.volume_objective_s - sp.volume_sync_s
        tied_here = tied_s if i in (0, p - 1) else 0.0
        stages.append(
            StageInfo(
                i,
                ranges[i],
                tuple(range(i * hosts, (i + 1) * hosts)),
                hosts * topology.gpus_per_node,
                sp.plan,
                own / m + send_s[i],
                sp.sync_s + tied_here,
                send_s[i],
                0.0,
                own_vol / m + send_vol[i],
                sp.volume_sync_s,
                tied_here,
            )
        )
    slowest = max(stages, key=lambda st: st.microbatch_s)
    busy = one_f_one_b_busy([st.microbatch_s for st in stages], m)
    step = busy + max(st.sync_s for st in stages)
    compute = slowest.plan.compute_time_s
    comm = step - compute - (busy - m * slowest.microbatch_s)
    bubble = step - compute - comm
    vol_mb = [st.volume_microbatch_s for st in stages]
    volume_step = one_f_one_b_busy(vol_mb, m) + max(st.volume_sync_s for st in stages)
    info = PipelineInfo(tuple(stages), m, micro.meta["config"].batch_size, step, compute, comm,
                        bubble, p2p_bytes, "1F1B", volume_step, tuple(flows), tied_bytes,
                        tuple(tied_flows))
    return _merge(micro, topology, links, mode, cost_model, limit, info, loads, stage_plans)


def one_f_one_b_busy(microbatch_s: list[float], m: int) -> float:
    """Seconds from the first forward to the last backward of ``m`` micro-batches under 1F1B,
    given each stage's seconds per micro-batch (forward plus backward plus its sends): the
    slowest stage paces ``m - 1`` of them and every stage is crossed once."""
    return (m - 1) * max(microbatch_s) + sum(microbatch_s)


def _boundary_bytes(micro: OpGraph, ranges: list[tuple[int, int]]) -> list[float]:
    """Bytes of the activation leaving each stage but the last (one micro-batch)."""
    out = []
    for _, b in ranges[:-1]:
        last = [op for op in micro.ops if op.layer == b][-1]
        out.append(float(micro.tensors[last.output].nbytes))
    return out


def _plan_stage(
    micro: OpGraph,
    links: LinkModel,
    mode: str,
    cost_model: str,
    limit: float,
    a: int,
    b: int,
    head: bool,
    tail: bool,
    copies: int,
    hosts: int,
    m: int,
    allow_for: Callable[[OpGraph, Topology], StrategyFilter | None] | None,
    space: SearchSpace,
    deadline: float,
    cache: _StageCache,
    first: Plan | None = None,
    last: Plan | None = None,
) -> _StagePlan | None:
    """The exact intra-operator plan of one stage on its hosts (None if it cannot fit);
    ``links`` is the whole cluster's link model; the tied embedding's exchange is priced on
    the last stage against ``first``'s embedding and on the first against ``last``'s head;
    ``cache`` holds the tables stage searches on hosts of this width share."""
    sg = stage_graph(micro, a, b, head=head, tail=tail)
    sub_links = links.first_hosts(hosts)
    sub = sub_links.topology
    memo = cache.memo(sub_links, cost_model)
    comm = memo.comm
    allow = allow_for(sg, sub) if allow_for is not None else None
    p = links.topology.nodes // hosts

    def priced(problem: SearchProblem) -> SearchProblem:
        """The first and the last stage weigh the tied embedding's exchange (paid per step)
        their split makes against the other end's (the last stage's alone without it)."""
        if p < 2 or cost_model != "topology":
            return problem
        if head and last is not None:
            found = embedding_exchange_extra(problem, micro, links, hosts, p, last)
            return problem if found is None else plus_seconds(problem, *found)
        if not tail:
            return problem
        return with_tied_exchange(problem, micro, links, hosts, p, first)

    similar = (hosts, m, cost_model)
    alike = (*similar, head, tail)  # a stage in the same place is the nearer guess

    def run(search_limit: float) -> Plan:
        hints = cache.multipliers
        problem, sol, info = search_fixed(
            sg, sub, mode=mode, comm=comm, limit=search_limit, microbatches=m,
            activation_copies=copies, zero_stages=PIPELINE_ZERO, space=space, allow=allow,
            deadline=deadline, adjust=priced, memo=memo,
            lam_hint=hints.get(alike, hints.get(similar, 0.0)),
        )
        if info.memory_weight > 0:
            hints[similar] = hints[alike] = info.memory_weight
        return evaluate(
            sg, sub_links, mode, choices_of(problem, sol), label="stage", cost_model=cost_model,
            search=info, memory_limit_bytes=limit, microbatches=m, activation_copies=copies,
        )

    try:
        plan = within_limit(run, limit)
    except (InfeasibleError, TapsError):
        return None
    return _StagePlan(
        plan, _sync_seconds(plan, TopologyCost(sub_links)), _sync_seconds(plan, VolumeCost())
    )


def _merge(
    micro: OpGraph,
    topology: Topology,
    links: LinkModel,
    mode: str,
    cost_model: str,
    limit: float,
    info: PipelineInfo,
    p2p_loads: np.ndarray,
    stage_plans: list[_StagePlan],
) -> Plan:
    """One Plan for the whole pipeline: every stage's ops (tagged), the links of all stages
    (each stage's plan on its own hosts, shifted to them) plus the sends."""
    index = {(u, v): i for i, (u, v, _) in enumerate(links.links)}
    load = p2p_loads.copy()
    ops = []
    intra = inter = volume = 0.0
    memory = max((sp.plan.memory for sp in stage_plans), key=lambda mm: mm.total)
    g = topology.gpus_per_node
    for st in info.stages:
        shift = st.hosts[0]
        rename = host_renamer(topology, shift, g)
        for lt in st.plan.links:
            key = (rename(lt.src), rename(lt.dst))
            if key in index:
                load[index[key]] += lt.bytes
        ops += [_moved(op, st) for op in st.plan.ops]
        intra += st.plan.intra_node_bytes
        inter += st.plan.inter_node_bytes
        volume += st.plan.volume_comm_time_s
    inter += info.p2p_bytes + info.tied_sync_bytes
    traffic = link_traffic(links, load)
    statuses = {sp.plan.search.status for sp in stage_plans}
    base = stage_plans[0].plan
    search = SearchInfo(
        base.search.algorithm,
        sum(sp.plan.search.time_s for sp in stage_plans),
        sum(sp.plan.search.num_strategies for sp in stage_plans),
        "optimal" if statuses == {"optimal"} else "feasible",
    )
    return plan_record(
        micro, topology, label="taps", mode=mode, cost_model=cost_model, ops=tuple(ops),
        links=traffic, memory=memory, memory_limit_bytes=limit, intra_node_bytes=intra,
        inter_node_bytes=inter, search=search, volume_comm_time_s=volume,
        microbatches=info.microbatches, flash_attention=base.flash_attention, pipeline=info,
    )


def _moved(op: OpPlan, st: StageInfo) -> OpPlan:
    """A stage op tagged with its stage and, when the stage's plan was searched on other
    (identical) layers, renamed to the layer this stage holds."""
    if op.layer is None or st.layers is None:
        return replace(op, stage=st.index)
    searched = [o.layer for o in st.plan.ops if o.layer is not None]
    shift = st.layers[0] - min(searched)
    if not shift:
        return replace(op, stage=st.index)
    layer = op.layer + shift
    head, _, rest = op.name.partition(".")
    name = f"L{layer}.{rest}" if head == f"L{op.layer}" and rest else op.name
    return replace(op, stage=st.index, layer=layer, name=name)
