"""Plan search: TAPS (topology-aware DP), the volume-based baseline, Megatron-style and data
parallelism, all under one memory limit and all reported with the topology-aware model.

Every planner gets the same exact search: the plain DP when the fastest plan fits in memory,
otherwise a Lagrangian bound and an exact search over (time, memory) fronts within its gap
(:mod:`taps_core.constrained`). A plan's status is "optimal" only when that is proven.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from taps_core.collectives import CommCost, TopologyCost, VolumeCost
from taps_core.constrained import Bounds, FrontSearch, dual_bounds, evaluate_at, memory_of
from taps_core.costs import MODES
from taps_core.errors import InfeasibleError, InvalidInputError
from taps_core.graph import OpGraph, OpSpec
from taps_core.layered import Assignment
from taps_core.linkmodel import LinkModel
from taps_core.memory_fit import within_limit
from taps_core.plan import OpChoice, Plan, SearchInfo, evaluate
from taps_core.search_problem import SearchProblem, StrategyFilter, build_problem
from taps_core.solver.fronts import KnotError, TruncatedError
from taps_core.strategies import Mesh, SearchSpace, Strategy, op_strategies
from taps_core.topology import Topology
from taps_core.units import GiB

COST_MODELS = ("topology", "volume")
BASELINES = ("taps", "volume", "megatron", "data_parallel")
LEANEST_WEIGHT = 1e-3  # seconds per byte: memory dominates, time only breaks ties
PROOF_TOLERANCE = 1e-9  # a plan within this fraction of the dual bound is proven optimal
FIRST_GAP_FRACTION = 1 / 64  # the first front search keeps points this close to the bound
DEFAULT_TIME_BUDGET_S = 60.0  # the exact memory-bound search reports its gap past this
PIPELINE_COMM_SHARE = 0.1  # pipelines are tried when communication is at least this share


@dataclass(frozen=True)
class NotFitting:
    """A baseline that has no plan under the constraints, and why (one line)."""

    label: str
    reason: str


def _fit_memory(
    problem: SearchProblem,
    limit: float,
    mode: str,
    cutoff: float = math.inf,
    deadline: float = math.inf,
) -> tuple[Assignment, SearchInfo, float]:
    """The fastest plan within ``limit`` bytes per device, proven optimal (see
    :mod:`taps_core.constrained`); the dual gap is reported when a proof is out of reach.
    Raises :class:`_SlowerError` when even the unconstrained optimum is not below ``cutoff``
    (seconds): nothing here can beat a plan already found."""
    start = time.perf_counter()
    fast = evaluate_at(problem, 0.0)
    if fast[1] >= cutoff * (1 - 1e-12):
        raise _SlowerError(fast[1])
    algorithm = "dp-layered" if fast[0].stats.get("layered") else "dp-elimination"
    count = problem.num_strategies

    def info(status: str, lower: float | None, note: str, lam: float = 0.0) -> SearchInfo:
        return SearchInfo(
            algorithm, time.perf_counter() - start, count, status, lam, lower, note
        )

    if fast[2] <= limit:
        return fast[0], info("optimal", fast[1], ""), fast[1]
    lean = evaluate_at(problem, LEANEST_WEIGHT)
    if lean[2] > limit:
        raise _NoFitError(
            fast[1],
            f"memory: the leanest plan needs {lean[2] / GiB:.3g} GiB per device for {mode}, "
            f"over the {limit / GiB:.3g} GiB limit; use more GPUs or a smaller batch"
            + ("" if mode == "infer" else ", or plan inference")
        )
    bounds = dual_bounds(problem, limit, fast, lean)
    if bounds.lower >= cutoff * (1 - 1e-12):
        raise _SlowerError(fast[1])  # proven: no fitting plan here beats the one in hand
    gap = bounds.best_time - bounds.lower
    if gap <= PROOF_TOLERANCE * bounds.best_time:
        return bounds.best, info(
            "optimal", bounds.lower, "memory limit binds; optimal by the Lagrangian bound",
            bounds.lam,
        ), fast[1]
    exact, tried, unproven = _deepening(problem, limit, bounds, deadline, cutoff)
    if exact is None and tried < 0:
        raise _SlowerError(fast[1])  # proven: every fitting plan is no faster than the cutoff
    if exact is None:
        return bounds.best, info(
            "feasible",
            bounds.lower,
            f"memory limit binds; best plan within {gap:.3g} s of the Lagrangian bound "
            f"(the exact front search outgrew its budget or time at a {tried:.3g} s gap)",
            bounds.lam,
        ), fast[1]
    if unproven is not None:
        better = exact if exact.cost < bounds.best_time else bounds.best
        cost = min(exact.cost, bounds.best_time)
        return better, info(
            "feasible",
            unproven,
            f"memory limit binds; best plan within {cost - unproven:.3g} s of a proven bound "
            "(the layer-count program hit its time limit)",
            bounds.lam,
        ), fast[1]
    return exact, info(
        "optimal",
        exact.cost,
        f"memory limit binds; exact over (time, memory) fronts within the "
        f"{gap:.3g} s dual gap",
        bounds.lam,
    ), fast[1]


# said in the note of every plan whose proof leaves pipeline shapes out (the dashboard reads it)
STAGES_UNPROVEN = "other pipeline shapes are not proven"


class SlowerThanCutoffError(Exception):
    """No plan of the searched space beats the cutoff (seconds): proven by bounds."""


class _SlowerError(Exception):
    """The unconstrained optimum (seconds) is no faster than a plan already found."""

    def __init__(self, free_time_s: float) -> None:
        super().__init__(free_time_s)
        self.free_time_s = free_time_s


class _NoFitError(InfeasibleError):
    """Nothing fits; carries the unconstrained optimum's time (a bound for other settings)."""

    def __init__(self, free_time_s: float, message: str) -> None:
        super().__init__(message)
        self.free_time_s = free_time_s


