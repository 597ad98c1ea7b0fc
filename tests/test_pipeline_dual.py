"""The multipliers' bound on pipelined plans (:mod:`taps_core.search.pipeline_dual`): its stage
charges are exact stage optima where solved and below them elsewhere, and the bound is below
every plan of its shape, those that minimise the very weighted objectives it relaxes included."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import preset
from taps_core.ir.strategies import SearchSpace
from taps_core.models import build_graph, load_model_config
from taps_core.plan.evaluate import evaluate
from taps_core.plan.records import SearchInfo
from taps_core.search.flat import choices_of
from taps_core.search.layered import solve_problem
from taps_core.search.pipeline import (
    assemble_stages,
    plan_setting,
    stage_graph,
)
from taps_core.search.pipeline_bound import shapes
from taps_core.search.pipeline_dual import (
    _convex_minorant,
    _problem,
    dual_bound,
    stage_charges,
)
from taps_core.search.problem import SearchProblem
from taps_core.search.sends import (
    tied_exchange_extra,
)

LAYERS = 4


def _config(batch: int = 16):
    return replace(load_model_config("gpt2"), num_hidden_layers=LAYERS, batch_size=batch,
                   seq_length=256)


def _exact_charge(micro, links, sub, p, m, kind, k, r) -> float:
    """The least ``own + r * sync`` of a real stage graph of ``kind`` with ``k`` layers."""
    a, b = {"first": (0, k - 1), "middle": (1, k), "last": (LAYERS - k, LAYERS - 1)}[kind]
    sg = stage_graph(micro, a, b, head=kind == "first", tail=kind == "last")
    problem = _problem(sg, sub, m, SearchSpace()).reweighted(1.0, r)
    if kind == "last":
        found = tied_exchange_extra(problem, micro, links, sub.topology.nodes, p)
        if found is not None:
            node, extra = found
            times = dict(problem.option_time)
            times[node] = {rc: t + r * extra[:, None] for rc, t in times[node].items()}
            problem = replace(problem, option_time=times)
    return solve_problem(problem).cost


@pytest.fixture(scope="module")
def charged():
    topo = preset("dgx-a100:4")
    links = LinkModel(topo)
    sub = links.first_hosts(2)
    p, m = 2, 2
    micro = build_graph(_config().with_workload(batch_size=16 // m))
    return micro, links, sub, p, m, stage_charges(micro, links, sub, p, m, SearchSpace(), 3)


def test_charges_are_the_exact_stage_optima_where_solved(charged):
    micro, links, sub, p, m, charges = charged
    for r in (0.0, 1.0, 2.0):
        assert r in charges.ratios
        for kind in ("first", "middle", "last"):
            row = charges.at(kind, r)
            for k in (1, 2, 3):
                exact = _exact_charge(micro, links, sub, p, m, kind, k, r)
                assert row[k - 1] == pytest.approx(exact, rel=1e-9), (kind, r, k)


def test_between_and_beyond_solved_ratios_the_charges_stay_below(charged):
    micro, links, sub, p, m, charges = charged
    for r in (0.1, 0.75, 1.5, 3.0, 10.0):
        for kind in ("first", "middle", "last"):
            row = charges.at(kind, r)
            for k in (1, 3):
                exact = _exact_charge(micro, links, sub, p, m, kind, k, r)
                assert row[k - 1] <= exact * (1 + 1e-9), (kind, r, k)


def _weighted_pipeline(graph, topo, links, p, m, split, ratios):
    """The pipeline whose stage ``i`` takes the plan least in ``own + ratios[i] * sync`` (the
    last stage's tied exchange counted as sync), priced as any pipeline is."""
    cfg = graph.meta["config"]
    micro = build_graph(cfg.with_workload(batch_size=cfg.batch_size // m))
    info = SearchInfo("weighted", 0.0, 0, "feasible")
    index = iter(range(p))

    def stage_plan(sg, sub, copies):
        i = next(index)
        problem: SearchProblem = _problem(sg, sub, m, SearchSpace()).reweighted(1.0, ratios[i])
        sol = solve_problem(problem)
        return evaluate(sg, sub, "train", choices_of(problem, sol), label="stage",
                        cost_model="topology", search=info, memory_limit_bytes=math.inf,
                        microbatches=m, activation_copies=copies)

    return assemble_stages(micro, topo, links, "train", "topology", math.inf, p, m, split, 0,
                           stage_plan)


@pytest.mark.parametrize("name", ["ethernet:2", "dgx-a100:4"])
def test_the_bound_is_below_every_plan_of_its_shape(name):
    """Brute force: every shape, every split, each stage planned exactly for its own step
    (plan_setting) or for the weighted objectives the bound relaxes, at several ratios."""
    graph = build_graph(_config())
    topo = preset(name)
    links = LinkModel(topo)
    for p, m in shapes(graph, topo):
        bound = dual_bound(graph, links, p, m).bound_s
        assert math.isfinite(bound)
        splits = [s for s in itertools.product(range(1, LAYERS), repeat=p) if sum(s) == LAYERS]
        steps = [plan_setting(graph, topo, p=p, m=m, split=s).total_time_s for s in splits]
        # every stage at one ratio, or one stage's sync charged m times and the others' not
        ratios = [(r,) * p for r in (0.0, 1.0, float(m))] + [
            tuple(float(m) if j == i else 0.0 for j in range(p)) for i in range(p)]
        for s in splits[:2]:
            for rs in ratios:
                steps.append(_weighted_pipeline(graph, topo, links, p, m, s, rs).total_time_s)
        assert min(steps) >= bound * (1 - 1e-9), (name, p, m, min(steps), bound)


def test_the_estimated_split_is_the_fastest_to_plan():
    """gpt2 on two DGX hosts, 2 stages x 8 micro-batches: the split the stage charges estimate
    best is the fastest of every split planned in full (the LM head's stage takes fewer
    layers), which neither the balanced nor the last-lighter split is."""
    graph = build_graph(load_model_config("gpt2"))
    topo = preset("dgx-a100:2")
    split = dual_bound(graph, LinkModel(topo), 2, 8).split
    steps = {k: plan_setting(graph, topo, p=2, m=8, split=(k, 12 - k)).total_time_s
             for k in range(1, 12)}
    assert split == (min(steps, key=steps.get), 12 - min(steps, key=steps.get))
    assert split not in ((6, 6), (7, 5))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=12))
def test_convex_minorant_is_below_and_convex(values):
    v = np.array(values)
    h = _convex_minorant(v)
    assert (h <= v + 1e-9).all()
    assert h[0] == v[0] and h[-1] == v[-1]
    assert (np.diff(h, 2) >= -1e-7).all()
