"""TAPS: the plan search. The fastest configuration Megatron-LM or DeepSpeed would run
(:mod:`taps_core.search.configs`) seeds the exact per-op search without stages
(:mod:`taps_core.search.flat`) as a cutoff; the pipeline search (:mod:`taps_core.search.pipeline`)
runs where no seed applies. A plan's status is "optimal" only when that is proven.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology
from taps_core.errors import InfeasibleError
from taps_core.ir.graph import OpGraph
from taps_core.ir.strategies import SearchSpace
from taps_core.plan.claims import FLAT_PROVEN, REFINED_OPEN, REFINED_SEED, STAGES_UNPROVEN
from taps_core.plan.records import Plan, SearchInfo
from taps_core.search.configs import (
    compute_floor_s,
    configuration_in,
    search_configurations,
    supports,
)
from taps_core.search.flat import SlowerThanCutoffError, search_flat
from taps_core.search.pipeline import (
    balanced_split,
    best_setting,
    candidate_splits,
    layer_range,
    objective,
    search_pipeline,
)
from taps_core.search.pipeline_bound import ShapeBound, pipeline_bounds
from taps_core.search.problem import StrategyFilter
from taps_core.solver.clock import cpu_seconds

DEFAULT_TIME_BUDGET_S = 60.0  # the exact memory-bound search reports its gap past this
REFINED_SHAPES = 2  # open pipeline shapes planned in full when stages are proven


PIPELINE_COMM_SHARE = 0.1  # pipelines are tried when communication is at least this share




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
    exact_fronts: bool = True,
    prove_stages: bool = False,
    seed_plan: Plan | None = None,
) -> Plan:
    """Best plan under ``cost_model`` within ``space`` (and ``allow``), reported topology-aware.

    With ``expert_seed`` (TAPS: the topology model, the default space, no ``allow``), the
    fastest configuration Megatron-LM or DeepSpeed would run is found first, exhaustively
    (:func:`expert_plan`; ``seed_plan``: what it returned for these inputs, not found again):
    it bounds the exact search without stages (what cannot beat it is pruned by proven
    bounds) and TAPS never returns a slower plan. ``pipeline``: False keeps to
    plans without stages; otherwise, when the seed has stages, every stage of its pipeline
    shape is searched exactly first (the per-op plan inside the framework's best shape;
    seconds, up to a minute on the largest models, no clock) and the faster of the two bounds
    the search without stages.
    True, with ``prove_stages``, also plans the open shapes of least bound.

    Without a seed (a model that is not a stack of identical layers, or rules in ``allow``),
    ``pipeline`` None tries stages in training on several hosts when the plan without stages
    does not fit, is memory-bound or spends >= 10% of its step communicating, and the rules can
    be applied per stage (``allow_for(stage graph, stage cluster)``); the faster plan wins.

    Raises InfeasibleError when no plan fits the memory limit (default: the GPU's memory).
    The exact search under a binding memory limit stops after ``time_budget_s`` seconds
    (None: no limit) with the best plan found and a proven lower bound (status "feasible").
    ``exact_fronts`` False stops it at the Lagrangian bound instead: deterministic, fast, the
    gap reported (what pricing a decision against its runner-up needs).

    ``prove_stages`` bounds every pipeline shape (:mod:`taps_core.search.pipeline_bound`,
    seconds to a minute on large models): "optimal" when every shape's bound is above the plan,
    else the least bound of the open shapes is the certified one instead of the compute floor.
    With ``pipeline`` True as well, the open shapes of least bound are planned in full first.
    """
    start = time.perf_counter()  # for the time reported; budgets count CPU (solver.clock)
    cpu_start = cpu_seconds()
    links = links or LinkModel(topology)  # one routing of each pattern for the whole search
    seeded = allow is None and cost_model == "topology" and expert_seed and space == SearchSpace()
    seed, refined = _seeds(graph, topology, mode, memory_limit_bytes, links, pipeline,
                           seed_plan) if seeded else (None, None)
    cutoff = min([p.total_time_s for p in (seed, refined) if p is not None], default=math.inf)
    flat: Plan | None = None
    error: InfeasibleError | None = None
    cut = False  # the search without stages proved nothing there beats the seed
    try:
        flat = search_flat(
            graph, topology, mode=mode, cost_model=cost_model,
            memory_limit_bytes=memory_limit_bytes, space=space, allow=allow, label=label,
            links=links, time_budget_s=time_budget_s, cutoff_s=cutoff, exact_fronts=exact_fronts,
        )
    except InfeasibleError as err:
        error = err
    except SlowerThanCutoffError:
        cut = True
    if seed is not None:
        flat_proven = cut or (flat is not None and flat.search.status == "optimal")
        plan = _with_seed(graph, topology, flat, flat_proven, seed, refined, mode, label,
                          start, pipeline)
        if prove_stages and STAGES_UNPROVEN in plan.search.note:
            # proven over plans without stages: the plan (flat_proven) or the flat search's gap
            flat_lower = plan.total_time_s if flat_proven else min(
                plan.total_time_s,
                flat.search.lower_bound_s if flat is not None and flat.search.lower_bound_s
                is not None else compute_floor_s(graph, topology, mode),
            )
            plan = _stages_proven(graph, topology, plan, flat_lower, links, space, start,
                                  memory_limit_bytes, label, refine=pipeline is True)
        return plan
    if pipeline is None:
        # worth trying in training on several hosts when the plan without stages is not
        # already compute-bound: nothing fits, memory binds, or communication is >= 10%
        rules_per_stage = allow is None or allow_for is not None
        pressed = flat is None or bool(flat.search.note) or (
            flat.comm_time_s >= PIPELINE_COMM_SHARE * flat.total_time_s
        )
        pipeline = mode == "train" and topology.nodes > 1 and rules_per_stage and pressed
    if pipeline:

        left = None if time_budget_s is None else max(
            5.0, time_budget_s - (cpu_seconds() - cpu_start)
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


def stages_possible(graph: OpGraph, topology: Topology, mode: str) -> bool:
    """Whether pipeline stages lie in the space: training, on several hosts, at least two
    layers. Where they do not, a proof over plans without stages covers the whole space."""
    return mode == "train" and topology.nodes > 1 and graph.num_layers >= 2


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

    if not supports(graph):
        return None
    return fastest_framework_plan(
        search_configurations(graph, topology, mode=mode, space=sp,
                              memory_limit_bytes=memory_limit_bytes, links=links,
                              max_stages=max_stages).plan
        for sp in ("megatron", "deepspeed")
    )


def fastest_framework_plan(found: Iterable[Plan | None]) -> Plan | None:
    """The fastest of the frameworks' plans (ties: by algorithm name, so every caller picks
    the same seed); None when none fits."""
    plans = [p for p in found if p is not None]
    return min(plans, key=lambda p: (p.total_time_s, p.search.algorithm)) if plans else None


def _stages_proven(
    graph: OpGraph,
    topology: Topology,
    plan: Plan,
    flat_lower_s: float,
    links: LinkModel | None,
    space: SearchSpace,
    start: float,
    memory_limit_bytes: float | None,
    label: str,
    refine: bool,
) -> Plan:
    """``plan`` (whose proof left pipeline shapes out) with every shape bounded: "optimal" when
    none can beat it and ``flat_lower_s`` (the proven bound over plans without stages and the
    framework configurations, seconds) reaches it; else the least bound is the certified one
    and the open shapes are named.

    With ``refine``, the first ``REFINED_SHAPES`` open shapes of :func:`refine_order` are
    planned first (their balanced layer splits, every stage's plan searched exactly, no
    clock): a faster pipeline replaces the plan, and the shapes are bounded again against it.
    Without, the plan stays."""
    bounds = pipeline_bounds(graph, topology, cutoff_s=plan.total_time_s, links=links,
                             space=space, memory_limit_bytes=memory_limit_bytes)
    plan = plan if not refine else _refined(graph, topology, plan, refine_order(bounds.open)[
        :REFINED_SHAPES], memory_limit_bytes, space, links, label)
    bounds = replace(bounds, cutoff_s=plan.total_time_s)
    opened = bounds.open
    solved = sum(s.how == "stage optimum" for s in bounds.shapes)
    said = (f"every pipeline shape bounded ({len(bounds.shapes)} shapes, {solved} by their "
            f"stages' exact optimum)")
    lower = min(plan.total_time_s, bounds.lower_bound_s, flat_lower_s)
    if lower >= plan.total_time_s * (1 - 1e-9):
        status, lower = "optimal", plan.total_time_s
        tail = f"{said}: none can beat it"
    else:
        status = "feasible"
        names = ", ".join(f"{s.stages}x{s.microbatches}" for s in opened[:6])
        more = f" and {len(opened) - 6} more" if len(opened) > 6 else ""
        tail = f"{said}: none faster than {bounds.lower_bound_s:.4g} s" + (
            f"; {len(opened)} open (stages x micro-batches {names}{more})" if opened else ""
        )
    note = plan.search.note.replace(STAGES_UNPROVEN, tail)
    return replace(plan, search=replace(
        plan.search, status=status, lower_bound_s=lower, note=note,
        time_s=time.perf_counter() - start,
    ))


def refine_order(shapes: tuple[ShapeBound, ...]) -> list[ShapeBound]:
    """Open shapes in the order they are worth planning: those bounded by their stages' exact
    optimum first (a bound that tracks what a plan there costs), least bound first; shapes
    holding only the compute floor (no stage was costed: a tiny bound says little) after."""
    return sorted(shapes, key=lambda sh: (sh.how != "stage optimum", sh.bound_s))


def _refined(
    graph: OpGraph,
    topology: Topology,
    plan: Plan,
    shapes: list[ShapeBound],
    memory_limit_bytes: float | None,
    space: SearchSpace,
    links: LinkModel | None,
    label: str,
) -> Plan:
    """The fastest of ``plan`` and the pipelines of ``shapes`` (each with the layer splits
    :func:`~taps_core.search.pipeline.candidate_splits` gives and the one the shape's stage
    charges estimate best, :attr:`ShapeBound.split`; every stage searched exactly)."""
    best = plan
    span = layer_range(graph)
    if span is None:
        return plan
    for shape in shapes:
        if shape.bound_s >= best.total_time_s * (1 - 1e-9):
            continue
        splits = candidate_splits(span[1] - span[0] + 1, shape.stages)
        piped = best_setting(
            graph, topology, p=shape.stages, m=shape.microbatches,
            splits=tuple(dict.fromkeys([*splits, *([shape.split] if shape.split else [])])),
            memory_limit_bytes=memory_limit_bytes, space=space, links=links,
        )
        if piped is not None and piped.total_time_s < best.total_time_s * (1 - 1e-12):
            best = piped
    if best is plan:
        return plan
    pi = best.pipeline
    assert pi is not None
    split = "/".join(map(str, pi.layer_split))
    note = (
        f"per-op stage plans: {len(pi.stages)} stages x {pi.microbatches} micro-batches "
        f"(layers {split}), every stage's plan searched exactly; faster than the plan "
        f"before ({plan.total_time_s:.4g} s: {plan.search.note}"
    )
    note = note.replace(f"; {STAGES_UNPROVEN}", "") + f"); {STAGES_UNPROVEN}"
    return replace(best, label=label, cost_model="topology", search=SearchInfo(
        REFINED_OPEN, best.search.time_s, best.search.num_strategies, "feasible", 0.0,
        None, note,
    ))


def _seeds(
    graph: OpGraph,
    topology: Topology,
    mode: str,
    memory_limit_bytes: float | None,
    links: LinkModel,
    pipeline: bool | None,
    seed_plan: Plan | None,
) -> tuple[Plan | None, Plan | None]:
    """The fastest framework configuration (``seed_plan`` when it was found for these inputs;
    without stages when ``pipeline`` is False) and its pipeline shape refined per op."""
    reuse = seed_plan is not None and seed_plan.mode == mode and pipeline is not False
    seed = seed_plan if reuse else expert_plan(
        graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes, links=links,
        max_stages=1 if pipeline is False else None)
    refined = _refined_seed(graph, topology, seed, mode, memory_limit_bytes, links, pipeline)
    return seed, refined


def _refined_seed(
    graph: OpGraph,
    topology: Topology,
    seed: Plan | None,
    mode: str,
    memory_limit_bytes: float | None,
    links: LinkModel | None,
    pipeline: bool | None,
) -> Plan | None:
    """A pipelined ``seed``'s shape (stages, micro-batches) kept and every stage's plan searched
    exactly at the seed's layer split and at the even one (a framework's split suits its own
    stage plans' memory; per-op plans may suit the even one better), without a clock (the plan
    does not depend on the time budget or the machine; never slower than the seed, whose stage
    plans lie in that space). None when the seed has no stages or ``pipeline`` is False. Done
    before the search without stages, whose cutoff it tightens: a plan without stages may beat
    the seed yet not its refinement."""
    if seed is None or pipeline is False or seed.pipeline is None:
        return None
    pi = seed.pipeline
    p = len(pi.stages)
    return best_setting(
        graph, topology, p=p, m=pi.microbatches, mode=mode,
        splits=tuple(dict.fromkeys([pi.layer_split, balanced_split(sum(pi.layer_split), p)])),
        memory_limit_bytes=memory_limit_bytes, links=links,
    )


def _with_seed(
    graph: OpGraph,
    topology: Topology,
    flat: Plan | None,
    flat_proven: bool,
    seed: Plan,
    refined: Plan | None,
    mode: str,
    label: str,
    start: float,
    pipeline: bool | None,
) -> Plan:
    """TAPS's answer given the fastest framework configuration ``seed`` and its shape refined
    per op (``refined``, :func:`_refined_seed`): the best plan without stages when it beats
    both, else the faster of the two.

    ``flat_proven``: the search without stages proved its optimum (or that nothing beats the
    seed). The status is "optimal" only when that covers the whole space asked for: stages
    excluded (``pipeline`` False) or impossible (inference, one host, one layer). Otherwise it
    is "feasible" with the compute floor (every FLOP at peak x efficiency on every GPU) as the
    certified bound."""

    staged = pipeline is not False and stages_possible(graph, topology, mode)
    open_note = STAGES_UNPROVEN
    anchor = seed  # the faster of the seed and its refinement
    if refined is not None and refined.total_time_s < seed.total_time_s * (1 - 1e-12):
        anchor = refined
    if flat is not None and flat.total_time_s < anchor.total_time_s:
        if not staged:
            return flat  # proven over the whole space asked for (or its own gap stands)
        if flat.search.status != "optimal":
            own = flat.search.lower_bound_s
            floor = compute_floor_s(graph, topology, mode)
            return replace(flat, search=replace(
                flat.search,
                lower_bound_s=floor if own is None else min(own, floor),
                note="; ".join(x for x in (
                    f"{flat.search.note} (among plans without stages)" if flat.search.note
                    else "", open_note,
                ) if x),
            ))
        return replace(flat, search=replace(
            flat.search,
            time_s=time.perf_counter() - start,
            status="feasible",
            lower_bound_s=compute_floor_s(graph, topology, mode),
            note="; ".join(x for x in (
                flat.search.note,
                f"{FLAT_PROVEN} and faster than every framework "
                f"configuration; {open_note}",
            ) if x),
        ))
    best, how = seed, f"the fastest framework configuration ({seed.search.note})"
    if anchor is not seed:
        best = anchor
        how = (
            f"the stage shape of the fastest framework configuration "
            f"({configuration_in(seed.search.note)}), every stage's plan searched exactly"
        )
    flat_note = (
        f"the best plan without stages takes {flat.total_time_s:.4g} s" if flat is not None
        else "no plan without stages beats it (proven by bounds)" if flat_proven
        else "no plan without stages found"
    )
    proven = flat_proven and not staged and best.pipeline is None
    info = SearchInfo(
        seed.search.algorithm if best is seed else REFINED_SEED,
        time.perf_counter() - start,
        best.search.num_strategies,
        "optimal" if proven else "feasible",
        0.0,
        best.total_time_s if proven else compute_floor_s(graph, topology, mode),
        f"{how}; {flat_note}" + ("" if proven else f"; {open_note}"),
    )
    return replace(best, label=label, cost_model="topology", search=info)
