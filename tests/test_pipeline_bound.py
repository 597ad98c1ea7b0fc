"""Proven bounds on pipelined plans: below every stage split of every shape (brute force over
the splits), and the planner's "optimal" only when every shape is bounded above its plan."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import preset
from taps_core.models import build_graph, load_model_config
from taps_core.search.configs import compute_floor_s
from taps_core.search.pipeline import plan_setting, search_pipeline
from taps_core.search.pipeline_bound import pipeline_bounds, shapes, stage_bound
from taps_core.search.planner import search


def _graph(name: str, **changes):
    return build_graph(replace(load_model_config(name), **changes))


def _splits(layers: int, p: int):
    return [s for s in itertools.product(range(1, layers), repeat=p) if sum(s) == layers]


def test_shapes_are_every_stage_and_microbatch_count():
    graph = _graph("gpt2", num_hidden_layers=4, batch_size=8, seq_length=64)
    # 4 hosts: 2 stages of 2 hosts (micro-batch a multiple of 2) or 4 stages of 1 host
    assert shapes(graph, preset("dgx-a100:4")) == [
        (2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (4, 4), (4, 8),
    ]
    assert shapes(graph, preset("dgx-a100:1")) == []


@pytest.mark.parametrize("fraction", [None, 0.5])
def test_bound_is_below_every_split_of_every_shape(fraction):
    """Brute force: each stage's plan exact, every split of the layers over the stages; with
    ``fraction``, every stage must fit that share of an unconstrained pipeline's memory (the
    bound's Lagrangian rows then bind: checked to raise it)."""
    graph = _graph("gpt2", num_hidden_layers=4, batch_size=8, seq_length=64)
    topo = preset("dgx-a100:4")
    links = LinkModel(topo)
    limit = None
    if fraction is not None:
        limit = fraction * plan_setting(graph, topo, p=2, m=1, split=(2, 2)).memory.total
    checked = raised = 0
    for p, m in shapes(graph, topo):
        bound, _ = stage_bound(graph, topo, links, p, m, memory_limit_bytes=limit or math.inf)
        raised += bound > stage_bound(graph, topo, links, p, m)[0] * (1 + 1e-9)
        steps = [
            plan.total_time_s
            for split in _splits(4, p)
            if (plan := plan_setting(graph, topo, p=p, m=m, split=split,
                                     memory_limit_bytes=limit)) is not None
        ]
        assert steps, (p, m)
        assert min(steps) >= bound * (1 - 1e-9), (p, m, min(steps), bound)
        checked += len(steps)
    assert checked >= 10  # 13 settings: 3 splits x 3 counts at 2 stages, 1 x 4 at 4
    assert (raised >= 5) if fraction is not None else raised == 0


def test_a_stage_problem_with_more_copies_in_flight_is_the_one_built_with_them():
    from taps_core.cluster.topology import sub_topology
    from taps_core.costs.collectives import TopologyCost
    from taps_core.search.pipeline import stage_graph
    from taps_core.search.problem import build_problem

    graph = _graph("gpt2", num_hidden_layers=2, batch_size=8, seq_length=64)
    topo = sub_topology(preset("dgx-a100:2"), (0,))
    part = stage_graph(graph, 0, 1, head=True, tail=False)

    def built(copies):
        return build_problem(part, topo, "train", TopologyCost(LinkModel(topo)),
                             microbatches=2, activation_copies=copies)

    moved, direct = built(1).with_copies(3), built(3)
    assert moved.activation_copies == 3
    for n, by_rc in direct.option_memory.items():
        for rc, mem in by_rc.items():
            assert moved.option_memory[n][rc] == pytest.approx(mem, rel=1e-12, abs=1e-6)
    assert any((direct.option_memory[n][False] > built(1).option_memory[n][False]).any()
               for n in direct.option_memory)


def test_the_pipeline_search_never_beats_its_shape_bound():
    graph = _graph("gpt2", num_hidden_layers=4, batch_size=8, seq_length=64)
    topo = preset("ethernet:4")
    plan = search_pipeline(graph, topo, time_budget_s=None)
    assert plan is not None and plan.pipeline is not None
    bounds = pipeline_bounds(graph, topo, cutoff_s=plan.total_time_s)
    shape = next(
        s for s in bounds.shapes
        if (s.stages, s.microbatches) == (len(plan.pipeline.stages), plan.pipeline.microbatches)
    )
    assert plan.total_time_s >= shape.bound_s * (1 - 1e-9)
    assert plan.total_time_s >= bounds.lower_bound_s * (1 - 1e-9)