def _deepening(
    problem: SearchProblem,
    limit: float,
    bounds: Bounds,
    deadline: float = math.inf,
    cutoff: float = math.inf,
) -> tuple[Assignment | None, float, float | None]:
    """Front searches with a growing gap until one proves its answer: a pass keeping every plan
    within ``g`` of the dual bound is exact once its best time is within ``g`` of it too. No
    gap beyond ``cutoff`` (seconds, a plan already in hand) is needed: a pass up to it that
    finds nothing proves no fitting plan is faster (gap tried returned as -1).

    Returns (plan, gap tried, lower bound when the plan is not proven optimal)."""
    try:
        fs = FrontSearch.prepare(problem, limit, bounds.lam)
    except KnotError:  # no series-parallel schedule: the dual gap stands
        return None, 0.0, None
    full = bounds.best_time - bounds.lower
    if cutoff < bounds.best_time:
        full = cutoff - bounds.lower
    g = full * FIRST_GAP_FRACTION
    while True:
        try:
            found = fs.run(bounds.lower + g, deadline=deadline)
        except TruncatedError:
            return None, g, None
        if found is not None and "lower_bound_s" in found.stats:
            # the chain's integer program ran out of time: its bound holds for plans within g
            return found, g, max(bounds.lower, min(found.stats["lower_bound_s"], bounds.lower + g))
        if found is not None and found.cost - bounds.lower <= g * (1 + 1e-9):
            return found, g, None
        if g >= full:
            if found is None and cutoff < bounds.best_time:
                return None, -1.0, None
            return found, g, None
        g = min(full, g * 4)


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
    time_budget_s: float | None = DEFAULT_TIME_BUDGET_S,
    pipeline: bool | None = None,
    allow_for: Callable[[OpGraph, Topology], StrategyFilter | None] | None = None,
    expert_seed: bool = True,
) -> Plan:
    """Best plan under ``cost_model`` within ``space`` (and ``allow``), reported topology-aware.

    With ``expert_seed`` (TAPS: the topology model, the default space, no ``allow``), the
    fastest configuration Megatron-LM or DeepSpeed would run is found first, exhaustively
    (:func:`expert_plan`): it bounds the exact search without stages (what cannot beat it is
    pruned by proven bounds) and TAPS never returns a slower plan. ``pipeline``: False keeps to
    plans without stages; True also searches every stage of the seed's pipeline shape exactly
    (minutes on large models, guarded by ``time_budget_s``); None neither.

    Without a seed (a model that is not a stack of identical layers, or rules in ``allow``),
    ``pipeline`` None tries stages in training on several hosts when the plan without stages
    does not fit, is memory-bound or spends >= 10% of its step communicating, and the rules can
    be applied per stage (``allow_for(stage graph, stage cluster)``); the faster plan wins.

    Raises InfeasibleError when no plan fits the memory limit (default: the GPU's memory).
    The exact search under a binding memory limit stops after ``time_budget_s`` seconds
    (None: no limit) with the best plan found and a proven lower bound (status "feasible").
    """
    start = time.perf_counter()
    seed = None
    if allow is None and cost_model == "topology" and expert_seed and space == SearchSpace():
        seed = expert_plan(graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes,
                           links=links, max_stages=1 if pipeline is False else None)
    cutoff = seed.total_time_s if seed is not None else math.inf
    flat: Plan | None = None
    error: InfeasibleError | None = None
    cut = False  # the search without stages proved nothing there beats the seed
    try:
        flat = _search_flat(
            graph, topology, mode=mode, cost_model=cost_model,
            memory_limit_bytes=memory_limit_bytes, space=space, allow=allow, label=label,
            links=links, time_budget_s=time_budget_s, cutoff_s=cutoff,
        )
    except InfeasibleError as err:
        error = err
    except SlowerThanCutoffError:
        cut = True
    if seed is not None:
        flat_proven = cut or (flat is not None and flat.search.status == "optimal")
        return _with_seed(graph, topology, flat, flat_proven, seed, mode, memory_limit_bytes,
                          space, links, label, start, pipeline, time_budget_s)
    if pipeline is None:
        # worth trying in training on several hosts when the plan without stages is not
        # already compute-bound: nothing fits, memory binds, or communication is >= 10%
        rules_per_stage = allow is None or allow_for is not None
        pressed = flat is None or bool(flat.search.note) or (
            flat.comm_time_s >= PIPELINE_COMM_SHARE * flat.total_time_s
        )
        pipeline = mode == "train" and topology.nodes > 1 and rules_per_stage and pressed
    if pipeline:
        from taps_core.pipeline import objective, search_pipeline

        left = None if time_budget_s is None else max(
            5.0, time_budget_s - (time.perf_counter() - start)
        )
        piped = search_pipeline(
            graph, topology, mode=mode, cost_model=cost_model,
            memory_limit_bytes=memory_limit_bytes, allow_for=allow_for, space=space,
            label=label, links=links or LinkModel(topology), time_budget_s=left,
        )
        if piped is not None and (
            flat is None or objective(piped, cost_model) < objective(flat, cost_model)
        ):
            note = "pipelined: faster than the best plan without stages" if flat is not None else (
                "pipelined: no plan without stages fits"
            )
            return replace(
                piped,
                search=replace(
                    piped.search,
                    time_s=time.perf_counter() - start,
                    note=f"{piped.search.note}; {note}",
                ),
            )
    if flat is None:
        assert error is not None
        raise error
    return flat


