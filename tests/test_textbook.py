"""Every plan's traffic equals the textbook (tests/textbook.py, written from the formulas):
hand-worked GPT-3 layers, then random 3-D configurations of GPT- and Llama-shaped models."""

from __future__ import annotations

from dataclasses import replace

import pytest
import textbook as tb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taps_core.cluster.presets import preset
from taps_core.cluster.topology import build_cluster
from taps_core.models import build_graph, load_model_config
from taps_core.plan.records import Plan
from taps_core.search.fixed_config import FixedConfig, parse_fixed, plan_fixed

WEIGHT_LABELS = ("grad_sync", "zero gather")


def engine_layer(plan: Plan, layer: int | None) -> tb.Ledger:
    """The engine's bytes of one layer's ops (None: the ops outside the layers), by op, kind
    of traffic and link kind, each op named ``L.<its name in the layer>``."""
    book = tb.Ledger()
    stage_gpus = {
        st.index: st.gpus for st in (plan.pipeline.stages if plan.pipeline else ())
    }
    for op in plan.ops:
        if op.layer != layer:
            continue
        gpus = stage_gpus.get(op.stage, plan.nodes * plan.gpus_per_node)
        short = op.name.split(".", 1)[1] if layer is not None else op.name
        for label, ph in op.phases:
            kind = "weight" if label.startswith(WEIGHT_LABELS) else "activation"
            book.add(f"L.{short}", kind, ph.level, ph.per_rank_bytes * gpus)
    return book


def _gpt3(layers: int = 4, **workload):
    cfg = replace(load_model_config("gpt3-175b"), num_hidden_layers=layers, **workload)
    return build_graph(cfg)


def test_micro_batched_megatron_layer_is_the_textbook_90_gb():
    """The primer's worked figure: GPT-3, TP 8 inside a node, 32 micro-batches of 1 sequence:
    4 x 8 GPUs x 2*7/8 x 32 x (2048*12288*2 bytes) = 90.2 GB per layer per step (issue 16's
    Megatron-style plan, TP 8 x PP 2 on two DGX nodes, batch 32)."""
    plan = plan_fixed(_gpt3(), preset("dgx-a100:2"), parse_fixed("tp=8,pp=2,mbs=1"))
    assert plan.pipeline is not None and plan.microbatches == 32
    by_hand = 4 * 8 * 2 * 7 / 8 * 32 * (2048 * 12288 * 2)
    assert by_hand == pytest.approx(90.2e9, rel=1e-3)
    for layer in (1, 2):  # one layer of each stage
        sent = sum(op.comm_bytes for op in plan.ops if op.layer == layer)
        assert sent == pytest.approx(by_hand, rel=1e-3)
        q = next(op for op in plan.ops if op.name == f"L{layer}.attn.q")
        assert q.comm_bytes == pytest.approx(by_hand / 4, rel=1e-3)  # not one micro-batch's


def test_flat_megatron_layer_is_the_textbook_97_gb():
    plan = plan_fixed(_gpt3(), preset("dgx-a100:2"), parse_fixed("tp=8"))
    h, s = 12288, 2048
    tp = 4 * 16 * 2 * 7 / 8 * (16 * s * h * 2)
    dp = 16 * 2 * (1 / 2) * ((12 * h * h + 7 * h) * 2 / 8)  # TP-split weights over 2 nodes
    sent = sum(op.comm_bytes for op in plan.ops if op.layer == 1)
    assert sent == pytest.approx(tp + dp, rel=1e-3)


@pytest.mark.parametrize(
    "spec",
    ["tp=8", "tp=8,sp=1", "tp=4,zero=2", "tp=8,mbs=4,zero=3", "tp=8,pp=2,mbs=2,recompute=full"],
)
def test_hand_worked_gpt3_layers(spec):
    """The table in docs/TRAFFIC.md: one GPT-3 layer on two DGX A100 nodes, batch 32."""
    plan = plan_fixed(_gpt3(), preset("dgx-a100:2"), parse_fixed(spec))
    cfg = _config(parse_fixed(spec), 8, 2, 32)
    _check_layer(plan, 1, tb.layer(GPT3, cfg))


GPT3 = tb.Transformer(12288, 96, 128, 96, 4 * 12288, 50257, 4, 2048, gpt=True)


