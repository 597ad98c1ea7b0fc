"""Planner behaviour: exact against the ILP, rediscovers textbook plans, honours memory."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from taps_core.collectives import TopologyCost, all_reduce
from taps_core.costs import level_move, reshard_phases
from taps_core.errors import InfeasibleError, InvalidInputError
from taps_core.layered import find_chain, solve_problem
from taps_core.linkmodel import LinkModel
from taps_core.models import build_graph, load_model_config
from taps_core.planner import (
    NotFitting,
    compare,
    data_parallel_filter,
    megatron_filter,
    reduction,
    search,
)
from taps_core.presets import preset
from taps_core.search_problem import build_problem
from taps_core.solver import ilp, solve


def _graph(name: str, **changes):
    return build_graph(replace(load_model_config(name), **changes))


@pytest.mark.parametrize(
    "model, topo, mode",
    [
        ("mlp-2layer", "dgx-a100:1", "train"),
        ("mlp-2layer", "pcie-nvlink:2", "infer"),
        ("gpt2", "dgx-a100:1", "train"),
        ("gpt2", "ethernet:2", "infer"),
    ],
)
def test_dp_equals_ilp_on_model_problems(model, topo, mode):
    graph = _graph(model, num_hidden_layers=2, batch_size=4, seq_length=128)
    t = preset(topo)
    problem = build_problem(graph, t, mode, TopologyCost(LinkModel(t)))
    cg = problem.cost_graph()
    dp = solve(cg)
    ref = ilp(cg)
    assert dp.cost == pytest.approx(ref.cost, rel=1e-9)


def test_layered_solve_equals_plain_elimination(gpt2_small, dgx2):
    problem = build_problem(gpt2_small, dgx2, "train", TopologyCost(LinkModel(dgx2)))
    assert find_chain(problem) is not None
    layered = solve_problem(problem)
    plain = solve(problem.cost_graph())
    assert layered.stats["layered"]
    assert layered.cost == pytest.approx(plain.cost, rel=1e-12)
    assert problem.cost_graph().total(layered.strategies) == pytest.approx(layered.cost, rel=1e-12)


def test_reported_time_equals_search_objective(gpt2_small, dgx2):
    problem = build_problem(gpt2_small, dgx2, "train", TopologyCost(LinkModel(dgx2)))
    best = solve(problem.cost_graph()).cost
    plan = search(gpt2_small, dgx2)
    assert plan.total_time_s == pytest.approx(best, rel=1e-9)
    assert plan.search.status == "optimal"


def test_one_node_small_batch_gpt_block_gets_megatron_mlp(dgx1):
    # a GPT-3-sized block at batch 1: the MLP is split column-then-row over the node's GPUs
    graph = _graph("gpt3-175b", num_hidden_layers=1, batch_size=1, seq_length=128)
    plan = search(graph, dgx1, mode="train")
    s = plan.strategies
    assert s["L0.mlp.up"].intra == (("f", 8),)  # column: FFN features, no communication
    assert s["L0.mlp.gelu"].intra == (("f", 8),)
    assert "f" in dict(s["L0.mlp.down"].intra)  # row: contracts over the split FFN dim
    megatron = search(graph, dgx1, mode="train", allow=megatron_filter(graph, dgx1))
    assert plan.total_time_s <= megatron.total_time_s * (1 + 1e-12)


def test_megatron_mlp_comm_is_one_all_reduce_each_way(dgx1):
    graph = _graph("mlp-2layer", batch_size=2, seq_length=64)
    plan = search(graph, dgx1, mode="infer", allow=megatron_filter(graph, dgx1))
    assert plan.strategies["fc1"].intra == (("f", 8),)
    assert plan.strategies["fc2"].intra == (("f", 8),)
    out_bytes = graph.tensors["fc2"].nbytes
    (phase,) = all_reduce(1, 8, out_bytes)
    expected = TopologyCost(LinkModel(dgx1)).seconds(phase)
    assert plan.comm_time_s == pytest.approx(expected, rel=1e-9)


def test_slow_network_keeps_tensor_splits_inside_nodes():
    graph = _graph("gpt2", num_hidden_layers=2, batch_size=16, seq_length=512)
    plan = search(graph, preset("ethernet:2"), mode="train")
    for op in plan.ops:
        assert {ch for ch, _ in op.strategy.inter} <= {"b"}, op


def test_baselines_never_beat_taps(gpt2_small):
    for topo in ("dgx-a100:2", "ethernet:2", "pcie:2"):
        plans = compare(gpt2_small, preset(topo), mode="train")
        taps = plans["taps"]
        for label, p in plans.items():
            if not isinstance(p, NotFitting):
                assert taps.total_time_s <= p.total_time_s * (1 + 1e-9), (topo, label)


def test_topology_aware_search_cuts_communication_on_a_slow_network():
    graph = _graph("gpt3-175b", num_hidden_layers=4)
    plans = compare(graph, preset("ethernet:4"), mode="train")
    assert reduction(plans["taps"], plans["volume"]) > 0.5
    assert plans["taps"].inter_node_bytes < plans["volume"].inter_node_bytes


def test_memory_limit_binds_and_is_respected(gpt2_small, dgx2):
    free = search(gpt2_small, dgx2)
    limit = free.memory.total * 0.6
    tight = search(gpt2_small, dgx2, memory_limit_bytes=limit)
    assert tight.memory.total <= limit
    assert tight.search.status == "feasible"
    assert tight.search.lower_bound_s <= tight.total_time_s + 1e-12
    assert tight.total_time_s >= free.total_time_s
    with pytest.raises(InfeasibleError, match="memory"):
        search(gpt2_small, dgx2, memory_limit_bytes=1e3)


def test_memory_lagrangian_close_to_exact_ilp(mlp):
    t = preset("dgx-a100:1")
    problem = build_problem(mlp, t, "train", TopologyCost(LinkModel(t)))
    free = search(mlp, t)
    limit = free.memory.total * 0.7
    exact = ilp(problem.cost_graph(), node_weights=problem.memory, weight_limit=limit)
    got = search(mlp, t, memory_limit_bytes=limit)
    assert got.memory.total <= limit * (1 + 1e-9)
    assert got.total_time_s >= exact.cost * (1 - 1e-9)
    assert got.search.lower_bound_s <= exact.cost * (1 + 1e-9)


def test_data_parallel_baseline_splits_only_the_batch(dgx2):
    graph = _graph("gpt2", num_hidden_layers=2, batch_size=16, seq_length=128)
    plan = search(graph, dgx2, allow=data_parallel_filter(dgx2))
    for op in plan.ops:
        assert op.strategy.inter == (("b", 2),) and op.strategy.intra == (("b", 8),)


def test_bad_workloads_name_the_field(dgx2):
    with pytest.raises(InvalidInputError, match="batch_size"):
        search(_graph("gpt2", batch_size=3), dgx2)
    with pytest.raises(InvalidInputError, match="topology"):
        search(
            _graph("mlp-2layer", batch_size=2, seq_length=1, hidden_size=2, intermediate_size=2),
            preset("dgx-a100:2"),
        )
    with pytest.raises(InvalidInputError, match="mode"):
        search(_graph("gpt2"), dgx2, mode="serve")


@pytest.mark.parametrize(
    "src, dst, kind, q",
    [
        ((1, 1), (4, 1), "slice", 1),
        ((4, 1), (1, 1), "all_gather", 4),
        ((4, 2), (4, 1), "all_gather", 2),
        ((8, 1), (1, 8), "all_to_all", 8),
        ((2, 4), (4, 2), "all_to_all", 2),
    ],
)
def test_level_moves(src, dst, kind, q):
    move = level_move(src, dst)
    assert (move.collective, move.q) == (kind, q)


def test_reshard_gather_is_hand_worked():
    # replicate a tensor split 8 ways inside nodes: all-gather, each rank sends 7/8 of it
    (p,) = reshard_phases(8e6, ((1, 1), (8, 1)), ((1, 1), (1, 1)))
    assert (p.collective, p.level, p.q) == ("all_gather", "intra", 8)
    assert p.per_rank_bytes == pytest.approx(7e6)
    assert reshard_phases(8e6, ((1,), (1,)), ((2,), (4,))) == ()


def test_plan_links_account_for_every_byte(gpt2_small, dgx2):
    plan = search(gpt2_small, dgx2)
    busiest = max(plan.links, key=lambda k: k.busy_time_s)
    assert busiest.bytes > 0
    assert np.isclose(busiest.busy_time_s, busiest.bytes / (busiest.bandwidth_Bps * 0.8))


@pytest.mark.parametrize("name", ["gpt2", "bert-large", "llama3-8b", "mixtral-8x7b", "resnet50"])
def test_search_objective_and_memory_match_the_report(name):
    changes = (
        {"batch_size": 8}
        if name == "resnet50"
        else {"num_hidden_layers": 3, "batch_size": 4, "seq_length": 128}
    )
    graph = _graph(name, **changes)
    t = preset("dgx-a100:2")
    links = LinkModel(t)
    problem = build_problem(graph, t, "train", TopologyCost(links))
    sol = solve_problem(problem)
    memory = sum(float(problem.memory[n][i]) for n, i in sol.strategies.items())
    plan = search(graph, t, memory_limit_bytes=1e15, links=links)
    assert plan.total_time_s == pytest.approx(sol.cost, rel=1e-9)
    assert plan.memory.total == pytest.approx(memory, rel=1e-12)


def test_wider_space_never_worse_and_narrower_never_better(mlp, dgx1):
    from taps_core.strategies import SearchSpace

    default = search(mlp, dgx1)
    wide = search(mlp, dgx1, space=SearchSpace(max_dims_per_level=3, whole_levels=False))
    narrow = search(mlp, dgx1, space=SearchSpace(max_dims_per_level=1))
    assert wide.total_time_s <= default.total_time_s * (1 + 1e-12)
    assert narrow.total_time_s >= default.total_time_s * (1 - 1e-12)
    assert wide.search.num_strategies > default.search.num_strategies


def test_double_gather_runs_intra_first_on_the_inter_split_data():
    # split 2 ways across nodes and 4 inside: gather inside first (each GPU holds 1/8, the
    # result 1/2), then across nodes on the intra-replicated half
    phases = reshard_phases(8e6, ((2,), (4,)), ((1,), (1,)))
    intra, inter = sorted(phases, key=lambda p: p.level != "intra")
    assert (intra.level, intra.q, intra.per_rank_bytes) == ("intra", 4, pytest.approx(3e6))
    assert (inter.level, inter.q, inter.per_rank_bytes) == ("inter", 2, pytest.approx(4e6))
    # a free slice across nodes comes first and shrinks the intra gather
    (only,) = reshard_phases(8e6, ((1,), (4,)), ((2,), (1,)))
    assert only.per_rank_bytes == pytest.approx(3e6)