def expert_plan(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str = "train",
    memory_limit_bytes: float | None = None,
    links: LinkModel | None = None,
    max_stages: int | None = None,
) -> Plan | None:
    """The fastest configuration Megatron-LM or DeepSpeed would run (exhaustive, see
    :mod:`taps_core.search.configs`) with at most ``max_stages`` pipeline stages, or None when
    none fits or the model is not a stack of identical layers built from a config."""
    from taps_core.search.configs import search_configurations, supports

    if not supports(graph):
        return None
    found = [
        search_configurations(graph, topology, mode=mode, space=sp,
                              memory_limit_bytes=memory_limit_bytes, links=links,
                              max_stages=max_stages).plan
        for sp in ("megatron", "deepspeed")
    ]
    plans = [p for p in found if p is not None]
    return min(plans, key=lambda p: (p.total_time_s, p.search.algorithm)) if plans else None


def _with_seed(
    graph: OpGraph,
    topology: Topology,
    flat: Plan | None,
    flat_proven: bool,
    seed: Plan,
    mode: str,
    memory_limit_bytes: float | None,
    space: SearchSpace,
    links: LinkModel | None,
    label: str,
    start: float,
    pipeline: bool | None,
    time_budget_s: float | None,
) -> Plan:
    """TAPS's answer given the fastest framework configuration ``seed``: the best plan without
    stages when it beats the seed, else the seed. With ``pipeline`` True a pipelined seed's
    shape (stages, split, micro-batches) is kept and every stage's plan searched exactly within
    ``time_budget_s`` (never slower than the seed, whose stage plans lie in that space).

    ``flat_proven``: the search without stages proved its optimum (or that nothing beats the
    seed). The status is "optimal" only when that covers the whole space asked for: stages
    excluded (``pipeline`` False) or impossible (inference, one host, one layer). Otherwise it
    is "feasible" with the compute floor (every FLOP at peak x efficiency on every GPU) as the
    certified bound."""
    from taps_core.pipeline import plan_setting
    from taps_core.search.configs import compute_floor_s

    staged = pipeline is not False and mode == "train" and topology.nodes > 1 and (
        graph.num_layers >= 2
    )
    open_note = STAGES_UNPROVEN
    if flat is not None and flat.total_time_s < seed.total_time_s:
        if not staged or flat.search.status != "optimal":
            return flat  # proven over the whole space asked for (or its own gap stands)
        return replace(flat, search=replace(
            flat.search,
            time_s=time.perf_counter() - start,
            status="feasible",
            lower_bound_s=compute_floor_s(graph, topology, mode),
            note="; ".join(x for x in (
                flat.search.note,
                f"optimal among plans without stages and faster than every framework "
                f"configuration; {open_note}",
            ) if x),
        ))
    best, how, guard = seed, f"the fastest framework configuration ({seed.search.note})", ""
    if pipeline is True and seed.pipeline is not None:
        st = seed.pipeline.stages
        deadline = math.inf if time_budget_s is None else start + time_budget_s
        refined = plan_setting(
            graph, topology, p=len(st), m=seed.pipeline.microbatches,
            split=tuple(s.layers[1] - s.layers[0] + 1 for s in st), mode=mode,
            memory_limit_bytes=memory_limit_bytes, space=space, links=links, deadline=deadline,
        )
        if refined is None and time.perf_counter() > deadline:
            guard = "; stage refinement stopped by the time budget"
        if refined is not None and refined.total_time_s < seed.total_time_s * (1 - 1e-12):
            best = refined
            how = (
                f"the stage shape of the fastest framework configuration "
                f"({seed.search.note.split(': ')[-1]}), every stage's plan searched exactly"
            )
    flat_note = (
        f"the best plan without stages takes {flat.total_time_s:.4g} s" if flat is not None
        else "no plan without stages beats it (proven by bounds)" if flat_proven
        else "no plan without stages found"
    )
    proven = flat_proven and not staged and best.pipeline is None
    info = SearchInfo(
        seed.search.algorithm if best is seed else "taps-stages",
        time.perf_counter() - start,
        best.search.num_strategies,
        "optimal" if proven else "feasible",
        0.0,
        best.total_time_s if proven else compute_floor_s(graph, topology, mode),
        f"{how}; {flat_note}" + ("" if proven else f"; {open_note}") + guard,
    )
    return replace(best, label=label, cost_model="topology", search=info)