def _config(fixed: FixedConfig, g: int, nodes: int, batch: int) -> tb.Config:
    hosts = nodes // fixed.pp
    dp_intra = g // fixed.tp
    per = batch // (hosts * dp_intra)
    mbs = fixed.mbs or per
    return tb.Config(fixed.tp, dp_intra, hosts, fixed.pp, per // mbs, mbs, fixed.sp, fixed.zero,
                     fixed.recompute == "full")


def _check_layer(plan: Plan, layer: int, book: tb.Ledger, per_op: bool = True) -> None:
    mine = engine_layer(plan, layer)
    names = sorted(set(book.ops) | set(mine.ops))
    for kind in ("activation", "weight"):
        for level in ("intra", "inter"):
            want = book.total(names, kind, level)
            got = mine.total(names, kind, level)
            assert got == pytest.approx(want, rel=0.01, abs=1.0), (kind, level)
            if not per_op:
                continue
            for name in names:
                w, e = book.total([name], kind, level), mine.total([name], kind, level)
                assert e == pytest.approx(w, rel=0.01, abs=max(1.0, 1e-6 * want)), (
                    name, kind, level
                )


FAMILIES = {
    # (model_type, biases/LayerNorm/GELU, learned positions)
    "gpt": ("gpt3-175b", True),
    "llama": ("llama3-8b", False),
}


