"""The exact per-op search without pipeline stages: the plain DP when the fastest plan fits
in memory, otherwise a Lagrangian bound and an exact search over (time, memory) fronts within
its gap (:mod:`taps_core.search.memory_bound`), over micro-batch counts and ZeRO stages.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import CommCost, TopologyCost, VolumeCost
from taps_core.costs.ops import MODES
from taps_core.errors import InfeasibleError, InvalidInputError
from taps_core.ir.graph import OpGraph
from taps_core.ir.strategies import Mesh, SearchSpace, op_strategies
from taps_core.plan.evaluate import evaluate
from taps_core.plan.records import OpChoice, Plan, SearchInfo
from taps_core.search.chain_memory import MEMORY_STEPS
from taps_core.search.layered import Assignment
from taps_core.search.memory_bound import (
    Bounds,
    FrontSearch,
    Solved,
    dual_bounds,
    evaluate_at,
    memory_of,
)
from taps_core.search.memory_fit import within_limit
from taps_core.search.problem import (
    FULL,
    KEPT,
    SELECTIVE,
    BuildMemo,
    SearchProblem,
    StrategyFilter,
    build_problem,
)
from taps_core.solver.clock import cpu_seconds
from taps_core.solver.fronts import KnotError, TruncatedError
from taps_core.units import GiB

COST_MODELS = ("topology", "volume")


LEANEST_WEIGHT = 1e-3  # seconds per byte: memory dominates, time only breaks ties


PROOF_TOLERANCE = 1e-9  # a plan within this fraction of the dual bound is proven optimal


FIRST_GAP_FRACTION = 1 / 64  # the first front search keeps points this close to the bound


def _fit_memory(
    problem: SearchProblem,
    limit_bytes: float,
    mode: str,
    cutoff_s: float = math.inf,
    deadline: float = math.inf,
    exact_fronts: bool = True,
    lam_hint: float = 0.0,
) -> tuple[Assignment, SearchInfo, float]:
    """The fastest plan within ``limit`` bytes per device, proven optimal (see
    :mod:`taps_core.search.memory_bound`); the dual gap is reported when a proof is out of reach.
    Without ``exact_fronts`` the Lagrangian's best fitting plan and bound are the answer (no
    front search: deterministic and fast, the gap reported).
    Raises :class:`_SlowerError` when even the unconstrained optimum is not below ``cutoff``
    (seconds): nothing here can beat a plan already found. ``lam_hint``: the multiplier of a
    similar problem, to start the dual's search at (see :func:`_lagrangian`)."""
    start = time.perf_counter()
    fast, lean, bounds = _lagrangian(problem, limit_bytes, cutoff_s, lam_hint, free_first=True)
    algorithm = "dp-layered" if fast.plan.stats.get("layered") else "dp-elimination"
    count = problem.num_strategies

    def info(status: str, lower: float | None, note: str, lam: float = 0.0) -> SearchInfo:
        return SearchInfo(
            algorithm=algorithm,
            time_s=time.perf_counter() - start,
            num_strategies=count,
            status=status,
            memory_weight=lam,
            lower_bound_s=lower,
            note=note,
        )

    if lean is None:
        return fast.plan, info("optimal", fast.time_s, ""), fast.time_s
    if bounds is None:
        raise _no_fit(fast, lean, limit_bytes, mode)
    gap = bounds.best_time - bounds.lower
    if gap <= PROOF_TOLERANCE * bounds.best_time:
        return bounds.best, info(
            "optimal", bounds.lower, "memory limit binds; optimal by the Lagrangian bound",
            bounds.lam,
        ), fast.time_s
    if not exact_fronts:
        return bounds.best, info(
            "feasible", bounds.lower,
            f"memory limit binds; best plan within {gap:.3g} s of the Lagrangian bound "
            "(the exact front search not asked for)", bounds.lam,
        ), fast.time_s
    exact, tried, unproven = _deepening(problem, limit_bytes, bounds, deadline, cutoff_s)
    if exact is None and tried < 0:
        raise _SlowerError(fast.time_s)  # proven: every fitting plan is no faster than the cutoff
    if exact is None:
        return bounds.best, info(
            "feasible",
            bounds.lower,
            f"memory limit binds; best plan within {gap:.3g} s of the Lagrangian bound "
            f"(the exact front search outgrew its budget or time at a {tried:.3g} s gap)",
            bounds.lam,
        ), fast.time_s
    if unproven is not None:
        better = exact if exact.cost < bounds.best_time else bounds.best
        cost = min(exact.cost, bounds.best_time)
        return better, info(
            "feasible",
            unproven,
            f"memory limit binds; best plan within {cost - unproven:.3g} s of a proven bound "
            f"(the layer chain's memory counted in {MEMORY_STEPS} steps)",
            bounds.lam,
        ), fast.time_s
    return exact, info(
        "optimal",
        exact.cost,
        f"memory limit binds; exact over (time, memory) fronts within the "
        f"{gap:.3g} s dual gap",
        bounds.lam,
    ), fast.time_s


