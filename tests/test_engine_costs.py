"""Costs worked by hand: conversions between layouts, memory per Korthikanti et al. 2022,
ZeRO, recomputation, KV cache, sliced cross-host collectives, MoE and tied weights."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import preset
from taps_core.costs.collectives import TopologyCost, VolumeCost, all_reduce
from taps_core.costs.reshard import Resharder, convert_phases, level_move
from taps_core.ir.strategies import Strategy
from taps_core.models import build_graph, load_model_config
from taps_core.plan.evaluate import evaluate
from taps_core.plan.records import OpChoice
from taps_core.plan.records import SearchInfo as Info

NO = (1, 1)


def _graph(name: str, **changes):
    return build_graph(replace(load_model_config(name), **changes))


def _evaluate(graph, topo, mode, choice):
    return evaluate(
        graph, LinkModel(topo), mode, choice, label="x", cost_model="topology",
        search=Info("manual", 0.0, 0), memory_limit_bytes=1e18,
    )


def _everyone(graph, strategy, **levers):
    return {op.name: OpChoice(strategy, **levers) for op in graph.ops}


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


def test_gather_inside_a_node_is_hand_worked():
    # replicate a tensor split 8 ways inside nodes: all-gather, each rank sends 7/8 of it
    (p,) = convert_phases(8e6, ((1, 1), (8, 1), NO), ((1, 1), (1, 1), NO), 8)
    assert (p.collective, p.level, p.q) == ("all_gather", "intra", 8)
    assert p.per_rank_bytes == pytest.approx(7e6)
    assert convert_phases(8e6, ((1,), (1,), NO), ((2,), (4,), NO), 8) == ()


def test_partial_sums_are_reduce_scattered_when_the_reader_wants_them_split():
    # row-parallel output, partial over 8 GPUs, read split 8 ways along the sequence:
    # a reduce-scatter (7/8 of the tensor per rank), Megatron's sequence parallelism
    (p,) = convert_phases(8e6, ((1, 1), (1, 1), (1, 8)), ((1, 1), (8, 1), NO), 8)
    assert (p.collective, p.q, p.per_rank_bytes) == ("reduce_scatter", 8, pytest.approx(7e6))
    # read whole: an all-reduce (2 * 7/8 of it)
    (p,) = convert_phases(8e6, ((1, 1), (1, 1), (1, 8)), ((1, 1), (1, 1), NO), 8)
    assert (p.collective, p.per_rank_bytes) == ("all_reduce", pytest.approx(14e6))


def test_cross_node_move_of_data_copied_inside_the_node_is_sliced():
    # 8 GPUs of a host hold the same batch half; gathering the batch across 2 hosts sends
    # 1/8 of the half per GPU over its NIC, then the host all-gathers over NVLink
    phases = convert_phases(16e6, ((2,), (1,), NO), ((1,), (1,), NO), 8)
    inter = [p for p in phases if p.level == "inter"]
    intra = [p for p in phases if p.level == "intra"]
    assert len(inter) == 1 and inter[0].per_rank_bytes == pytest.approx(0.5 * 16e6 / 8 / 2 * 2)
    assert len(intra) == 1 and intra[0].per_rank_bytes == pytest.approx(7 / 8 * 16e6)
    # the same as an all-reduce's copies rule
    ar = all_reduce(2, 1, 8e6, copies=8)
    assert [p.level for p in ar] == ["inter", "intra"]
    assert ar[0].per_rank_bytes == pytest.approx(2 * 0.5 * 1e6)


def test_vectorised_conversions_equal_the_phase_lists():
    topo = preset("dgx-a100:2")
    comm = TopologyCost(LinkModel(topo))
    res = Resharder(comm, topo.gpus_per_node)
    levels = [(1, 1), (2, 1), (1, 2), (2, 2), (4, 1), (1, 4), (8, 1), (4, 2)]
    inter = [(1, 1), (2, 1), (1, 2)]
    layouts = [
        (i, a, p)
        for i, a, p in itertools.product(inter, levels, [(1, 1), (1, 2), (2, 1), (2, 4)])
        if np.prod(i) * p[0] <= 2 and np.prod(a) * p[1] <= 8
    ]
    targets = [(i, a, NO) for i, a in itertools.product(inter, levels)]
    mat = res.convert(3e7, layouts, targets)
    for x, src in enumerate(layouts):
        for y, dst in enumerate(targets):
            want = sum(comm.seconds(p) for p in convert_phases(3e7, src, dst, 8))
            assert mat[x, y] == pytest.approx(want, rel=1e-12, abs=1e-15), (src, dst)


def test_activation_memory_follows_korthikanti():
    # data parallel over 8 GPUs, one sample per GPU: each layer keeps s*b*h*(34 + 5*a*s/h)
    # bytes (softmax, its dropout mask and output: 5 bytes per attention score)
    s, h, a = 256, 1024, 16
    graph = _graph(
        "gpt3-175b", num_hidden_layers=2, hidden_size=h, num_attention_heads=a,
        intermediate_size=4 * h, batch_size=8, seq_length=s,
    )
    dp = Strategy((), (("b", 8),))
    plan = _evaluate(graph, preset("dgx-a100:1"), "train", _everyone(graph, dp))
    layer = sum(op.memory.activations for op in plan.ops if op.layer == 1)
    assert layer == pytest.approx(s * 1 * h * (34 + 5 * a * s / h))
    # flash attention keeps no score tensors: the 5*a*s/h term goes
    flash = build_graph(replace(graph.meta["config"], flash_attention=True))
    plan = _evaluate(flash, preset("dgx-a100:1"), "train", _everyone(flash, dp))
    assert sum(op.memory.activations for op in plan.ops if op.layer == 1) == pytest.approx(
        34 * s * h
    )
    # full recomputation keeps only the layer input (2*s*b*h) and re-runs the forward
    rc = _evaluate(graph, preset("dgx-a100:1"), "train", _everyone(graph, dp, recompute=True))
    assert sum(op.memory.activations for op in rc.ops if op.layer == 1) == pytest.approx(
        2 * s * h
    )
    keep = sum(op.compute_s for op in plan.ops if op.layer == 1)
    again = sum(op.compute_s for op in rc.ops if op.layer == 1)
    assert again == pytest.approx(keep * 4 / 3)


def test_selective_recomputation_drops_the_scores_and_reruns_the_attention_core():
    """Korthikanti et al. 2022, selective: a layer keeps 34*s*b*h bytes (the 5*a*s^2*b of
    attention scores re-created in backward, one layer at a time), and only the attention
    core's forward (QK^T and scores x V: 4*s^2*h FLOPs per sample) runs again."""
    s, h, a = 256, 1024, 16
    graph = _graph(
        "gpt3-175b", num_hidden_layers=2, hidden_size=h, num_attention_heads=a,
        intermediate_size=4 * h, batch_size=8, seq_length=s,
    )
    dp = Strategy((), (("b", 8),))
    topo = preset("dgx-a100:1")
    kept = _evaluate(graph, topo, "train", _everyone(graph, dp))
    sel = _evaluate(graph, topo, "train", _everyone(graph, dp, selective=True))
    assert sum(op.memory.activations for op in sel.ops if op.layer == 1) == pytest.approx(
        34 * s * h
    )
    assert sel.memory.transient == pytest.approx(5 * a * s * s)  # one layer's scores
    assert sel.selective_layers == 2 and sel.recomputed_layers == 0
    for k, c in zip(kept.ops, sel.ops, strict=True):
        if k.kind == "attention":
            assert c.compute_s == pytest.approx(k.compute_s * 4 / 3)
            assert c.selective
        else:
            assert c.compute_s == k.compute_s
    core = next(op for op in kept.ops if op.kind == "attention")
    flops = 4 * s * s * h * 1  # one sample per GPU
    rate = topo.gpu.peak_flops * topo.compute_efficiency
    assert core.compute_s / 3 == pytest.approx(flops / rate, rel=1e-6)