def _search_flat(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str,
    cost_model: str,
    memory_limit_bytes: float | None,
    space: SearchSpace,
    allow: StrategyFilter | None,
    label: str,
    links: LinkModel | None,
    time_budget_s: float | None,
    cutoff_s: float = math.inf,
) -> Plan:
    """The best plan without pipeline stages (see :func:`search`), within the memory limit
    with its transient buffers counted exactly (:func:`within_limit`). Raises
    :class:`SlowerThanCutoffError` when it is proven no faster than ``cutoff_s`` seconds."""
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    if not limit > 0:
        raise InvalidInputError("memory_limit", limit, "> 0")

    def run(search_limit: float) -> Plan:
        return _search_flat_at(
            graph, topology, mode=mode, cost_model=cost_model, memory_limit_bytes=search_limit,
            space=space, allow=allow, label=label, links=links, time_budget_s=time_budget_s,
            cutoff_s=cutoff_s,
        )

    return within_limit(run, limit)


def _search_flat_at(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str,
    cost_model: str,
    memory_limit_bytes: float | None,
    space: SearchSpace,
    allow: StrategyFilter | None,
    label: str,
    links: LinkModel | None,
    time_budget_s: float | None,
    cutoff_s: float = math.inf,
) -> Plan:
    """One search of :func:`_search_flat` at a given limit."""
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
    deadline = math.inf if time_budget_s is None else start + time_budget_s
    # gradient accumulation: k micro-batches never run faster than k's divisors do without a
    # memory limit, so a count is searched only while that bound can still beat the best
    free: dict[int, float] = {}
    best: tuple[float, float, int, OpGraph, SearchProblem, Assignment, SearchInfo] | None = None
    explored: list[SearchInfo] = []
    error: InfeasibleError | None = None
    unexplored: list[float] = []
    cut = False  # some count was skipped as no faster than the cutoff
    for k in microbatch_counts(graph, topology, mode):
        bound = max((free[d] for d in free if k % d == 0), default=0.0)
        bar = min(best[0] if best is not None else math.inf, cutoff_s)
        if bound >= bar * (1 - 1e-12):
            cut = cut or best is None
            continue
        if best is not None and time.perf_counter() > deadline:
            unexplored.append(bound)  # out of time: only its divisors' bound is known
            continue
        g_k = graph if k == 1 else _micro_graph(graph, k)
        problem = build_problem(
            g_k, topology, mode, comm, space=space, allow=allow, microbatches=k
        )
        if best is not None:
            stage = useful_zero_stages(mode, k)[0]
            free[k] = evaluate_at(problem.restricted(stage), 0.0)[1]
            if free[k] >= bar * (1 - 1e-12):
                continue  # even without a memory limit k micro-batches are slower
        try:
            sub, sol, info, free[k] = _best_zero_stage(problem, limit, mode, bar, deadline)
        except _NoFitError as err:
            free[k] = err.free_time_s
            error = err if error is None else error
            continue
        except _SlowerError as err:
            free[k] = err.free_time_s
            cut = cut or best is None
            continue
        explored.append(info)
        memory = memory_of(sub, sol)
        if best is None or (sol.cost, memory) < best[:2]:
            best = (sol.cost, memory, k, g_k, sub, sol, info)
        if sol.cost <= free[k] * (1 + 1e-12):
            break  # the unconstrained optimum fits: more micro-batches cannot be faster
    if best is None and (cut or error is None):
        raise SlowerThanCutoffError(cutoff_s)
    if best is None:
        assert error is not None
        raise InfeasibleError(str(error))
    cost, _, k, g_k, problem, sol, info = best
    lower = min(
        [(x.lower_bound_s if x.lower_bound_s is not None else cost) for x in explored]
        + unexplored
    )
    proven = cost <= lower * (1 + 1e-9) and all(
        x.status == "optimal" or (x.lower_bound_s or 0.0) >= cost * (1 - 1e-9) for x in explored
    )
    note = info.note + (f"; {k} micro-batches" if k > 1 else "")
    if unexplored:
        note += f"; {len(unexplored)} micro-batch counts left unsearched (time budget)"
    info = SearchInfo(
        info.algorithm,
        time.perf_counter() - start,
        info.num_strategies,
        "optimal" if proven else "feasible",
        info.memory_weight,
        min(lower, cost),
        note.lstrip("; "),
    )
    choice = choices_of(problem, sol)
    return evaluate(
        g_k,
        links,
        mode,
        choice,
        label=label,
        cost_model=cost_model,
        search=info,
        memory_limit_bytes=limit,
        microbatches=k,
    )