HINT_STEPS = 2  # a hinted multiplier whose plan overflows is raised this often before the leanest
HINT_GROWTH = 4.0  # ... by this factor each time


def _lagrangian(
    problem: SearchProblem,
    limit_bytes: float,
    cutoff_s: float,
    lam_hint: float = 0.0,
    free_first: bool = False,
) -> tuple[Solved, Solved | None, Bounds | None]:
    """The unconstrained optimum; when it overflows ``limit`` bytes, the leanest plan (or any
    fitting plan: see below); when one fits, the Lagrangian bounds. Raises
    :class:`_SlowerError` as soon as one of them proves no plan within the limit beats
    ``cutoff`` (seconds).

    ``lam_hint`` (seconds per byte: the multiplier of a similar problem, e.g. a neighbouring
    micro-batch count or another pipeline stage) is solved first. ``L(lam) = min_x time(x) +
    lam * (memory(x) - limit)`` bounds every fitting plan from below for any ``lam >= 0``, so
    that one solve prunes when it reaches the cutoff (the pruned problem's unconstrained
    optimum is then not known: 0 is reported; ``free_first`` solves it first, so that a prune
    reports it, as callers bounding other problems by it need). Otherwise it starts the dual's
    search next to its maximum: a plan that fits stands in for the leanest one, one that
    overflows is the bound's first line (the same maximum is reached; fewer solves)."""

    def settled(fast: Solved) -> bool:
        """The unconstrained optimum already answers: too slow, or it fits."""
        if fast.time_s >= cutoff_s * (1 - 1e-12):
            raise _SlowerError(fast.time_s)
        return fast.memory_bytes <= limit_bytes

    fast = evaluate_at(problem, 0.0) if free_first else None
    if fast is not None and settled(fast):
        return fast, None, None
    probe = evaluate_at(problem, lam_hint) if lam_hint > 0 else None
    if probe is not None and math.isfinite(cutoff_s) and probe.dual_value(
        lam_hint, limit_bytes
    ) >= cutoff_s * (1 - 1e-12):
        raise _SlowerError(0.0 if fast is None else fast.time_s, lam_hint)
    if fast is None:
        fast = evaluate_at(problem, 0.0)
        if settled(fast):
            return fast, None, None
    over, lean = None, probe
    lam = lam_hint
    for _ in range(HINT_STEPS if probe is not None else 0):
        if lean.memory_bytes <= limit_bytes:
            break
        # overflowing at lam: the dual still rises there, its maximum lies at a larger lam
        over, lam = (lean, lam), lam * HINT_GROWTH
        lean = evaluate_at(problem, lam)
    if lean is None or lean.memory_bytes > limit_bytes:
        if lean is not None:
            over = (lean, lam)
        lean = evaluate_at(problem, LEANEST_WEIGHT)
        if lean.memory_bytes > limit_bytes:
            return fast, lean, None
    bounds = dual_bounds(problem, limit_bytes, fast, lean, cutoff_s, over)
    if bounds.lower >= cutoff_s * (1 - 1e-12):
        # proven: no fitting plan here beats the one in hand
        raise _SlowerError(fast.time_s, bounds.lam)
    return fast, lean, bounds


def _bound_at(problem: SearchProblem, lam_s_per_byte: float, limit_bytes: float) -> float:
    """The Lagrangian ``L(lam) = min_x time(x) + lam * (memory(x) - limit)`` (seconds): a
    lower bound on every plan of ``problem`` within ``limit_bytes``, for any ``lam >= 0``."""
    return evaluate_at(problem, lam_s_per_byte).dual_value(lam_s_per_byte, limit_bytes)


