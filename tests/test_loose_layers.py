"""Layers outside the chain of identical layers choose their recomputation on their own: a
pipeline stage's first layer (fed from the previous stage) and its last (whose output leaves
the stage) are cut out of the rest at the tensors they share
(:func:`taps_core.search.layered.loose_layers`). The layered solve and the memory-bound front
search equal brute force over every per-layer assignment of kept / selective / full."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import preset
from taps_core.costs.collectives import TopologyCost
from taps_core.models import build_graph, load_model_config
from taps_core.search.flat import LEANEST_WEIGHT, _fit_memory
from taps_core.search.layered import find_chain, loose_layers, solve_problem
from taps_core.search.memory_bound import evaluate_at, memory_of
from taps_core.search.pipeline import stage_graph
from taps_core.search.problem import KEPT, build_problem, expanded_problem
from taps_core.solver import ilp, solve


@pytest.fixture(scope="module")
def stage():
    """The middle stage (layers 1-4) of a 6-layer gpt2, ZeRO 0, on one host of 4 PCIe GPUs: a chain
    of two identical layers between a loose first and a loose last layer."""
    cfg = replace(load_model_config("gpt2"), num_hidden_layers=6, batch_size=4, seq_length=128)
    sg = stage_graph(build_graph(cfg), 1, 4, head=False, tail=False)
    t = preset("pcie:1")
    problem = build_problem(sg, t, "train", TopologyCost(LinkModel(t))).restricted(0)
    chain = find_chain(problem)
    assert chain is not None and len(chain.layers) == 3
    top = set(problem.option_time) - {n for lay in chain.layers[1:] for n in lay}
    loose = loose_layers(problem, top | {chain.exits[-1]})
    assert loose is not None and [lay.layer for lay in loose] == [1, 4]
    return problem


def _layers(problem):
    return sorted({lay for lay in problem.layer.values() if lay is not None})


def _per_layer(problem, weight, variant_of):
    """The plain DP's optimum at ``time + weight * memory`` with each layer in its variant."""
    graph, memory = expanded_problem(problem, variant_of)
    costs = {n: c + weight * memory[n] for n, c in graph.node_costs.items()}
    return solve(replace(graph, node_costs=costs)).cost


@pytest.mark.parametrize("weight", [0.0, 3e-11, 1e-10, 1e-9])
def test_layered_solve_equals_brute_force_per_layer(stage, weight):
    """At each memory weight (s/byte) the layered solve's cost equals the least over all 3^4
    per-layer assignments, and the layers it reports reach that cost."""
    problem = stage
    layers = _layers(problem)
    brute = {
        combo: _per_layer(problem, weight, dict(zip(layers, combo)))
        for combo in itertools.product(problem.variant_keys, repeat=len(layers))
    }
    solved = solve_problem(problem, weight)
    assert solved.cost == pytest.approx(min(brute.values()), rel=1e-12)
    chosen = tuple(solved.recompute[lay] for lay in layers)
    assert brute[chosen] == pytest.approx(solved.cost, rel=1e-12)


@pytest.mark.parametrize("frac", [0.25, 0.3])
def test_memory_bound_search_equals_ilp_per_layer(stage, frac):
    """Under a memory limit between the leanest and the fastest plan, the exact front search
    (proven optimal) equals the ILP with the memory constraint over every per-layer
    assignment; its plans mix variants (at 0.3 the two loose layers differ: one shared
    choice outside the chain could not)."""
    problem = stage
    fast, lean = evaluate_at(problem, 0.0), evaluate_at(problem, LEANEST_WEIGHT)
    limit = lean.memory_bytes + frac * (fast.memory_bytes - lean.memory_bytes)
    found, info, _ = _fit_memory(problem, limit, "train")
    layers = _layers(problem)
    combos = [dict(zip(layers, c))
              for c in itertools.product(problem.variant_keys, repeat=len(layers))]
    # each assignment's Lagrangian min time + lam * (memory - limit) bounds its constrained
    # optimum from below for any lam >= 0 (the best of a few around the search's multiplier):
    # every assignment whose bound is below the plan found gets the ILP (exact, and quick)
    lams = [info.memory_weight * f for f in (0.25, 0.5, 1.0, 2.0, 4.0)]
    assert info.status == "optimal" and memory_of(problem, found) <= limit * (1 + 1e-9)
    best = found.cost  # the search's plan fits: brute force must not beat it
    for low, variant_of in sorted(
        (max(_per_layer(problem, lam, c) - lam * limit for lam in lams), i)
        for i, c in enumerate(combos)
    ):
        if low >= best * (1 - 1e-9):
            break
        graph, memory = expanded_problem(problem, combos[variant_of])  # the exact ILP
        try:
            sol = ilp(graph, node_weights=memory, weight_limit=limit)
        except ValueError:
            continue
        if sum(float(memory[n][i]) for n, i in sol.strategies.items()) <= limit * (1 + 1e-9):
            best = min(best, sol.cost)
    assert found.cost == pytest.approx(best, rel=1e-7)
    assert set(found.recompute) == set(layers)
    assert len({found.recompute[lay] for lay in layers}) > 1, found.recompute
    if frac == 0.3:
        assert found.recompute[1] != found.recompute[4] and KEPT in found.recompute.values()