def search_fixed(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str,
    comm: CommCost,
    limit: float,
    microbatches: int = 1,
    activation_copies: int = 1,
    zero_stages: tuple[int, ...] | None = None,
    space: SearchSpace = SearchSpace(),
    allow: StrategyFilter | None = None,
    deadline: float = math.inf,
) -> tuple[SearchProblem, Assignment, SearchInfo]:
    """The exact search at one micro-batch count (``graph`` is one micro-batch), as a pipeline
    stage needs it: ``activation_copies`` micro-batches held at once, given ZeRO stages.
    Raises InfeasibleError when nothing fits."""
    problem = build_problem(
        graph, topology, mode, comm, space=space, allow=allow, microbatches=microbatches,
        activation_copies=activation_copies,
    )
    try:
        sub, sol, info, _ = _best_zero_stage(
            problem, limit, mode, deadline=deadline, stages=zero_stages
        )
    except _NoFitError as err:
        raise InfeasibleError(str(err)) from None
    return sub, sol, info


def useful_zero_stages(mode: str, microbatches: int = 1) -> tuple[int, ...]:
    """ZeRO stages that can win, in order of time. With one micro-batch, stages 0 and 1 move
    the same bytes as stage 2 and hold more, so stage 2 dominates them; with gradient
    accumulation stage 1 reduces once per step where stage 2 reduce-scatters per micro-batch.
    In inference, weights are either held (0) or sharded and gathered before use (3)."""
    if mode != "train":
        return (0, 3)
    return (2, 3) if microbatches == 1 else (1, 2, 3)