def _no_fit(fast: Solved, lean: Solved, limit_bytes: float, mode: str) -> _NoFitError:
    """The error for a problem whose leanest plan (``lean``) overflows ``limit`` bytes."""
    return _NoFitError(
        fast.time_s,
        f"memory: the leanest plan needs {lean.memory_bytes / GiB:.3g} GiB per device for "
        f"{mode}, over the {limit_bytes / GiB:.3g} GiB limit; use more GPUs or a smaller batch"
        + ("" if mode == "infer" else ", or plan inference"),
    )


class SlowerThanCutoffError(Exception):
    """No plan of the searched space beats the cutoff (seconds): proven by bounds."""


class _SlowerError(Exception):
    """No plan here beats a plan already found: carries the unconstrained optimum (seconds; a
    lower bound of it, 0 when unknown) and the Lagrange multiplier that proved it (seconds per
    byte; 0 when the unconstrained optimum alone did)."""

    def __init__(self, free_time_s: float, lam_s_per_byte: float = 0.0) -> None:
        super().__init__(free_time_s)
        self.free_time_s = free_time_s
        self.lam_s_per_byte = lam_s_per_byte


class _NoFitError(InfeasibleError):
    """Nothing fits; carries the unconstrained optimum's time (a bound for other settings)."""

    def __init__(self, free_time_s: float, message: str) -> None:
        super().__init__(message)
        self.free_time_s = free_time_s


def _deepening(
    problem: SearchProblem,
    limit_bytes: float,
    bounds: Bounds,
    deadline: float = math.inf,
    cutoff_s: float = math.inf,
    jumps: bool = True,
) -> tuple[Assignment | None, float, float | None]:
    """Front searches with a growing gap until one proves its answer: a pass keeping every plan
    within ``g`` of the dual bound is exact once its best time is within ``g`` of it too. The
    gap grows x4 per pass, or straight to the cost of a plan a pass found beyond its gap (no
    fitting plan is nearer the bound, so the pass to that cost proves the optimum; a jump
    that proves nothing is dropped, so the answer is the plain schedule's: ``jumps`` False
    keeps to it). No
    gap beyond ``cutoff`` (seconds, a plan already in hand) is needed: a pass up to it that
    finds nothing proves no fitting plan is faster (gap tried returned as -1).

    Returns (plan, gap tried, lower bound when the plan is not proven optimal)."""
    try:
        fs = FrontSearch.prepare(problem, limit_bytes, bounds.lam)
    except KnotError:  # no series-parallel schedule: the dual gap stands
        return None, 0.0, None
    full = bounds.best_time - bounds.lower
    if cutoff_s < bounds.best_time:
        full = cutoff_s - bounds.lower
    g = full * FIRST_GAP_FRACTION
    kept: tuple[Assignment | None, float, float | None] | None = None
    grown = g  # the gap the plain schedule (x4 per pass) has reached
    jump, jumped = jumps, False  # jumps allowed; this pass is a jump off the plain schedule
    while True:
        try:
            found = fs.run(bounds.lower + g, deadline=deadline)
        except TruncatedError:
            if not jumped:
                return kept if kept is not None else (None, g, None)
            found = None  # a jump outgrew the fronts: back to the plain schedule
        if jumped and (found is None or "lower_bound_s" in found.stats):
            # a jump counts only when it proves its plan; otherwise the plain schedule goes on
            # as if it had not happened (the chain's rounded memory can find a better plan in
            # a wider pass, so where the passes stop must not change)
            g, jump, jumped = grown, False, False
            continue
        if found is not None and "lower_bound_s" in found.stats:
            # the chain's memory steps leave a gap: its bound holds for plans within g, so a
            # wider pass can only help while the bound is the pass's own edge
            proven = found.stats["lower_bound_s"]
            kept = found, g, max(bounds.lower, min(proven, bounds.lower + g))
            if proven < bounds.lower + g or g >= full:
                return kept
        if found is not None and found.cost - bounds.lower <= g * (1 + 1e-9):
            return found, g, None
        if g >= full:
            if found is None and cutoff_s < bounds.best_time:
                return None, -1.0, None
            return found, g, None
        grown = min(full, grown * 4)
        g, jumped = grown, False
        if jump and found is not None and "lower_bound_s" not in found.stats:
            # no fitting plan is within g, and one costs found.cost: a pass to exactly there
            # keeps every plan that could beat it, so it proves its answer (one pass, not a
            # ladder of x4 passes that each find the same plan again)
            reach = min(full, (found.cost - bounds.lower) * (1 + 1e-9))
            g, jumped = reach, reach != grown