def test_optimal_only_when_every_shape_is_bounded_above_the_plan():
    graph = _graph("llama3-8b", num_hidden_layers=2, batch_size=8, seq_length=512)
    topo = preset("dgx-a100:2")
    plain = search(graph, topo)
    proven = search(graph, topo, prove_stages=True)
    assert plain.search.status == "feasible"  # pipeline shapes left out of its proof
    assert proven.search.status == "optimal"
    assert proven.total_time_s == plain.total_time_s
    assert proven.search.lower_bound_s == proven.total_time_s
    assert "none can beat it" in proven.search.note


def test_the_multipliers_bound_proves_a_small_gpt_optimal_over_every_shape():
    """gpt2 with 4 layers on 2 DGX hosts: the shapes the corner bound leaves open (2 stages x
    2 micro-batches) are closed by the multipliers' bound, and no pipeline of any split beats
    the plan."""
    graph = _graph("gpt2", num_hidden_layers=4, batch_size=16, seq_length=256)
    topo = preset("dgx-a100:2")
    plan = search(graph, topo, prove_stages=True)
    assert plan.search.status == "optimal" and "none can beat it" in plan.search.note
    for m in (1, 2, 4, 8, 16):
        for split in _splits(4, 2):
            piped = plan_setting(graph, topo, p=2, m=m, split=split)
            assert piped.total_time_s >= plan.total_time_s * (1 - 1e-9), (m, split)


def test_open_shapes_are_named_and_their_bound_certified():
    graph = _graph("gpt2", num_hidden_layers=4, batch_size=32, seq_length=256)
    topo = preset("dgx-a100:2")
    plain = search(graph, topo)
    plan = search(graph, topo, prove_stages=True)
    assert plan.total_time_s == plain.total_time_s  # proving leaves the plan as it is
    refined = search(graph, topo, prove_stages=True, pipeline=True)
    assert refined.total_time_s <= plain.total_time_s * (1 + 1e-12)
    assert refined.search.lower_bound_s <= refined.total_time_s
    assert plan.search.status == "feasible"
    floor = compute_floor_s(graph, topo, "train")
    assert floor < plan.search.lower_bound_s < plan.total_time_s  # tighter than the floor
    assert "open (stages x micro-batches 2x" in plan.search.note
    # the certified bound is below every pipelined plan of the open shapes
    for m in (1, 2, 4, 8):
        for split in _splits(4, 2):
            piped = plan_setting(graph, topo, p=2, m=m, split=split)
            if piped is not None:
                assert piped.total_time_s >= plan.search.lower_bound_s * (1 - 1e-9)


def test_stage_solves_are_a_fixed_count_not_a_clock():
    graph = _graph("gpt2", num_hidden_layers=4, batch_size=8, seq_length=64)
    topo = preset("dgx-a100:4")
    few = pipeline_bounds(graph, topo, cutoff_s=1.0, max_stage_solves=2)
    assert sum(s.how == "stage optimum" for s in few.shapes) == 2
    full = pipeline_bounds(graph, topo, cutoff_s=1.0)
    for a, b in zip(few.shapes, full.shapes):
        assert a.bound_s <= b.bound_s * (1 + 1e-12)  # the compute floor is the weaker bound


def test_a_subproblem_prices_its_ops_as_their_own_stage_graph():
    """The middle layers and the first layer with the embeddings, solved as subsets of the
    first stage's problem, equal the optima of their own stage graphs."""
    from taps_core.cluster.topology import sub_topology
    from taps_core.costs.collectives import TopologyCost
    from taps_core.search.layered import solve_problem
    from taps_core.search.pipeline import stage_graph
    from taps_core.search.problem import build_problem

    graph = _graph("gpt2", num_hidden_layers=6, batch_size=8, seq_length=64)
    topo = sub_topology(preset("dgx-a100:2"), (0,))
    comm = TopologyCost(LinkModel(topo))

    def problem(a, b, head):
        part = stage_graph(graph, a, b, head=head, tail=False)
        return build_problem(part, topo, "train", comm, microbatches=2).restricted(1)

    whole = problem(0, 3, True)
    layers = whole.subproblem({n for n, lay in whole.layer.items() if lay is not None})
    first = whole.subproblem({n for n, lay in whole.layer.items() if lay in (None, 0)})
    assert solve_problem(layers).cost == pytest.approx(solve_problem(problem(0, 3, False)).cost,
                                                      rel=1e-12)
    assert solve_problem(first).cost == pytest.approx(solve_problem(problem(0, 0, True)).cost,
                                                     rel=1e-12)


def test_least_max_over_splits_by_brute_force():
    import numpy as np

    from taps_core.search.pipeline_bound import least_max_over_splits

    rng = np.random.default_rng(3)
    for _ in range(30):
        p, layers = int(rng.integers(2, 4)), int(rng.integers(4, 8))
        g = np.cumsum(rng.random((p, layers - p + 1)), axis=1)  # non-decreasing rows
        brute = min(
            max(g[i, k - 1] for i, k in enumerate(split)) for split in _splits(layers, p)
        )
        assert least_max_over_splits(g, layers) == pytest.approx(brute, rel=1e-12)


