"""Plan search: TAPS (topology-aware DP), the volume-based baseline, Megatron-style and data
parallelism, all under one memory limit and all reported with the topology-aware model.

The memory limit is a sum over ops, which graph elimination cannot see, so it is folded in
with a Lagrange multiplier: minimise ``time + w * memory`` and bisect ``w`` until the plan fits.
If ``w = 0`` fits, the plan is the proven optimum; otherwise it is the best plan found under the
limit, reported with the Lagrangian lower bound.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from taps_core.collectives import CommCost, TopologyCost, VolumeCost
from taps_core.costs import MODES
from taps_core.errors import InfeasibleError, InvalidInputError
from taps_core.graph import OpGraph, OpSpec
from taps_core.layered import solve_problem
from taps_core.linkmodel import LinkModel
from taps_core.plan import Plan, SearchInfo, evaluate
from taps_core.search_problem import SearchProblem, StrategyFilter, build_problem
from taps_core.solver.problem import Solution
from taps_core.strategies import Mesh, SearchSpace, Strategy, op_strategies
from taps_core.topology import Topology

COST_MODELS = ("topology", "volume")
BASELINES = ("taps", "volume", "megatron", "data_parallel")
BISECTION_STEPS = 8
LEANEST_WEIGHT = 1e-3  # seconds per byte
GAP_TOLERANCE = 0.005  # stop bisecting once within 0.5% of the Lagrangian bound
GiB = 2**30


@dataclass(frozen=True)
class NotFitting:
    """A baseline that has no plan under the constraints, and why (one line)."""

    label: str
    reason: str


def _totals(problem: SearchProblem, sol: Solution, weight: float) -> tuple[float, float]:
    """(search cost in seconds, memory per device in bytes) of a solution found at ``weight``."""
    m = sum(float(problem.memory[n][i]) for n, i in sol.strategies.items())
    return sol.cost - weight * m, m


def _fit_memory(problem: SearchProblem, limit: float, mode: str) -> tuple[Solution, SearchInfo]:
    """Solve exactly, then bisect the memory weight if the optimum does not fit."""
    start = time.perf_counter()
    sol = solve_problem(problem, 0.0)
    _, m0 = _totals(problem, sol, 0.0)
    algorithm = "dp-layered" if sol.stats.get("layered") else "dp-elimination"
    count = sum(len(v) for v in problem.time.values())
    if m0 <= limit:
        return sol, SearchInfo(algorithm, time.perf_counter() - start, count, "optimal")
    # the leanest plan: memory dominates (1 s per KiB), time only breaks ties
    lo, hi = 0.0, LEANEST_WEIGHT
    sol_hi = solve_problem(problem, hi)
    t_hi, m_hi = _totals(problem, sol_hi, hi)
    if m_hi > limit:
        raise InfeasibleError(
            f"memory: the leanest plan needs {m_hi / GiB:.3g} GiB per device for {mode}, over "
            f"the {limit / GiB:.3g} GiB limit; use more GPUs, a smaller batch or inference"
        )
    best, best_t = sol_hi, t_hi
    bound = sol.cost
    # first guess: the slope between the fastest and the leanest plan (a dual breakpoint)
    mid = (t_hi - sol.cost) / max(m0 - m_hi, 1.0)
    for _ in range(BISECTION_STEPS):
        if not lo < mid < hi:
            mid = math.sqrt(max(lo, hi * 1e-9) * hi)  # bisect in log space
        cand = solve_problem(problem, mid)
        t, m = _totals(problem, cand, mid)
        bound = max(bound, cand.cost - mid * limit)
        if m <= limit:
            hi = mid
            if t < best_t:
                best, best_t = cand, t
        else:
            lo = mid
        if best_t - bound <= GAP_TOLERANCE * best_t:
            break  # provably within the tolerance of the constrained optimum
        mid = -1.0
    info = SearchInfo(
        algorithm,
        time.perf_counter() - start,
        count,
        "feasible",
        memory_weight=hi,
        lower_bound_s=bound,
        note=f"memory limit binds; best plan within {best_t - bound:.3g} s of the Lagrangian bound",
    )
    return best, info


def check_workload(graph: OpGraph, topology: Topology, space: SearchSpace = SearchSpace()) -> None:
    """Reject workloads the cluster cannot run sensibly, naming the field to change.

    The global batch must split evenly over the nodes (data parallelism across nodes is what
    every baseline assumes), and the model's largest op must be splittable over every GPU.
    """
    cfg = graph.meta.get("config")
    batch = getattr(cfg, "batch_size", None)
    if batch is not None and batch % topology.nodes:
        raise InvalidInputError(
            "batch_size", batch, f"a multiple of the {topology.nodes} nodes of {topology.name}"
        )
    heaviest = max(graph.ops, key=graph.flops)
    mesh = Mesh(topology.nodes, topology.gpus_per_node)
    if not any(s.ways() == mesh.devices for s in op_strategies(graph, heaviest, mesh, space)):
        raise InvalidInputError(
            "topology",
            f"{topology.name} ({mesh.devices} GPUs)",
            f"a cluster the model can use: its largest op {heaviest.name} cannot be split over "
            f"{mesh.devices} GPUs; use fewer GPUs or a larger batch",
        )


def search(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str = "train",
    cost_model: str = "topology",
    memory_limit_bytes: float | None = None,
    space: SearchSpace = SearchSpace(),
    allow: StrategyFilter | None = None,
    label: str = "taps",
    links: LinkModel | None = None,
) -> Plan:
    """Best plan under ``cost_model`` within ``space`` (and ``allow``), reported topology-aware.

    Raises InfeasibleError when no plan fits the memory limit (default: the GPU's memory).
    """
    if mode not in MODES:
        raise InvalidInputError("mode", mode, f"one of {MODES}")
    if cost_model not in COST_MODELS:
        raise InvalidInputError("cost_model", cost_model, f"one of {COST_MODELS}")
    check_workload(graph, topology, space)
    links = links or LinkModel(topology)
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    if limit <= 0:
        raise InvalidInputError("memory_limit", limit, "> 0")
    comm: CommCost = TopologyCost(links) if cost_model == "topology" else VolumeCost()
    start = time.perf_counter()
    problem = build_problem(graph, topology, mode, comm, space=space, allow=allow)
    sol, info = _fit_memory(problem, limit, mode)
    info = SearchInfo(
        info.algorithm,
        time.perf_counter() - start,
        info.num_strategies,
        info.status,
        info.memory_weight,
        info.lower_bound_s,
        info.note,
    )
    choice = {op.name: problem.strategies[op.name][sol.strategies[op.name]] for op in graph.ops}
    return evaluate(
        graph,
        links,
        mode,
        choice,
        label=label,
        cost_model=cost_model,
        search=info,
        memory_limit_bytes=limit,
    )


# ---- baselines as restrictions of the same space ------------------------------------------


def _data_letters(graph: OpGraph) -> frozenset[str]:
    """Letters that index samples: the batch letter and the expert-capacity (token) letter."""
    return frozenset({graph.batch_letter, "c"})


def _whole(split: tuple[tuple[str, int], ...], size: int, letters: frozenset[str]) -> bool:
    """Every split letter is in ``letters`` and the level is used whole (or size is 1)."""
    if size == 1:
        return split == ()
    return (
        bool(split)
        and all(ch in letters for ch, _ in split)
        and any(math.prod(f for _, f in split[i : i + 1]) == size for i in range(len(split)))
    )


def data_parallel_filter(topology: Topology) -> StrategyFilter:
    """Pure data parallelism: every op splits only its sample letters, over every GPU."""

    def allow(graph: OpGraph, op: OpSpec, s: Strategy) -> bool:
        data = _data_letters(graph)
        return _whole(s.inter, topology.nodes, data) and _whole(
            s.intra, topology.gpus_per_node, data
        )

    return allow


def tp_letter(op: OpSpec) -> str | None:
    """The letter Megatron splits for a column ('output features') or row ('contraction') op."""
    if op.tp_role == "column":
        cands = [
            ch for ch in op.output_letters if ch not in op.input_letters[0] and ch not in op.fixed
        ]
    elif op.tp_role == "row":
        cands = [ch for ch in op.input_letters[0] if ch in op.contracted and ch not in op.fixed]
    else:
        return None
    return cands[0] if cands else None


def megatron_filter(graph: OpGraph, topology: Topology) -> StrategyFilter:
    """Megatron-style: data parallel across nodes; inside a node, column/row tensor parallelism
    for marked matmuls and the same letters (heads, FFN, vocabulary) for the ops between them."""
    tp_letters = frozenset(filter(None, (tp_letter(op) for op in graph.ops)))
    g = topology.gpus_per_node

    def allow(graph: OpGraph, op: OpSpec, s: Strategy) -> bool:
        if not _whole(s.inter, topology.nodes, _data_letters(graph)):
            return False
        if g == 1:
            return True
        letter = tp_letter(op)
        if letter is not None:
            if graph.dim_sizes(op)[letter] % g:  # Megatron pads (vocab); we replicate instead
                return s.intra == ()
            return s.intra == ((letter, g),)
        return s.intra == () or (
            len(s.intra) == 1 and s.intra[0] == (s.intra[0][0], g) and s.intra[0][0] in tp_letters
        )

    return allow


def compare(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str = "train",
    memory_limit_bytes: float | None = None,
    space: SearchSpace = SearchSpace(),
) -> dict[str, Plan | NotFitting]:
    """TAPS against the volume-based search, Megatron-style and data-parallel plans.

    All four are searched in the same space and reported with the topology-aware model. When
    the memory limit binds, a fitting baseline plan is also a candidate for TAPS (it lies in
    TAPS's space), so TAPS never reports a slower plan than one it was shown.
    """
    links = LinkModel(topology)
    runs: dict[str, dict[str, object]] = {
        "taps": {"cost_model": "topology"},
        "volume": {"cost_model": "volume"},
        "megatron": {"cost_model": "topology", "allow": megatron_filter(graph, topology)},
        "data_parallel": {"cost_model": "topology", "allow": data_parallel_filter(topology)},
    }
    out: dict[str, Plan | NotFitting] = {}
    batch = getattr(graph.meta.get("config"), "batch_size", None)
    for label, kw in runs.items():
        if label == "data_parallel" and batch is not None and batch % topology.num_gpus:
            out[label] = NotFitting(
                label, f"data parallelism needs the batch ({batch}) to be a multiple of the "
                f"{topology.num_gpus} GPUs")
            continue
        try:
            out[label] = search(
                graph,
                topology,
                mode=mode,
                memory_limit_bytes=memory_limit_bytes,
                space=space,
                label=label,
                links=links,
                **kw,
            )  # type: ignore[arg-type]
        except InfeasibleError as err:
            out[label] = NotFitting(label, str(err))
    taps = out["taps"]
    if isinstance(taps, Plan) and taps.search.status != "optimal":
        for label in ("volume", "megatron", "data_parallel"):
            other = out[label]
            if isinstance(other, Plan) and other.total_time_s < taps.total_time_s - 1e-12:
                info = taps.search
                taps = evaluate(
                    graph,
                    links,
                    mode,
                    other.strategies,
                    label="taps",
                    cost_model="topology",
                    memory_limit_bytes=taps.memory_limit_bytes,
                    search=SearchInfo(
                        info.algorithm,
                        info.time_s,
                        info.num_strategies,
                        "feasible",
                        info.memory_weight,
                        info.lower_bound_s,
                        f"memory limit binds; the {label} plan was the best found",
                    ),
                )
        out["taps"] = taps
    return out


def reduction(taps: Plan, other: Plan) -> float:
    """Fraction by which TAPS's communication time is below ``other``'s (0.85 = 85% less)."""
    if other.comm_time_s <= 0:
        return 0.0
    return float(np.clip(1.0 - taps.comm_time_s / other.comm_time_s, -np.inf, 1.0))