def check_workload(graph: OpGraph, topology: Topology, space: SearchSpace = SearchSpace()) -> None:
    """Reject workloads the cluster cannot run sensibly, naming the field to change.

    The model's largest op must be splittable over every GPU. A batch that does not split over
    the nodes is not refused: pipeline stages, or splits of other dims across hosts, can still
    use them (a batch of 8 on 16 hosts runs as 4 stages of 4 hosts, 2 micro-batches).
    """
    heaviest = max(graph.ops, key=graph.flops)
    mesh = Mesh(topology.nodes, topology.gpus_per_node)
    if not any(s.ways() == mesh.devices for s in op_strategies(graph, heaviest, mesh, space)):
        raise InvalidInputError(
            "topology",
            f"{topology.name} ({mesh.devices} GPUs)",
            f"a cluster the model can use: its largest op {heaviest.name} cannot be split over "
            f"{mesh.devices} GPUs; use fewer GPUs or a larger batch",
        )


def search_flat(
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
    exact_fronts: bool = True,
) -> Plan:
    """The best plan without pipeline stages (see :func:`~taps_core.search.planner.search`),
    within the memory limit with its transient buffers counted exactly (:func:`within_limit`).
    Raises :class:`SlowerThanCutoffError` when it is proven no faster than ``cutoff_s``
    seconds. ``exact_fronts`` False stops a binding memory limit's search at the Lagrangian
    bound (see :func:`_fit_memory`)."""
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    if not limit > 0:
        raise InvalidInputError("memory_limit", limit, "> 0")

    def run(search_limit: float) -> Plan:
        return search_flat_at(
            graph, topology, mode=mode, cost_model=cost_model, memory_limit_bytes=search_limit,
            space=space, allow=allow, label=label, links=links, time_budget_s=time_budget_s,
            cutoff_s=cutoff_s, exact_fronts=exact_fronts,
        )

    return within_limit(run, limit)


@dataclass(frozen=True)
class _Found:
    """The best plan so far over micro-batch counts: its step (s), memory per device (bytes),
    micro-batch count, micro-batch graph, problem, solution and search record."""

    cost_s: float
    memory_bytes: float
    microbatches: int
    graph: OpGraph
    problem: SearchProblem
    solution: Assignment
    info: SearchInfo