def test_zero_stages_shard_state_over_the_data_parallel_group():
    graph = _graph("mlp-2layer", batch_size=8, seq_length=64)
    topo = preset("dgx-a100:1")
    dp = Strategy((), (("b", 8),))
    params = graph.num_parameters
    want = {0: 16 * params, 1: (4 + 12 / 8) * params, 2: (2 + 14 / 8) * params, 3: 16 * params / 8}
    sent = {}
    for zero, total in want.items():
        plan = _evaluate(graph, topo, "train", _everyone(graph, dp, zero=zero))
        state = plan.memory.parameters + plan.memory.gradients + plan.memory.optimizer
        assert state == pytest.approx(total), zero
        sent[zero] = plan.comm_bytes
    # stages 0-2 move the bytes of one all-reduce; stage 3 gathers twice more: 1.5x
    assert sent[0] == pytest.approx(sent[1]) == pytest.approx(sent[2])
    assert sent[3] == pytest.approx(1.5 * sent[0])


def test_kv_cache_of_llama3_70b_inference():
    # 2 (K, V) x 80 layers x 8 KV heads x 128 x 4096 tokens x batch 8 x 2 bytes = 10.7 GB,
    # batch split 8 ways: 1/8 per GPU
    graph = _graph("llama3-70b", batch_size=8, seq_length=4096)
    plan = _evaluate(graph, preset("dgx-a100:1"), "infer",
                     _everyone(graph, Strategy((), (("b", 8),)), zero=3))
    total = 2 * 80 * 8 * 128 * 4096 * 8 * 2
    assert total == pytest.approx(10.7e9, rel=0.01)
    assert plan.memory.kv_cache == pytest.approx(total / 8)
    assert plan.memory.gradients == 0 and plan.memory.optimizer == 0