def _best_zero_stage(
    problem: SearchProblem,
    limit: float,
    mode: str,
    cutoff: float = math.inf,
    deadline: float = math.inf,
    stages: tuple[int, ...] | None = None,
) -> tuple[SearchProblem, Assignment, SearchInfo, float]:
    """The fastest fitting plan over the plan-wide ZeRO stages (each searched exactly), and
    the unconstrained optimum's time (seconds).

    A later stage never runs faster than an earlier one with the same shardings, so once an
    unconstrained optimum fits, the later stages are skipped."""
    found: list[tuple[SearchProblem, Assignment, SearchInfo, float]] = []
    error: InfeasibleError | None = None
    free = math.inf
    for zero in stages or useful_zero_stages(mode, problem.microbatches):
        sub = problem.restricted(zero)
        bar = min((x[3] for x in found), default=cutoff)
        try:
            sol, info, fast = _fit_memory(sub, limit, mode, bar, deadline)
        except _NoFitError as err:
            error = err
            free = min(free, err.free_time_s)
            continue
        except _SlowerError as err:
            free = min(free, err.free_time_s)
            continue
        free = min(free, fast)
        found.append((sub, sol, info, sol.cost))
        if info.status == "optimal" and not info.memory_weight and not info.note:
            break  # the unconstrained optimum fits: no later stage is faster
    if not found:
        if error is None:
            raise _SlowerError(free)
        raise _NoFitError(free, str(error))
    best = min(found, key=lambda x: (x[3], memory_of(x[0], x[1])))
    lower = min(
        (x[2].lower_bound_s if x[2].lower_bound_s is not None else x[3]) for x in found
    )
    sub, sol, info, cost = best
    proven = cost <= lower * (1 + 1e-9) and all(
        x[2].status == "optimal" or (x[2].lower_bound_s or 0.0) >= cost * (1 - 1e-9)
        for x in found
    )
    note = info.note
    if len(found) > 1:
        note = (note + "; " if note else "") + (
            f"ZeRO stage {_stage(sub)} fastest of {', '.join(str(_stage(x[0])) for x in found)}"
        )
    return sub, sol, SearchInfo(
        info.algorithm,
        sum(x[2].time_s for x in found),
        info.num_strategies,
        "optimal" if proven else "feasible",
        info.memory_weight,
        min(lower, cost),
        note,
    ), free