def search_flat_at(
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
    exact_fronts: bool = True,
) -> Plan:
    """One search of :func:`search_flat` at a given limit."""
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
    deadline = math.inf if time_budget_s is None else cpu_seconds() + time_budget_s
    # gradient accumulation: k micro-batches never run faster than k's divisors do without a
    # memory limit, so a count is searched only while that bound can still beat the best
    free: dict[int, float] = {}
    best: _Found | None = None
    explored: list[SearchInfo] = []
    error: InfeasibleError | None = None
    unexplored: list[float] = []
    cut = False  # some count was skipped as no faster than the cutoff
    hint = 0.0  # the multiplier that pruned the last count: often prunes the next in one solve
    memo = BuildMemo(topology, comm)  # conversion tables shared by every count's build
    built: dict[int, SearchProblem] = {}  # the counts whose problems were built, by count
    counts = microbatch_counts(graph, topology, mode)
    settled: set[int] = set()  # counts pruned unbuilt together with an earlier one
    width = 1  # counts to prune at once: doubles while pruning unbuilt succeeds
    for i, k in enumerate(counts):
        if k in settled:
            continue
        bound = max((free[d] for d in free if k % d == 0), default=0.0)
        bar = min(best.cost_s if best is not None else math.inf, cutoff_s)
        if bound >= bar * (1 - 1e-12):
            cut = cut or best is None
            continue
        if best is not None and cpu_seconds() > deadline:
            unexplored.append(bound)  # out of time: only its divisors' bound is known
            continue
        # a built divisor's problem, relaxed, often prunes k (and the counts after it) unbuilt
        rest = [c for c in counts[i:] if c not in settled]
        group, pruned = _prune_unbuilt(built, rest, width, limit, bar, mode, hint)
        width = 2 * len(group) if pruned is not None else 1
        try:
            if pruned is not None:
                raise pruned
            g_k = graph if k == 1 else micro_graph(graph, k)
            problem = built[k] = build_problem(
                g_k, topology, mode, comm, space=space, allow=allow, microbatches=k, memo=memo,
            )
            sub, sol, info, free[k] = _best_zero_stage(
                problem, limit, mode, bar, deadline, exact_fronts=exact_fronts, lam_hint=hint
            )
        except (_NoFitError, _SlowerError) as err:
            free.update(dict.fromkeys(group, err.free_time_s))
            settled.update(group)
            if isinstance(err, _NoFitError):
                error = err if error is None else error
            else:
                hint = err.lam_s_per_byte or hint
                cut = cut or best is None
            continue
        explored.append(info)
        memory = memory_of(sub, sol)
        if best is None or (sol.cost, memory) < (best.cost_s, best.memory_bytes):
            best = _Found(sol.cost, memory, k, g_k, sub, sol, info)
        if sol.cost <= free[k] * (1 + 1e-12):
            break  # the unconstrained optimum fits: more micro-batches cannot be faster
    if best is None and (cut or error is None):
        raise SlowerThanCutoffError(cutoff_s)
    if best is None:
        assert error is not None
        raise InfeasibleError(str(error))
    cost, k, g_k, problem, sol, info = (
        best.cost_s, best.microbatches, best.graph, best.problem, best.solution, best.info
    )
    lower = min(
        [(x.lower_bound_s if x.lower_bound_s is not None else cost) for x in explored]
        + unexplored
    )
    proven = cost <= lower * (1 + 1e-9) and all(
        x.status == "optimal" or (x.lower_bound_s or 0.0) >= cost * (1 - 1e-9) for x in explored
    )
    note = info.note + (f"; {k} micro-batches" if k > 1 else "")
    if unexplored:
        counts = "count" if len(unexplored) == 1 else "counts"
        note += f"; {len(unexplored)} micro-batch {counts} left unsearched (time budget)"
    info = replace(
        info,
        time_s=time.perf_counter() - start,
        status="optimal" if proven else "feasible",
        lower_bound_s=min(lower, cost),
        note=note.lstrip("; "),
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


def _prune_unbuilt(
    built: dict[int, SearchProblem],
    rest: list[int],
    width: int,
    limit_bytes: float,
    cutoff_s: float,
    mode: str,
    lam_hint: float,
) -> tuple[list[int], _SlowerError | _NoFitError | None]:
    """The counts pruned without being built and why: the first ``width`` of ``rest`` at once,
    else the first alone (:func:`_relaxation_prunes`); the first alone and None when neither
    is pruned."""
    group = rest[:width]
    pruned = _relaxation_prunes(built, group, limit_bytes, cutoff_s, mode, lam_hint)
    if pruned is None and len(group) > 1:
        group = rest[:1]
        pruned = _relaxation_prunes(built, group, limit_bytes, cutoff_s, mode, lam_hint)
    return group, pruned


def _relaxation_prunes(
    built: dict[int, SearchProblem],
    counts: list[int],
    limit_bytes: float,
    cutoff_s: float,
    mode: str,
    lam_hint: float,
) -> _SlowerError | _NoFitError | None:
    """Whether the problem of the largest built count dividing every one of ``counts`` (in
    increasing order), relaxed to them all at once (:meth:`SearchProblem.relaxed`), proves
    that no plan at any of them fitting ``limit`` bytes beats ``cutoff`` seconds (the error
    saying so), or that none fits; None when it cannot (each count is then tried alone, or
    built and searched). Several counts get one solve, at ``lam_hint``: a guess that fails
    costs little."""
    base = [d for d in built if d < counts[0] and all(c % d == 0 for c in counts)]
    if not base or not math.isfinite(cutoff_s) or (len(counts) > 1 and lam_hint <= 0):
        return None
    relaxed = built[max(base)].relaxed(counts[0], through=counts[-1])
    if len(counts) > 1:
        bound = _bound_at(relaxed, lam_hint, limit_bytes)
        return _SlowerError(0.0, lam_hint) if bound >= cutoff_s * (1 - 1e-12) else None
    try:
        fast, lean, _ = _lagrangian(relaxed, limit_bytes, cutoff_s, lam_hint)
    except _SlowerError as err:
        return err
    if lean is not None and lean.memory_bytes > limit_bytes:
        return _no_fit(fast, lean, limit_bytes, mode)
    return None


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
    adjust: Callable[[SearchProblem], SearchProblem] | None = None,
    exact_fronts: bool = True,
    memo: BuildMemo | None = None,
    lam_hint: float = 0.0,
) -> tuple[SearchProblem, Assignment, SearchInfo]:
    """The exact search at one micro-batch count (``graph`` is one micro-batch), as a pipeline
    stage needs it: ``activation_copies`` micro-batches held at once, given ZeRO stages;
    ``adjust`` reprices the built problem (a stage's costs paid outside its graph);
    ``exact_fronts`` False stops a memory-bound search at its Lagrangian bound (the gap
    reported); ``memo`` the tables shared with other builds on ``topology`` with ``comm``;
    ``lam_hint`` the memory multiplier (seconds per byte) of a similar search (e.g. another
    stage) to start the Lagrangian dual at (the plan's cost does not depend on it).
    Raises InfeasibleError when nothing fits."""
    problem = build_problem(
        graph, topology, mode, comm, space=space, allow=allow, microbatches=microbatches,
        activation_copies=activation_copies, memo=memo,
    )
    if adjust is not None:
        problem = adjust(problem)
    try:
        sub, sol, info, _ = _best_zero_stage(
            problem, limit, mode, deadline=deadline, stages=zero_stages,
            exact_fronts=exact_fronts, lam_hint=lam_hint,
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
    limit_bytes: float,
    mode: str,
    cutoff_s: float = math.inf,
    deadline: float = math.inf,
    stages: tuple[int, ...] | None = None,
    exact_fronts: bool = True,
    lam_hint: float = 0.0,
) -> tuple[SearchProblem, Assignment, SearchInfo, float]:
    """The fastest fitting plan over the plan-wide ZeRO stages (each searched exactly), and
    the unconstrained optimum's time (seconds).

    A later stage never runs faster than an earlier one with the same shardings, so once an
    unconstrained optimum fits, the later stages are skipped, and once one is no faster than
    ``cutoff`` (seconds), so are the later stages. Before the stages, the problem with every
    op free to take any ZeRO stage (a relaxation of each plan-wide stage) is bounded once:
    when even it cannot beat ``cutoff`` within the limit, every stage is pruned at once
    (``lam_hint``: a multiplier to try first, see :func:`_lagrangian`)."""
    stages = stages or useful_zero_stages(mode, problem.microbatches)
    if len(stages) > 1 and math.isfinite(cutoff_s):
        # any ZeRO stage per op: its bound is below every plan-wide stage's; raises when it
        # already proves the cutoff out of reach. Its leanest plan is no larger than any
        # stage's: when even that overflows the limit, no stage fits.
        fast, lean, _ = _lagrangian(problem, limit_bytes, cutoff_s, lam_hint)
        if lean is not None and lean.memory_bytes > limit_bytes:
            raise _no_fit(fast, lean, limit_bytes, mode)
    found: list[tuple[SearchProblem, Assignment, SearchInfo, float]] = []
    error: InfeasibleError | None = None
    free = math.inf
    hint = lam_hint  # each stage's multiplier starts the next one's dual search
    for zero in stages:
        sub = problem.restricted(zero)
        bar = min((x[3] for x in found), default=cutoff_s)
        try:
            sol, info, fast = _fit_memory(
                sub, limit_bytes, mode, bar, deadline, exact_fronts, hint
            )
        except _NoFitError as err:
            error = err
            free = min(free, err.free_time_s)
            continue
        except _SlowerError as err:
            free = min(free, err.free_time_s)
            if err.free_time_s >= bar * (1 - 1e-12):
                break  # unconstrained and already too slow: later stages are no faster
            continue
        free = min(free, fast)
        hint = info.memory_weight or hint
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
    info = replace(
        info,
        time_s=sum(x[2].time_s for x in found),
        status="optimal" if proven else "feasible",
        lower_bound_s=min(lower, cost),
        note=note,
    )
    return sub, sol, info, free


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


def micro_graph(graph: OpGraph, k: int) -> OpGraph:
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
        rc = sol.recompute.get(lay, KEPT) if lay is not None else KEPT
        for name in names:
            out[name] = OpChoice(s, zero, rc == FULL, rc == SELECTIVE)
    return {op.name: out[op.name] for op in problem.graph.ops}