def test_a_plan_without_stages_with_its_own_gap_still_says_stages_are_unproven():
    """A cut-short memory-bound search without stages, where stages are possible: its bound
    is no longer that search's own (it covered plans without stages only)."""
    from taps_core.plan.claims import STAGES_UNPROVEN, search_status

    graph = _graph("gpt2", num_hidden_layers=6, batch_size=8, seq_length=256)
    topo = preset("dgx-a100:2")
    limit = 0.55 * search(graph, topo, time_budget_s=None).memory.total
    cut = search(graph, topo, memory_limit_bytes=limit, time_budget_s=1e-4)
    assert cut.search.status == "feasible" and cut.pipeline is None
    assert cut.search.note.endswith(f"(among plans without stages); {STAGES_UNPROVEN}")
    assert cut.search.lower_bound_s <= compute_floor_s(graph, topo, "train")
    assert "not proven" in search_status(cut)


def test_models_whose_layers_differ_are_refused():
    from taps_core.errors import InvalidInputError

    graph = _graph("resnet50", batch_size=16)  # its stages' blocks differ
    with pytest.raises(InvalidInputError, match="identical layers"):
        pipeline_bounds(graph, preset("dgx-a100:2"), cutoff_s=1.0)


def test_the_bound_without_gradient_sync_is_below_every_stage_plan_without_it():
    """``own_only``: the optimum without weight phases is below every stage plan's step minus
    its gradient sync (the pipeline counts the two apart), and below the full optimum."""
    from taps_core.cluster.topology import sub_topology
    from taps_core.costs.collectives import TopologyCost
    from taps_core.search.layered import solve_problem
    from taps_core.search.pipeline import stage_graph
    from taps_core.search.problem import build_problem

    graph = _graph("gpt2", num_hidden_layers=4, batch_size=8, seq_length=64)
    topo = preset("dgx-a100:4")
    sub = sub_topology(topo, (0, 1))
    part = stage_graph(graph, 0, 1, head=True, tail=False)
    problem = build_problem(part, sub, "train", TopologyCost(LinkModel(sub)),
                            microbatches=2).restricted(1)
    own = solve_problem(problem.own_only()).cost
    assert 0 < own < solve_problem(problem).cost
    for split in _splits(4, 2):
        plan = plan_setting(graph, topo, p=2, m=2, split=split)
        first = plan.pipeline.stages[0]
        if first.layers == (0, 1):
            assert first.plan.total_time_s - (first.sync_s - first.tied_sync_s) >= own * (
                1 - 1e-9)


def test_the_tied_exchange_priced_per_strategy_is_the_one_the_pipeline_adds():
    """A tied embedding's exchange between the first and last stage depends on the shard the
    last stage's head holds: the per-strategy price the last stage's search (and its bound)
    weighs equals what the pipeline adds for the chosen strategy."""
    from taps_core.search.sends import tied_exchange_seconds, tied_head, tied_held_bytes

    graph = _graph("gpt2", num_hidden_layers=4, batch_size=8, seq_length=64)
    topo = preset("dgx-a100:4")
    plan = plan_setting(graph, topo, p=2, m=2, split=(2, 2))
    last = plan.pipeline.stages[-1]
    op, pos = tied_head(graph, {o.name for o in last.plan.ops})
    strategy = next(o.strategy for o in last.plan.ops if o.name == op.name)
    micro = build_graph(replace(graph.meta["config"], batch_size=4))
    held = tied_held_bytes(micro, op, pos, strategy)
    paid = tied_exchange_seconds(LinkModel(topo), (0, 1), (2, 3), held)
    assert paid > 0 and last.tied_sync_s == pytest.approx(paid, rel=1e-12)


@pytest.mark.parametrize("p", [2, 4])
def test_the_bound_charges_each_stage_the_sends_the_pipeline_charges(p):
    """The shape bound's per-stage sends (seconds per micro-batch) are exactly the planned
    pipeline's, stage by stage: both come from one accounting of the boundary traffic."""
    from taps_core.search.pipeline_bound import _sends

    graph = _graph("gpt2", num_hidden_layers=4, batch_size=8, seq_length=64)
    topo = preset("dgx-a100:4")
    plan = plan_setting(graph, topo, p=p, m=2, split=(4 // p,) * p)
    micro = build_graph(replace(graph.meta["config"], batch_size=4))
    charged = [st.send_s for st in plan.pipeline.stages]
    assert all(s > 0 for s in charged)
    assert _sends(micro, LinkModel(topo), p, (0, 3)) == pytest.approx(charged, rel=1e-12)