def _stage(problem: SearchProblem) -> int:
    """The plan-wide ZeRO stage of a restricted problem."""
    return max(z[0] for z in problem.option_zero.values())


def microbatch_counts(graph: OpGraph, topology: Topology, mode: str) -> list[int]:
    """Gradient-accumulation steps the search may use (training): every k that divides the
    batch so that each micro-batch still splits over the nodes. 1 alone in inference or for a
    graph without a model config to rebuild at the micro-batch size."""
    cfg = graph.meta.get("config")
    batch = getattr(cfg, "batch_size", None)
    if mode != "train" or batch is None or not hasattr(cfg, "with_workload"):
        return [1]
    per_node = batch // topology.nodes
    return [k for k in range(1, per_node + 1) if per_node % k == 0]


def _micro_graph(graph: OpGraph, k: int) -> OpGraph:
    """The model graph at 1/k of the batch (one micro-batch)."""
    from taps_core.models import build_graph

    cfg = graph.meta["config"]
    return build_graph(cfg.with_workload(batch_size=cfg.batch_size // k))  # type: ignore[attr-defined]


def choices_of(problem: SearchProblem, sol: Assignment) -> dict[str, OpChoice]:
    """Every op's strategy, ZeRO stage and recomputation from a solved assignment."""
    out: dict[str, OpChoice] = {}
    for node, names in problem.members.items():
        s = problem.strategies[node][sol.strategies[node]]
        zero = problem.option_zero[node][sol.options[node]]
        lay = problem.layer[node]
        rc = bool(sol.recompute.get(lay, False)) if lay is not None else False
        for name in names:
            out[name] = OpChoice(s, zero, rc)
    return {op.name: out[op.name] for op in problem.graph.ops}


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
            if graph.dim_sizes(op)[letter] % g and letter not in op.padded:
                return s.intra == ()  # a dim that cannot be split (or padded) stays whole
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
    time_budget_s: float | None = DEFAULT_TIME_BUDGET_S,
    pipeline: bool | None = None,
) -> dict[str, Plan | NotFitting]:
    """TAPS against the volume-based search, Megatron-style and data-parallel plans.

    All four are reported with the topology-aware model. The Megatron-style baseline is the
    fastest of every configuration Megatron-LM accepts (exhaustive, :mod:`taps_core.search.
    configs`) for a stack of identical layers, else the search under its rules; the
    data-parallel one likewise DeepSpeed's ZeRO-DP space (ZeRO 0-3, micro-batches,
    checkpointing). When the memory limit binds, a fitting baseline plan is also a candidate
    for TAPS (it lies in TAPS's space), so TAPS never reports a slower plan than one it was
    shown.
    """
    from taps_core.search.configs import best_configuration, supports

    links = LinkModel(topology)
    layered = supports(graph)
    runs: dict[str, dict[str, object]] = {
        "taps": {"cost_model": "topology"},
        "volume": {
            "cost_model": "volume",
            # stages reach it as candidates (every fitting plan below, the framework's too)
            **({"pipeline": False} if layered and pipeline is None else {}),
        },
        "megatron": {
            "cost_model": "topology",
            "allow": megatron_filter(graph, topology),
            "allow_for": megatron_filter,
        },
        "data_parallel": {
            "cost_model": "topology",
            "allow": data_parallel_filter(topology),
            "pipeline": False,
        },
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
            if label in FRAMEWORK_OF and layered and space == SearchSpace():
                out[label] = best_configuration(
                    graph, topology, mode=mode, space=FRAMEWORK_OF[label],
                    memory_limit_bytes=memory_limit_bytes, links=links, label=label,
                    max_stages=1 if pipeline is False else None,
                )
                continue
            taps = out.get("taps")
            if label == "volume" and layered and pipeline is not True and isinstance(taps, Plan):
                out[label] = _volume_below(graph, topology, taps, mode, memory_limit_bytes,
                                           space, links, time_budget_s)
                continue
            out[label] = search(
                graph,
                topology,
                mode=mode,
                memory_limit_bytes=memory_limit_bytes,
                space=space,
                label=label,
                links=links,
                time_budget_s=time_budget_s,
                **{"pipeline": pipeline, **kw},
            )  # type: ignore[arg-type]
        except InfeasibleError as err:
            out[label] = NotFitting(label, str(err))
    return _share_candidates(out)


# baselines that are a framework's whole space for a stack of identical layers (exhaustive)
FRAMEWORK_OF = {"megatron": "megatron", "data_parallel": "deepspeed"}


def _volume_below(
    graph: OpGraph,
    topology: Topology,
    taps: Plan,
    mode: str,
    memory_limit_bytes: float | None,
    space: SearchSpace,
    links: LinkModel,
    time_budget_s: float | None,
) -> Plan:
    """The volume-based search without stages, cut off at the TAPS plan's volume objective
    (seconds; that plan lies in its space): when nothing without stages is proven to beat it,
    the volume planner's pick is the TAPS plan itself, said in the note."""
    from taps_core.pipeline import objective

    start = time.perf_counter()
    try:
        return _search_flat(
            graph, topology, mode=mode, cost_model="volume", memory_limit_bytes=memory_limit_bytes,
            space=space, allow=None, label="volume", links=links, time_budget_s=time_budget_s,
            cutoff_s=objective(taps, "volume"),
        )
    except SlowerThanCutoffError:
        return replace(taps, label="volume", cost_model="volume", search=SearchInfo(
            "dp-layered", time.perf_counter() - start, taps.search.num_strategies, "feasible",
            0.0, None,
            "the TAPS plan: no plan without stages has a lower volume objective (proven by "
            "bounds); pipeline shapes are not searched under the volume model",
        ))


# Whose space holds whose plans: TAPS and the volume-based search search the whole space, so
# every baseline's plan (pipelined or not) is also one of theirs.
HOLDS_EVERY_PLAN = {"taps": "topology", "volume": "volume"}


def _share_candidates(out: dict[str, Plan | NotFitting]) -> dict[str, Plan | NotFitting]:
    """Give TAPS and the volume-based search every other fitting plan as a candidate.

    Where a search could not prove its optimum (memory-bound fronts or a pipeline's guided
    enumeration cut short), another planner's plan may be better under its own objective; it
    lies in its space, so it is taken, said in the note, and the comparison stays fair: no
    planner reports a plan worse under its own model than one another planner found.
    """
    from taps_core.pipeline import objective

    result = dict(out)
    for label, model in HOLDS_EVERY_PLAN.items():
        mine = out.get(label)
        if not isinstance(mine, Plan):
            continue
        best = mine
        for other_label, other in out.items():
            if (
                other_label != label
                and isinstance(other, Plan)
                and objective(other, model) < objective(best, model) * (1 - 1e-9)
            ):
                best = other
        if best is mine:
            continue
        info = mine.search
        value = objective(best, model)
        proven = info.lower_bound_s is not None and value <= info.lower_bound_s * (1 + 1e-9)
        result[label] = replace(
            best,
            label=label,
            cost_model=model,
            search=SearchInfo(
                info.algorithm,
                info.time_s,
                info.num_strategies,
                "optimal" if proven else "feasible",
                info.memory_weight,
                info.lower_bound_s,
                f"the {best.label} plan (it lies in this search's space) beat the best this "
                f"search found; {info.note}".rstrip("; "),
            ),
        )
    return result


def reduction(taps: Plan, other: Plan) -> float:
    """Fraction by which TAPS's communication time is below ``other``'s (0.85 = 85% less)."""
    if other.comm_time_s <= 0:
        return 0.0
    return float(np.clip(1.0 - taps.comm_time_s / other.comm_time_s, -np.inf, 1.0))