@st.composite
def scenarios(draw):
    family = draw(st.sampled_from(sorted(FAMILIES)))
    g = draw(st.sampled_from([2, 4, 8]))
    nodes = draw(st.sampled_from([1, 2, 4]))
    tp = draw(st.sampled_from([d for d in (1, 2, 4, 8) if g % d == 0]))
    pp = draw(st.sampled_from([d for d in (1, 2) if nodes % d == 0]))
    hosts = nodes // pp
    dp = hosts * (g // tp)
    mbs = draw(st.sampled_from([1, 2]))
    m = draw(st.sampled_from([1, 2, 4]))
    heads = tp * draw(st.sampled_from([1, 2]))
    kv = heads if family == "gpt" else draw(st.sampled_from([d for d in (tp, heads) if d]))
    head_dim = draw(st.sampled_from([16, 32]))
    seq = tp * draw(st.sampled_from([8, 16]))
    return dict(
        family=family, g=g, nodes=nodes, tp=tp, pp=pp, batch=dp * mbs * m, mbs=mbs,
        heads=heads, kv=kv, head_dim=head_dim, seq=seq, layers=2 * pp,
        sp=draw(st.booleans()) and tp > 1,
        zero=draw(st.sampled_from([0, 1, 2, 3])),
        recompute=draw(st.booleans()),
        ffn_mult=draw(st.sampled_from([2, 4])),
        tied=draw(st.booleans()),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_random_3d_configurations_match_the_textbook(sc):
    """Per op, per kind of traffic and per link kind, within 1%, for every layer of every
    stage; the sends between stages too."""
    name, gpt = FAMILIES[sc["family"]]
    positions = sc["family"] == "gpt"
    h = sc["heads"] * sc["head_dim"]
    cfg = replace(
        load_model_config(name),
        hidden_size=h,
        num_attention_heads=sc["heads"],
        num_key_value_heads=sc["kv"],
        intermediate_size=sc["ffn_mult"] * h,
        num_hidden_layers=sc["layers"],
        vocab_size=1000,
        max_position_embeddings=max(sc["seq"], 64),
        tie_word_embeddings=sc["tied"],
        batch_size=sc["batch"],
        seq_length=sc["seq"],
    )
    graph = build_graph(cfg)
    topo = build_cluster(sc["nodes"], sc["g"], nics_per_node=min(8, sc["g"]))
    fixed = FixedConfig(
        tp=sc["tp"], pp=sc["pp"], mbs=sc["mbs"], sp=sc["sp"], zero=sc["zero"],
        recompute="full" if sc["recompute"] else "none",
    )
    plan = plan_fixed(graph, topo, fixed, memory_limit_bytes=1e18)
    model = tb.Transformer(
        h, sc["heads"], sc["head_dim"], sc["kv"], sc["ffn_mult"] * h, 1000, sc["layers"],
        sc["seq"], gpt=gpt, positions=max(sc["seq"], 64) if positions else 0,
    )
    book = tb.layer(model, _config(fixed, sc["g"], sc["nodes"], sc["batch"]))
    for layer in range(1, sc["layers"]):  # layer 0 also converts the embedding's output
        _check_layer(plan, layer, book)
    config = _config(fixed, sc["g"], sc["nodes"], sc["batch"])
    if plan.pipeline is not None:
        assert plan.pipeline.p2p_bytes == pytest.approx(tb.pipeline_sends(model, config), rel=1e-9)
        want = tb.tied_exchange(model, config) if cfg.tie_word_embeddings else 0.0
        assert plan.pipeline.tied_sync_bytes == pytest.approx(want, rel=1e-9)
    if not sc["sp"]:
        _check_edges(plan, tb.edges(model, config, cfg.tie_word_embeddings))


def _check_edges(plan: Plan, book: tb.Ledger) -> None:
    """The embedding, head, loss and final norm, per op, kind of traffic and link kind."""
    mine = engine_layer(plan, None)
    for name in ("embed", "embed_pos", "lm_head", "loss", "ln_f"):
        for kind in ("activation", "weight"):
            for level in ("intra", "inter"):
                want = book.total([name], kind, level)
                got = mine.total([f"L.{name}"], kind, level)
                assert got == pytest.approx(want, rel=0.01, abs=1.0), (name, kind, level)


@pytest.mark.parametrize(
    "spec",
    ["tp=8,mbs=1", "tp=8,sp=1,mbs=1", "tp=4,mbs=2", "tp=8,mbs=1,recompute=full",
     "tp=8,sp=1,mbs=1,recompute=full", "tp=1,mbs=1", "tp=8,mbs=1,zero=1", "tp=8,mbs=1,zero=2",
     "tp=8,mbs=1,zero=3", "tp=8,mbs=1,zero=3,recompute=full"],
)
def test_memory_per_device_is_the_textbook(spec):
    """Activations per layer (Korthikanti et al. 2022), model state per ZeRO stage
    (Rajbhandari et al. 2020) and the transient buffers of one layer, per GPU."""
    graph = _gpt3(batch_size=16)
    fixed = parse_fixed(spec)
    plan = plan_fixed(graph, preset("dgx-a100:2"), fixed, memory_limit_bytes=1e18)
    cfg = _config(fixed, 8, 2, 16)
    layer = [op for op in plan.ops if op.layer == 1]
    act = sum(op.memory.activations for op in layer)
    kept = tb.activation_memory_per_layer(GPT3, replace(cfg, recompute=False))
    if cfg.sp:
        # the engine keeps the all-gathered input of Q/K/V and of the MLP's first matmul
        # (Megatron-LM keeps its sequence shard and all-gathers it again in backward)
        s, b, h, t = GPT3.seq, cfg.mbs, GPT3.h, cfg.tp
        kept += 2 * (2 * s * b * h) * (1 - 1 / t)
    want = tb.activation_memory_per_layer(GPT3, cfg) if cfg.recompute else kept
    assert act == pytest.approx(want, rel=1e-6)
    whole = plan_fixed(graph, preset("dgx-a100:2"), replace(fixed, zero=0, recompute="none"))
    held = sum(op.memory.parameters for op in whole.ops if op.layer == 1) / 2  # parameters
    state = sum(op.memory.total - op.memory.activations for op in layer)
    assert state == pytest.approx(tb.model_state_per_gpu(held, cfg), rel=1e-3)
    n = cfg.dp_intra * cfg.hosts
    gathered = 2 * (2 * held) * (1 - 1 / n) if cfg.zero == 3 else 0.0  # params + grads
    remat = kept - act if cfg.recompute else 0.0  # the layer re-created in backward
    # one unit at a time: a layer, or the (vocabulary-parallel) embedding table
    table = tb.padded_vocab(GPT3, cfg.tp) * GPT3.h * 2 / cfg.tp
    gathered = max(gathered, 2 * table * (1 - 1 / n) if cfg.zero == 3 else 0.0)
    assert plan.memory.transient == pytest.approx(gathered + remat, rel=1e-3)


def test_the_hand_worked_table_in_docs_equals_the_engine():
    """docs/TRAFFIC.md's rows add up, per GPU, to the engine's figure for every case."""
    from benchmarks import traffic_table

    for case in traffic_table.cases():
        engine, _ = traffic_table._engine_per_gpu(case.spec)
        hand = sum(r.per_gpu_bytes for r in case.rows)
        assert engine == pytest.approx(hand, rel=1e-4), case.spec
