"""Pipeline stages: the 1F1B step, bubble, point-to-point bytes and stage memory worked by
hand from the stages' own figures; stage graphs and sub-clusters; slow networks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import preset
from taps_core.cluster.topology import sub_topology
from taps_core.costs.collectives import TopologyCost
from taps_core.ir.strategies import Strategy
from taps_core.models import build_graph, load_model_config
from taps_core.plan.evaluate import evaluate
from taps_core.plan.records import Plan, SearchInfo
from taps_core.search.pipeline import (
    search_pipeline,
    stage_graph,
)
from taps_core.search.problem import build_problem
from taps_core.search.sends import (
    tied_exchange_extra,
    tied_shard_bytes,
)


def _graph(name: str, **changes):
    return build_graph(replace(load_model_config(name), **changes))


@pytest.fixture(scope="module")
def piped():
    graph = _graph("gpt2", num_hidden_layers=4, batch_size=16, seq_length=256)
    topo = preset("dgx-a100:2")
    plan = search_pipeline(graph, topo, stage_counts=(2,), time_budget_s=None)
    assert plan is not None and plan.pipeline is not None
    return graph, topo, plan


def test_one_f_one_b_step_and_bubble_by_hand(piped):
    _, _, plan = piped
    pi = plan.pipeline
    p, m = len(pi.stages), pi.microbatches
    t = [st.microbatch_s for st in pi.stages]
    sync = max(st.sync_s for st in pi.stages)
    step = (m - 1) * max(t) + sum(t) + sync
    assert pi.step_time_s == pytest.approx(step, rel=1e-12)
    assert plan.total_time_s == pytest.approx(step, rel=1e-12)
    assert pi.bubble_time_s == pytest.approx(sum(t) - max(t), rel=1e-9)
    # balanced stages: the bubble is (p - 1) / (m + p - 1) of the busy time
    if max(t) / min(t) < 1.01:
        assert pi.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), rel=0.02)
    # each stage's micro-batch is its own step over m micro-batches minus the sync, plus sends
    # (the sync adds a tied embedding's exchange between the first and last stage)
    for st in pi.stages:
        own = (st.plan.total_time_s - (st.sync_s - st.tied_sync_s)) / m
        assert st.microbatch_s == pytest.approx(own + st.send_s, rel=1e-12)


def test_p2p_bytes_are_the_boundary_activation_both_ways(piped):
    _, _, plan = piped
    pi = plan.pipeline
    m, p = pi.microbatches, len(pi.stages)
    b, s, h = pi.micro_batch_size, 256, 768
    boundary = b * s * h * 2  # one micro-batch's residual stream, bf16
    assert pi.p2p_bytes == pytest.approx(2 * m * (p - 1) * boundary)
    assert plan.inter_node_bytes >= pi.p2p_bytes


def test_stage_memory_holds_the_in_flight_micro_batches(piped):
    # under 1F1B the first stage holds p micro-batches of activations, the last one
    graph, topo, plan = piped
    pi = plan.pipeline
    p = len(pi.stages)
    first, last = pi.stages[0], pi.stages[-1]
    for st, copies in ((first, min(p, pi.microbatches)), (last, 1)):
        sg = stage_graph(
            build_graph(graph.meta["config"].with_workload(batch_size=pi.micro_batch_size)),
            *st.layers, head=st.index == 0, tail=st.index == p - 1,
        )
        from taps_core.cluster.links import LinkModel

        sub = sub_topology(topo, st.hosts if st.index == 0 else tuple(range(len(st.hosts))))
        once = evaluate(
            sg, LinkModel(sub), "train", st.plan.choices, label="x", cost_model="topology",
            search=st.plan.search, memory_limit_bytes=1e18, microbatches=pi.microbatches,
        )
        assert st.plan.memory.activations == pytest.approx(copies * once.memory.activations)
        assert st.plan.memory.parameters == pytest.approx(once.memory.parameters)


def test_stage_graph_cuts_at_layers_and_unties_the_lm_head():
    graph = _graph("gpt2", num_hidden_layers=4, batch_size=8, seq_length=64)
    head = stage_graph(graph, 0, 1, head=True, tail=False)
    tail = stage_graph(graph, 2, 3, head=False, tail=True)
    assert "embed" in head.op_by_name and "lm_head" not in head.op_by_name
    assert "lm_head" in tail.op_by_name and "embed" not in tail.op_by_name
    assert not tail.tensors["lm_head.weight"].tied  # its own copy on the last stage
    assert {op.layer for op in tail.ops if op.layer is not None} == {2, 3}


def test_slow_network_pipelines_without_splitting_tensors_across_nics():
    graph = _graph("gpt2", num_hidden_layers=8, batch_size=32, seq_length=512)
    plan = search_pipeline(graph, preset("ethernet:4"), time_budget_s=None)
    assert plan is not None
    # no layer splits heads, hidden or FFN across the single 12.5 GB/s NICs (the LM head may
    # split the vocabulary across hosts: only the loss's per-row statistics cross them)
    for op in plan.ops:
        if op.layer is not None:
            assert {ch for ch, _ in op.strategy.inter} <= {"b"}, op.name


def test_pipelined_decision_is_priced_against_the_fastest_flat_configuration(piped):
    """A pipelined plan of identical layers is priced against the fastest Megatron-LM /
    DeepSpeed configuration without stages (priced, not searched again)."""
    from taps_core.search.planner import expert_plan
    from taps_core.studies.explain import _choices, decisions

    graph, topo, plan = piped
    assert all(0 < share <= 1 + 1e-9 for _, _, share, _ in _choices(plan))
    (found,) = decisions(plan, graph, topo, mode="train")
    flat = expert_plan(graph, topo, max_stages=1)
    assert flat is not None and flat.pipeline is None
    assert found.saved_s == pytest.approx(flat.total_time_s - plan.total_time_s, rel=1e-9)
    assert found.what.startswith(f"{len(plan.pipeline.stages)} pipeline stages")
    assert "configuration without stages" in found.words


def test_a_pipeline_never_claims_to_be_optimal(piped):
    from taps_core.plan.claims import search_status

    _, _, plan = piped
    # its stage plans are proven, but the stage split and micro-batch count are only searched
    assert all(st.plan.search.status == "optimal" for st in plan.pipeline.stages)
    assert plan.search.status == "feasible" and plan.search.lower_bound_s is None
    assert "not a proof" in plan.search.note
    assert search_status(plan).startswith("each stage's plan optimal (proven)")


def test_the_tied_exchange_is_the_whole_weight_where_the_stages_split_it_differently():
    """The first stage's embedding and the last stage's LM head hold the tied weight: the
    same split exchanges one shard per GPU pair, another split the whole weight (summed whole,
    then split again, as the DTensor export's sync_tied_grads does)."""
    micro = _graph("gpt2", num_hidden_layers=2, batch_size=8, seq_length=64)
    links = LinkModel(preset("dgx-a100:2"))
    sub = links.first_hosts(1)
    info = SearchInfo("fixed", 0.0, 0, "fixed")
    vocab = Strategy((), (("v", 8),))

    def stage(first: bool, head_split: Strategy) -> Plan:
        sg = (stage_graph(micro, 0, 0, head=True, tail=False) if first
              else stage_graph(micro, 1, 1, head=False, tail=True))
        split = {"embed", "lm_head", "loss"}
        choice = {op.name: head_split if op.name in split else Strategy((), ()) for op in sg.ops}
        return evaluate(sg, sub, "train", choice, label="stage", cost_model="topology",
                        search=info, memory_limit_bytes=float("inf"))

    last = stage(False, vocab)
    whole = float(micro.tensors["wte"].nbytes)
    shard = tied_shard_bytes(micro, last)
    assert shard == pytest.approx(whole / 8, rel=0.01)  # the vocabulary padded to 8 ways
    assert tied_shard_bytes(micro, last, stage(True, vocab)) == shard
    assert tied_shard_bytes(micro, last, stage(True, Strategy((), ()))) == whole
    # the last stage's search prices each head strategy against the first stage's embedding
    sg = stage_graph(micro, 1, 1, head=False, tail=True)
    problem = build_problem(sg, sub.topology, "train", TopologyCost(sub))
    node, alone = tied_exchange_extra(problem, micro, links, 1, 2)
    _, against = tied_exchange_extra(problem, micro, links, 1, 2, stage(True, Strategy((), ())))
    split = problem.strategies[node].index(vocab)
    assert against[split] > alone[split]  # split another way than the embedding: the whole
    unsplit = problem.strategies[node].index(Strategy((), ()))
    assert against[unsplit] == alone[unsplit]  # both whole: the same


@pytest.mark.parametrize("spec", ["tp=2,pp=2,mbs=2,zero=1", "tp=1,pp=4,mbs=1,recompute=full"])
def test_a_pipeline_recosted_on_other_links_equals_its_price_there(spec):
    """recost_pipeline keeps stages, split, micro-batches and every op's choice: a framework
    configuration with stages priced on one network and re-costed on another (the bandwidth
    sweep's use) equals its price there; on its own links it gives its own figures."""
    from taps_core.cluster.topology import node_inter_bandwidth, scale_inter_bandwidth
    from taps_core.search.fixed_config import parse_fixed, plan_fixed
    from taps_core.search.pipeline import recost_pipeline

    graph = _graph("gpt2", num_hidden_layers=4, batch_size=32, seq_length=256)
    fast = preset("dgx-a100:4")  # tied embedding across the first and last stage included
    slow = scale_inter_bandwidth(fast, node_inter_bandwidth(fast) / 20)
    config = parse_fixed(spec)
    here, there = plan_fixed(graph, fast, config), plan_fixed(graph, slow, config)
    assert here.pipeline is not None and there.total_time_s > here.total_time_s
    moved = recost_pipeline(here, graph, LinkModel(slow))
    same = recost_pipeline(here, graph, LinkModel(fast))
    for got, want in ((moved, there), (same, here)):
        assert got.total_time_s == pytest.approx(want.total_time_s, rel=1e-12)
        assert got.comm_time_s == pytest.approx(want.comm_time_s, rel=1e-12)
        assert got.memory.total == pytest.approx(want.memory.total, rel=1e-12)
        assert got.pipeline.bubble_time_s == pytest.approx(want.pipeline.bubble_time_s, rel=1e-9)
    searched = search_pipeline(graph, fast)
    assert searched is not None
    again = recost_pipeline(searched, graph, LinkModel(fast))
    assert again.total_time_s == pytest.approx(searched.total_time_s, rel=1e-12)