def test_volume_figure_is_bytes_per_gpu_over_the_constant():
    graph = _graph("mlp-2layer", batch_size=8, seq_length=64)
    topo = preset("dgx-a100:2")
    plan = _evaluate(graph, topo, "train", _everyone(graph, Strategy((("b", 2),), (("b", 8),))))
    per_gpu = plan.comm_bytes / topo.num_gpus
    assert plan.volume_comm_time_s == pytest.approx(VolumeCost().seconds_per_byte * per_gpu)


def test_tied_embedding_gradient_is_synced_once():
    # GPT-2 ties the LM head to the token embedding: data parallel, both hold the weight the
    # same way, so the head's gradient is added locally and only the owner syncs it
    graph = _graph("gpt2", num_hidden_layers=1, batch_size=8, seq_length=64)
    plan = _evaluate(graph, preset("dgx-a100:1"), "train",
                     _everyone(graph, Strategy((), (("b", 8),))))
    by_name = {op.name: op for op in plan.ops}
    assert any(lbl.startswith("grad_sync wte") for lbl, _ in by_name["embed"].phases)
    assert not [lbl for lbl, _ in by_name["lm_head"].phases if "grad_sync" in lbl]


def test_moe_dispatch_moves_each_routed_token_once():
    # experts split 2 ways across nodes with tokens replicated there, tokens split 8 ways
    # inside: each GPU first keeps only the tokens routed to its node's experts (free), then
    # the node all-gathers them, so a GPU sends 7/8 of half the routed tokens, not of all
    from taps_core.costs.ops import op_cost

    graph = _graph("mixtral-8x7b", num_hidden_layers=1, batch_size=8, seq_length=64)
    op = graph.op_by_name["L0.moe.dispatch"]
    cost = op_cost(graph, op, Strategy((("e", 2),), (("b", 8),)), preset("dgx-a100:2"), "infer")
    (phase,) = [p for _, p in cost.fwd]
    assert (phase.collective, phase.level, phase.q) == ("all_gather", "intra", 8)
    assert phase.per_rank_bytes == pytest.approx(7 / 8 * graph.tensors[op.output].nbytes / 2)
