"""Plans exported to Megatron-LM, DeepSpeed and DTensor: hand-worked cases, refusals, bad input.

Plans are built here as plan JSON (the schema of README "Plan JSON") from the engine's op list
of a sample model and a rule per op, so every expected number is worked out by hand from the
rule: e.g. gpt3-175b (batch 32) with heads/FFN/vocabulary 8 ways inside a DGX node and the
batch 2 ways across 2 nodes is Megatron-LM's TP 8 x DP 2 with micro-batch 32 / 2 = 16.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from functools import cache

import pytest

from taps_core.cli.main import main
from taps_core.errors import InvalidInputError
from taps_core.export import EXIT_NOT_EXPRESSIBLE, NotExpressibleError, export_plan, grid
from taps_core.models import build_graph, load_model_config
from taps_core.search.configs import configuration_in
from taps_core.search.fixed_config import parse_fixed

Rule = Callable[[str], tuple[dict[str, int], dict[str, int], bool]]  # name -> inter, intra, partial


@cache
def _ops(model: str) -> tuple[tuple[str, str, int | None], ...]:
    g = build_graph(load_model_config(model))
    return tuple((op.name, op.kind, op.layer) for op in g.ops)


@cache
def _params(model: str) -> int:
    return int(build_graph(load_model_config(model)).num_parameters)


def make_plan(model: str, nodes: int, gpn: int, rule: Rule, *, mode: str = "train",
              zero: int = 0, recompute: frozenset[int] = frozenset(), micro: int = 1,
              pipeline: dict | None = None, stage_of: Callable[[str, int | None], int] | None
              = None, selective: frozenset[int] = frozenset()) -> dict:
    """A plan JSON of ``model`` on ``nodes`` x ``gpn`` GPUs whose ops follow ``rule``
    (``recompute`` / ``selective``: layers recomputed fully / their attention core only)."""
    ops = []
    for name, kind, layer in _ops(model):
        inter, intra, partial = rule(name)
        strategy: dict = {"inter": inter, "intra": intra}
        if partial:
            strategy["partial"] = True
        op = {"name": name, "kind": kind, "layer": layer, "strategy": strategy,
              "sharding": "column", "zero_stage": zero if kind != "elementwise" else 0,
              "recompute": layer in recompute, "compute_time_s": 0.0, "comm_time_s": 0.0,
              "comm_bytes": 0.0, "selective_recompute": layer in selective}
        if stage_of is not None:
            op["stage"] = stage_of(name, layer)
        ops.append(op)
    plan = {
        "label": "hand", "model": {"name": model, "parameters": _params(model)},
        "topology": {"name": f"dgx-a100:{nodes}", "nodes": nodes, "gpus_per_node": gpn},
        "mode": mode, "cost_model": "topology", "totals": {},
        "levers": {"microbatches": micro, "flash_attention": False,
                   "recomputed_layers": len(recompute), "zero_stages": [0, zero]},
        "ops": ops, "links": [], "search": {}, "summary": "",
    }
    if pipeline is not None:
        plan["pipeline"] = pipeline
    return plan


def megatron_rule(tp: int, dp_inter: int, *, sp: bool = False, dp_intra: int = 1) -> Rule:
    """Megatron-LM's layout: heads / FFN / vocabulary ``tp`` ways inside a node, the batch
    ``dp_inter`` ways across nodes (and ``dp_intra`` inside); with ``sp`` the norms and adds
    run on 1/tp of the sequence and the row-parallel ops reduce-scatter into it."""

    def rule(name: str) -> tuple[dict, dict, bool]:
        tail = name.split(".", 1)[1] if name[0] == "L" and name[1].isdigit() else name
        inter = {"b": dp_inter} if dp_inter > 1 else {}
        batch = {"b": dp_intra} if dp_intra > 1 else {}
        if tail in ("embed", "lm_head", "loss"):
            return inter, {**batch, "v": tp}, sp and tail == "embed"
        if tail.startswith("attn."):
            return inter, {**batch, "n": tp}, sp and tail == "attn.o"
        if tail.startswith("mlp."):
            return inter, {**batch, "f": tp}, sp and tail == "mlp.down"
        return inter, {**batch, "s": tp} if sp else batch, False

    return rule


def data_parallel_rule(dp_inter: int, dp_intra: int) -> Rule:
    return lambda name: ({"b": dp_inter}, {"b": dp_intra}, False)


def _arg(args: list[str], flag: str) -> str | None:
    """The value after ``flag`` (or ``""`` for a bare flag present, None when absent)."""
    if flag not in args:
        return None
    i = args.index(flag)
    return args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""


# ---------------------------------------------------------------- Megatron-LM


def test_megatron_style_gpt3_on_two_dgx_nodes_is_tp8_dp2() -> None:
    plan = make_plan("gpt3-175b", 2, 8, megatron_rule(8, 2), zero=1,
                     recompute=frozenset(range(96)))
    out = export_plan(plan, "megatron")
    args = out.data["args"]
    assert out.data["tensor_parallel"] == 8 and out.data["data_parallel"] == 2
    assert _arg(args, "--tensor-model-parallel-size") == "8"
    assert _arg(args, "--pipeline-model-parallel-size") == "1"
    assert _arg(args, "--micro-batch-size") == "16"  # batch 32 / DP 2
    assert _arg(args, "--global-batch-size") == "32"
    assert _arg(args, "--use-distributed-optimizer") == ""
    assert _arg(args, "--sequence-parallel") is None
    assert _arg(args, "--recompute-granularity") == "full"
    assert _arg(args, "--recompute-method") == "uniform"
    assert _arg(args, "--recompute-num-layers") == "1"
    assert [_arg(args, f) for f in ("--num-layers", "--hidden-size", "--num-attention-heads",
                                    "--ffn-hidden-size", "--seq-length")] == [
        "96", "12288", "96", "49152", "2048"]
    assert _arg(args, "--bf16") == "" and out.text == " ".join(args)
    assert any("data-parallel size 2" in n for n in out.notes)


def test_megatron_sequence_parallel_and_accumulation() -> None:
    plan = make_plan("gpt3-175b", 2, 8, megatron_rule(8, 2, sp=True), micro=4)
    args = export_plan(plan, "megatron").data["args"]
    assert _arg(args, "--sequence-parallel") == ""
    assert _arg(args, "--micro-batch-size") == "4"  # 32 / (4 micro-batches x DP 2)
    assert _arg(args, "--global-batch-size") == "32"


def test_megatron_llama_shape_and_partial_recompute() -> None:
    plan = make_plan("llama3-8b", 1, 8, megatron_rule(8, 1), recompute=frozenset({5, 9, 30}))
    out = export_plan(plan, "megatron")
    args = out.data["args"]
    assert _arg(args, "--num-query-groups") == "8" and _arg(args, "--swiglu") == ""
    assert _arg(args, "--untie-embeddings-and-output-weights") == ""
    assert _arg(args, "--recompute-method") == "block"
    assert _arg(args, "--recompute-num-layers") == "3"
    assert any("5, 9, 30" in n for n in out.notes)


def test_megatron_selective_recomputation() -> None:
    """Selective recomputation is Megatron-LM's selective granularity (no method or layer
    count: it applies to every layer); a plan recomputing only some layers' attention core
    says that Megatron recomputes every layer's; mixed with full recomputation it cannot be
    expressed (one granularity for every layer)."""
    every = export_plan(make_plan("gpt2", 1, 4, megatron_rule(4, 1),
                                  selective=frozenset(range(12))), "megatron")
    args = every.data["args"]
    assert _arg(args, "--recompute-granularity") == "selective"
    assert "--recompute-method" not in args and "--recompute-num-layers" not in args
    assert not any("selective granularity" in n for n in every.notes)
    some = export_plan(make_plan("gpt2", 1, 4, megatron_rule(4, 1),
                                 selective=frozenset({2, 3})), "megatron")
    assert _arg(some.data["args"], "--recompute-granularity") == "selective"
    assert any("layers 2-3 only" in n for n in some.notes), some.notes
    with pytest.raises(NotExpressibleError, match="--recompute-granularity is one setting"):
        export_plan(make_plan("gpt2", 1, 4, megatron_rule(4, 1), recompute=frozenset({0}),
                              selective=frozenset({1})), "megatron")
    ds = export_plan(make_plan("gpt2", 1, 8, data_parallel_rule(1, 8),
                               selective=frozenset({0, 1})), "deepspeed", batch=64)
    assert "activation_checkpointing" in ds.data
    assert any("attention core of layers 0-1" in n for n in ds.notes), ds.notes


def test_data_parallel_plan_exports_tp1() -> None:
    plan = make_plan("gpt2", 2, 8, data_parallel_rule(2, 8), zero=2)
    out = export_plan(plan, "megatron")
    assert out.data["tensor_parallel"] == 1 and out.data["data_parallel"] == 16
    assert _arg(out.data["args"], "--micro-batch-size") == "2"  # 32 / 16
    ds = export_plan(plan, "deepspeed").data
    assert ds["train_batch_size"] == 32 and ds["train_micro_batch_size_per_gpu"] == 2
    assert ds["gradient_accumulation_steps"] == 1 and ds["zero_optimization"] == {"stage": 2}
    assert ds["bf16"] == {"enabled": True}
    dt = export_plan(plan, "dtensor").data
    assert dt["mesh"]["shape"] == [16, 1] and dt["tp_plan"] == {}


@pytest.mark.parametrize(
    ("model", "rule", "words"),
    [
        # Megatron's layout but a 2-D split on the up projection: FFN 4 x hidden 2 ways
        ("gpt3-175b",
         lambda n: ({"b": 2}, {"f": 4, "m": 2}, False) if n.endswith("mlp.up")
         else megatron_rule(8, 2)(n), ["2-D", "L0.mlp.up", "FFN 4 ways", "hidden 2 ways"]),
        # data parallel inside the nodes, the up projection's hidden dim split across them
        ("gpt3-175b",
         lambda n: ({"m": 2} if n.endswith("mlp.up") else {}, {"b": 8}, False),
         ["L0.mlp.up", "hidden 2 ways across nodes", "only on FFN"]),
        # the batch split differently by different ops
        ("gpt2", lambda n: ({"b": 2}, {"b": 2, "v": 4} if n == "embed" else {"b": 8}, False),
         ["one data-parallel size", "embed"]),
        # both nodes repeat the same work
        ("gpt3-175b", megatron_rule(8, 1), ["repeat each other's work"]),
        # GPT-2's 12 heads cannot split 8 ways: the attention stays whole
        ("gpt2", lambda n: ({"b": 2}, {} if ".attn." in n else megatron_rule(8, 2)(n)[1],
                            False), ["L0.attn.q", "replicated"]),
    ],
)
def test_megatron_refusals_name_the_op(model: str, rule: Rule, words: list[str]) -> None:
    with pytest.raises(NotExpressibleError) as err:
        export_plan(make_plan(model, 2, 8, rule), "megatron")
    text = str(err.value)
    assert "\n" not in text and all(w in text for w in words), text


def test_megatron_tensor_across_nodes_needs_tp_innermost() -> None:
    rule = megatron_rule(2, 1, dp_intra=8)
    rule2 = lambda n: ({k: v for k, v in rule(n)[1].items() if k != "b"}, {"b": 8}, False)
    plan = make_plan("gpt3-175b", 2, 8, rule2)
    with pytest.raises(NotExpressibleError, match="innermost"):
        export_plan(plan, "megatron")
    ranks = export_plan(plan, "dtensor").data["mesh"]["ranks"]  # DTensor takes any order
    assert ranks[:2] == [[0, 8], [1, 9]] and len(ranks) == 8


# ---------------------------------------------------------------- pipeline stages


def _pipeline(sizes: list[int], gpus: int, micro: int, mbs: int | None = None) -> dict:
    stages, first = [], 0
    for i, n in enumerate(sizes):
        stages.append({"index": i, "layers": [first, first + n - 1], "nodes": [i],
                       "gpus": gpus})
        first += n
    return {"stages": stages, "microbatches": micro, "micro_batch_size": mbs,
            "schedule": "1F1B", "bubble_fraction": (len(sizes) - 1) / (micro + len(sizes) - 1)}


def _stage_of(sizes: list[int]) -> Callable[[str, int | None], int]:
    bounds = [sum(sizes[: i + 1]) for i in range(len(sizes))]

    def stage(name: str, layer: int | None) -> int:
        if layer is None:
            return 0 if name.startswith("embed") else len(sizes) - 1
        return next(i for i, b in enumerate(bounds) if layer < b)

    return stage


def test_pipeline_stages_become_megatron_pp() -> None:
    sizes = [24, 24, 24, 24]
    plan = make_plan("gpt3-175b", 4, 8, megatron_rule(8, 1), micro=8, zero=1,
                     pipeline=_pipeline(sizes, 8, 8, 4), stage_of=_stage_of(sizes))
    out = export_plan(plan, "megatron")
    args = out.data["args"]
    assert _arg(args, "--pipeline-model-parallel-size") == "4"
    assert _arg(args, "--tensor-model-parallel-size") == "8" and out.data["data_parallel"] == 1
    assert _arg(args, "--micro-batch-size") == "4"  # 32 / 8 micro-batches / DP 1
    assert _arg(args, "--decoder-first-pipeline-num-layers") is None

    uneven = [23, 25, 25, 23]
    plan = make_plan("gpt3-175b", 4, 8, megatron_rule(8, 1), micro=8,
                     pipeline=_pipeline(uneven, 8, 8), stage_of=_stage_of(uneven))
    args = export_plan(plan, "megatron").data["args"]
    assert _arg(args, "--decoder-first-pipeline-num-layers") == "23"
    assert _arg(args, "--decoder-last-pipeline-num-layers") == "23"

    sp = make_plan("gpt3-175b", 4, 8, megatron_rule(8, 1, sp=True), micro=8,
                   pipeline=_pipeline(sizes, 8, 8), stage_of=_stage_of(sizes))
    assert _arg(export_plan(sp, "megatron").data["args"], "--sequence-parallel") == ""

    ragged = [20, 30, 26, 20]
    plan = make_plan("gpt3-175b", 4, 8, megatron_rule(8, 1), micro=8,
                     pipeline=_pipeline(ragged, 8, 8), stage_of=_stage_of(ragged))
    with pytest.raises(NotExpressibleError, match="evenly"):
        export_plan(plan, "megatron")


def test_pipeline_in_deepspeed_and_dtensor() -> None:
    sizes = [6, 6]
    plan = make_plan("gpt2", 2, 8, data_parallel_rule(1, 8), micro=4, zero=1,
                     pipeline=_pipeline(sizes, 8, 4), stage_of=_stage_of(sizes))
    ds = export_plan(plan, "deepspeed")
    assert ds.data["gradient_accumulation_steps"] == 4
    assert ds.data["train_micro_batch_size_per_gpu"] == 1  # 32 / (4 x DP 8)
    assert any("PipelineModule" in n for n in ds.notes)
    plan2 = make_plan("gpt2", 2, 8, data_parallel_rule(1, 8), micro=4, zero=2,
                      pipeline=_pipeline(sizes, 8, 4), stage_of=_stage_of(sizes))
    with pytest.raises(NotExpressibleError, match="ZeRO stage 0 or 1"):
        export_plan(plan2, "deepspeed")

    tp = make_plan("gpt2", 2, 4, megatron_rule(4, 1), micro=4,
                   pipeline=_pipeline(sizes, 4, 4), stage_of=_stage_of(sizes))
    dt = export_plan(tp, "dtensor")  # every stage placed on its own mesh, not only stage 0
    assert any("torch.distributed.pipelining" in n for n in dt.notes)
    first, second = dt.data["stages"]
    assert first["stage"] == {"index": 0, "layers": [0, 5], "nodes": 1}
    assert "transformer.h.5.attn.c_attn.weight" in first["params"]
    assert "transformer.h.6.attn.c_attn.weight" in second["params"]
    assert "transformer.h.6.attn.c_attn.weight" not in first["params"]
    assert first["mesh"]["shape"] == [4]  # 1 host x 4 GPUs, heads 4 ways on one dim


def test_dtensor_pipeline_stage_forward_and_its_refusal() -> None:
    """A pipelined Llama export runs each stage with stage_forward (rotary positions and the
    causal mask made on a later stage); a stage layout it cannot run is refused in one line."""
    sizes = [16, 16]
    llama = make_plan("llama3-8b", 2, 8, megatron_rule(8, 1), micro=4,
                      pipeline=_pipeline(sizes, 8, 4), stage_of=_stage_of(sizes))
    out = export_plan(llama, "dtensor")
    assert "def stage_forward(" in out.python and "create_causal_mask" in out.python
    assert out.data["family"] == "llama"
    assert "def stage_forward(" not in export_plan(make_plan("llama3-8b", 1, 8, megatron_rule(
        8, 1, sp=True)), "dtensor").python  # one stage: the model's own forward

    def head_first(name: str, layer: int | None) -> int:
        return 0 if name == "lm_head" else _stage_of(sizes)(name, layer)

    moved = make_plan("llama3-8b", 2, 8, megatron_rule(8, 1), micro=4,
                      pipeline=_pipeline(sizes, 8, 4), stage_of=head_first)
    with pytest.raises(NotExpressibleError, match=r"^op lm_head is on pipeline stage 0, not the"
                       r" last stage") as err:
        export_plan(moved, "dtensor")
    assert "\n" not in str(err.value)


def test_dtensor_pipeline_of_a_tied_model_offers_the_tied_gradient_sum() -> None:
    """GPT-2's tied embedding / LM head weight sits on the first and the last stage: the
    export names it by each stage's name and defines the pair groups and the gradient sum
    (run on 4 ranks by validation/dtensor_ops_run.py); an untied Llama gets none of it."""
    sizes = [6, 6]
    gpt2 = make_plan("gpt2", 2, 4, megatron_rule(4, 1), micro=4,
                     pipeline=_pipeline(sizes, 4, 4), stage_of=_stage_of(sizes))
    out = export_plan(gpt2, "dtensor")
    assert out.data["tied_across_stages"] == [["transformer.wte.weight", "lm_head.weight"]]
    first, last = out.data["stages"]
    assert "transformer.wte.weight" in first["params"] and "lm_head.weight" in last["params"]
    assert "def tied_grad_group(" in out.python and "def sync_tied_grads(" in out.python
    assert any("sync_tied_grads(model, mesh, stage, group)" in n for n in out.notes)
    compile(out.python, "<snippet>", "exec")  # valid Python without importing torch
    assert not any("the whole gradient" in n for n in out.notes)  # vocab-parallel at both ends

    embed = next(op for op in gpt2["ops"] if op["name"] == "embed")
    embed["strategy"] = {"inter": {}, "intra": {"m": 4}}  # the first stage holds it otherwise
    assert any("the first stage holds transformer.wte.weight as ['S(1)'], the last as ['S(0)']: "
               "sync_tied_grads all-reduces the whole gradient" in n
               for n in export_plan(gpt2, "dtensor").notes)

    gpt2["pipeline"]["stages"][1]["gpus"] = 2  # hand-edited: a last stage of 2 GPUs, not 4
    for op in gpt2["ops"]:
        if op["stage"] == 1:
            op["strategy"]["intra"] = {k: 2 for k in op["strategy"]["intra"]}
    with pytest.raises(NotExpressibleError, match=r"^the tied embedding and LM head weight is "
                       r"on a first stage of 4 GPUs and a last stage of 2: "):
        export_plan(gpt2, "dtensor")

    llama = make_plan("llama3-8b", 2, 8, megatron_rule(8, 1), micro=4,
                      pipeline=_pipeline([16, 16], 8, 4), stage_of=_stage_of([16, 16]))
    untied = export_plan(llama, "dtensor")
    assert untied.data["tied_across_stages"] == []
    assert "sync_tied_grads" not in untied.python and "def stage_forward(" in untied.python


# ---------------------------------------------------------------- DeepSpeed


def test_deepspeed_refuses_tensor_splits_and_takes_inference() -> None:
    plan = make_plan("gpt3-175b", 2, 8, megatron_rule(8, 2))
    with pytest.raises(NotExpressibleError, match="Megatron-DeepSpeed"):
        export_plan(plan, "deepspeed")
    infer = make_plan("gpt3-175b", 2, 8, megatron_rule(8, 2), mode="infer")
    ds = export_plan(infer, "deepspeed")
    assert ds.data["tensor_parallel"] == {"tp_size": 8}
    # DeepSpeed's AutoTP refuses GPT-2-family models: kernel injection (their container policy)
    assert ds.data["replace_with_kernel_inject"] is True and any("AutoTP" in n for n in ds.notes)
    llama = make_plan("llama3-8b", 1, 8, megatron_rule(8, 1), mode="infer")
    assert export_plan(llama, "deepspeed").data["replace_with_kernel_inject"] is False
    margs = export_plan(infer, "megatron").data["args"]
    assert _arg(margs, "--global-batch-size") is None and _arg(margs, "--micro-batch-size") == "16"
    zero3 = make_plan("gpt2", 1, 8, data_parallel_rule(1, 8), mode="infer", zero=3)
    assert export_plan(zero3, "deepspeed").data["zero_optimization"] == {"stage": 3}
    with pytest.raises(NotExpressibleError, match="ZeRO stage 3 in inference"):
        export_plan(zero3, "megatron")


def test_deepspeed_recompute_and_fp16() -> None:
    plan = make_plan("gpt2", 1, 8, data_parallel_rule(1, 8), recompute=frozenset({0, 1}))
    out = export_plan(plan, "deepspeed", dtype="float16", batch=64)
    assert "activation_checkpointing" in out.data and out.data["fp16"]["enabled"] is True
    assert out.data["train_batch_size"] == 64 and out.data["train_micro_batch_size_per_gpu"] == 8


# ---------------------------------------------------------------- DTensor


def test_dtensor_megatron_sp_plan_for_gpt2() -> None:
    out = export_plan(make_plan("gpt2", 2, 4, megatron_rule(4, 2, sp=True)), "dtensor")
    d = out.data
    assert d["mesh"] == {"dim_names": ["dp", "tp"], "shape": [2, 4],
                         "ranks": [[0, 1, 2, 3], [4, 5, 6, 7]]}
    p = d["tp_plan"]
    assert p["transformer.wte"] == {"style": "RowwiseParallel", "input_layouts": "Replicate()",
                                    "output_layouts": "Shard(1)"}
    assert p["transformer.h.0.ln_1"] == {"style": "SequenceParallel"}
    assert p["transformer.h.0.attn"]["style"] == "PrepareModuleInput"
    assert p["transformer.h.3.attn.c_attn"] == {"style": "ColwiseParallel"}
    assert p["transformer.h.3.attn.c_proj"] == {"style": "RowwiseParallel",
                                                "output_layouts": "Shard(1)"}
    assert p["transformer.h.11.mlp.c_fc"] == {"style": "ColwiseParallel"}
    assert p["transformer.ln_f"] == {"style": "SequenceParallel"}
    assert p["lm_head"] == {"style": "ColwiseParallel", "input_layouts": "Shard(1)",
                            "output_layouts": "Shard(-1)", "use_local_output": False}
    assert d["loss_parallel"] is True
    assert d["tied"] == [["lm_head.weight", "transformer.wte.weight"]]
    compile(out.python, "<snippet>", "exec")  # valid Python without importing torch
    assert "for i in range(0, 12):" in out.python


def test_dtensor_llama_names() -> None:
    p = export_plan(make_plan("llama3-8b", 1, 8, megatron_rule(8, 1)), "dtensor").data["tp_plan"]
    for name in ("q_proj", "k_proj", "v_proj"):
        assert p[f"model.layers.7.self_attn.{name}"] == {"style": "ColwiseParallel"}
    assert p["model.layers.7.self_attn.o_proj"]["style"] == "RowwiseParallel"
    assert p["model.layers.0.mlp.gate_proj"] == p["model.layers.0.mlp.up_proj"]
    assert p["model.layers.0.mlp.down_proj"]["style"] == "RowwiseParallel"
    assert p["model.embed_tokens"]["style"] == "RowwiseParallel"


def test_dtensor_llama_sequence_parallel_is_placed_per_op() -> None:
    """HF Llama derives rotary positions and its mask from the sequence it is handed: the
    SequenceParallel style breaks it, so sequence-split norms are placed per op instead."""
    out = export_plan(make_plan("llama3-8b", 1, 8, megatron_rule(8, 1, sp=True)), "dtensor")
    assert out.data["style"] == "per-op placements"
    assert any("rotary positions and the causal mask" in n for n in out.notes)
    st = out.data["stages"][0]
    assert st["mesh"]["shape"] == [8]  # heads 8 ways on one mesh dim: they view into heads
    assert st["inputs"]["model.layers.0.input_layernorm"] == ["S(1)"]
    assert st["params"]["model.layers.0.self_attn.q_proj.weight"] == ["S(0)"]


def test_dtensor_split_tie_in_training_is_placed_per_op() -> None:
    """parallelize_module cannot tie a vocab-split LM head to a whole embedding; the per-op
    export keeps one parameter (the embedding's placement) and says why styles did not do."""

    def rule(n: str) -> tuple[dict, dict, bool]:
        return ({"b": 2}, {} if n == "embed" else megatron_rule(4, 2)(n)[1], False)

    out = export_plan(make_plan("gpt2", 2, 4, rule), "dtensor")
    assert out.data["style"] == "per-op placements"
    assert any("ties their weight" in n for n in out.notes)
    assert "lm_head.weight" not in out.data["stages"][0]["params"]
    out = export_plan(make_plan("gpt2", 2, 4, rule, mode="infer"), "dtensor")
    assert out.data["tied"] == [] and any("two parameters" in n for n in out.notes)


def test_dtensor_per_op_placements_follow_each_op() -> None:
    """2 hosts x 8 GPUs: mesh inter0 x intra0..2 (2 each); an op's split letters take mesh
    dims per level in the strategy's order, and each tensor shards the dim its letter heads."""
    from taps_core.export.dtensor_ops import mesh_dims, placements, prime_factors

    assert prime_factors(12) == [2, 2, 3] and prime_factors(1) == []
    assert [s for _, s in mesh_dims(6, 4)] == [2, 3, 2, 2]  # no ops: prime factors

    def rule(n: str) -> tuple[dict, dict, bool]:
        if n == "embed":
            return {"b": 2}, {"b": 2, "v": 4}, True
        if ".attn." in n:
            return {"b": 2}, {"b": 2, "d": 4}, n.endswith("attn.o")
        return {"b": 2}, {"b": 8}, False

    out = export_plan(make_plan("gpt2", 2, 8, rule), "dtensor")
    st = out.data["stages"][0]
    # the attention's split (b 2 x d 4) gives the GPU level's dims; every other op fits them
    assert st["mesh"] == {"dim_names": ["inter0", "intra0", "intra1"], "shape": [2, 2, 4]}
    assert st["params"]["transformer.wte.weight"] == ["R", "R", "S(0)"]
    assert st["input_ids"] == ["S(0)", "S(0)", "R"]
    assert st["inputs"]["transformer.h.0.mlp.c_fc"] == ["S(0)", "S(0)", "S(0)"]
    # the head dim is inside the fused features: the projection stays replicated there
    assert st["params"]["transformer.h.0.attn.c_attn.weight"] == ["R"] * 3
    assert any("c_attn.weight: d left replicated on some mesh dims" in n for n in out.notes)
    assert placements(("b", "s", "nd"), {"n": [1], "b": [0]}, 2) == (["S(0)", "S(2)"], [])
    assert placements(("m", "nd"), {"d": [1]}, 2) == (["R", "R"], ["d"])


def test_every_taps_plan_exports_to_dtensor() -> None:
    """TAPS's own plans (flat and pipelined, training and inference) export; none is refused."""
    from taps_core.cluster.presets import preset
    from taps_core.models import build_graph, load_model_config
    from taps_core.plan.report import plan_to_json
    from taps_core.search.planner import search

    for name, topo, mode, batch, pipeline in (
        ("gpt2", "dgx-a100:2", "train", 32, None), ("llama3-8b", "pcie:2", "infer", 8, None),
        ("gpt2", "ethernet:4", "train", 64, True),
    ):
        cfg = load_model_config(name).with_workload(batch_size=batch, seq_length=256)
        plan = search(build_graph(cfg), preset(topo), mode=mode, pipeline=pipeline)
        out = export_plan(plan_to_json(plan), "dtensor")
        stages = 1 if plan.pipeline is None else len(plan.pipeline.stages)
        assert len(out.data.get("stages", [None])) == stages, (name, topo, mode)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_dtensor_snippet_builds_the_json_plan() -> None:
    """Executing the snippet's tp_plan() gives the JSON's styles with the JSON's layouts."""
    from torch.distributed.tensor import Replicate, Shard

    out = export_plan(make_plan("gpt2", 2, 4, megatron_rule(4, 2, sp=True)), "dtensor")
    ns: dict = {}
    exec(compile(out.python, "<snippet>", "exec"), ns)
    plan = ns["tp_plan"]()
    assert set(plan) == set(out.data["tp_plan"])
    head = plan["lm_head"]
    assert type(head).__name__ == "ColwiseParallel" and head.use_local_output is False
    assert head.input_layouts == (Shard(1),) and head.output_layouts == (Shard(-1),)
    assert plan["transformer.wte"].input_layouts == (Replicate(),)


def test_real_engine_plans_of_the_small_gpt2_export() -> None:
    """The engine's Megatron-style and data-parallel plans of the DTensor check's model."""
    from validation.dtensor_run import cases, export_snippet

    got = {c.label: export_snippet(c)[1] for c in cases()}
    assert got["megatron"]["mesh"]["shape"] == [2, 2]
    assert got["data_parallel"]["mesh"]["shape"] == [4, 1]
    assert got["megatron-sp"]["loss_parallel"] is True
    styles = {s["style"] for s in got["mixed"]["tp_plan"].values()}
    assert {"PrepareModuleInputOutput", "SequenceParallel", "PrepareModuleOutput"} <= styles


# ---------------------------------------------------------------- bad input and the CLI


@pytest.mark.parametrize(
    ("data", "kwargs", "field"),
    [
        ([1, 2], {}, "plan JSON"),
        ({"label": "x"}, {}, "plan.ops"),
        ("GOOD", {"batch": 12}, "batch"),  # 12 does not split over 16 data-parallel GPUs
        ("GOOD", {"model": "llama3-8b"}, "model.parameters"),
        ({"model": {"name": "no-such-model", "parameters": 5}, "topology": {"nodes": 1,
          "gpus_per_node": 1}, "mode": "train", "ops": [{"name": "x", "strategy": {}}]},
         {}, "model.name"),
        ("GOOD", {"fmt": "onnx"}, "--format"),
        ("HEADS", {}, "ops[3].strategy"),  # GPT-2's 12 heads split 8 ways
        ({"plans": {"taps": {"fits": False, "reason": "memory"}}}, {}, "plans.taps"),
    ],
)
def test_bad_input_names_the_field(data, kwargs: dict, field: str) -> None:
    if data == "GOOD":
        data = make_plan("gpt2", 2, 8, data_parallel_rule(2, 8))
    elif data == "HEADS":
        data = make_plan("gpt2", 2, 8, megatron_rule(8, 2))
    fmt = kwargs.pop("fmt", "megatron")
    with pytest.raises(InvalidInputError) as err:
        export_plan(data, fmt, **kwargs)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


def test_bad_op_fields() -> None:
    plan = make_plan("gpt2", 2, 8, data_parallel_rule(2, 8))
    plan["ops"][3]["strategy"]["intra"] = {"b": "8"}
    with pytest.raises(InvalidInputError, match=r"plan\.ops\[3\]\.strategy\.intra\.b"):
        export_plan(plan, "deepspeed")
    plan = make_plan("gpt2", 2, 8, data_parallel_rule(2, 8))
    plan["pipeline"] = {"stages": [], "microbatches": 2}
    with pytest.raises(InvalidInputError, match=r"pipeline\.stages"):
        export_plan(plan, "deepspeed")


def test_compare_json_picks_a_plan() -> None:
    plans = {"plans": {"taps": make_plan("gpt2", 2, 8, megatron_rule(8, 2)),
                       "data_parallel": make_plan("gpt2", 2, 8, data_parallel_rule(2, 8))}}
    assert export_plan(plans, "deepspeed", label="data_parallel").data["zero_optimization"]
    with pytest.raises(InvalidInputError, match="--plan"):
        export_plan(plans, "deepspeed", label="volume")


def test_cli_exit_codes(tmp_path, capsys) -> None:
    good = tmp_path / "dp.json"
    good.write_text(json.dumps(make_plan("gpt2", 2, 8, data_parallel_rule(2, 8))))
    out = tmp_path / "ds.json"
    assert main(["export", str(good), "--format", "deepspeed", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["train_micro_batch_size_per_gpu"] == 2
    snippet = tmp_path / "plan.py"
    assert main(["export", str(good), "--format", "dtensor", "--out", str(snippet)]) == 0
    compile(snippet.read_text(), str(snippet), "exec")
    capsys.readouterr()

    twod = tmp_path / "2d.json"
    mega = megatron_rule(4, 2)
    rule = lambda n: ({"b": 2}, {"f": 2, "m": 2}, False) if n.endswith("mlp.up") else mega(n)
    twod.write_text(json.dumps(make_plan("gpt2", 2, 4, rule)))
    assert main(["export", str(twod), "--format", "megatron"]) == EXIT_NOT_EXPRESSIBLE
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("not expressible in Megatron-LM: op L0.mlp.up")

    for argv in (["export", str(tmp_path / "missing.json"), "--format", "dtensor"],
                 ["export", str(good), "--format", "tensorrt"],
                 ["export", str(good), "--format", "dtensor", "--out", str(tmp_path / "x/y")]):
        assert main(argv) == 2
        _, err = capsys.readouterr()
        assert err.count("\n") == 1 and err.startswith("error: ")


def test_real_cli_plan_round_trip(tmp_path, capsys) -> None:
    """`plan --json` output goes through export: either arguments or one refusal line."""
    target = tmp_path / "plan.json"
    assert main(["plan", "gpt2", "--topology", "dgx-a100:1", "--json", str(target)]) == 0
    capsys.readouterr()
    for fmt in ("megatron", "deepspeed", "dtensor"):
        code = main(["export", str(target), "--format", fmt])
        out, err = capsys.readouterr()
        assert code in (0, EXIT_NOT_EXPRESSIBLE), (fmt, err)
        if code:
            assert err.count("\n") == 1 and not out


def test_grid_ranks_are_node_major_tp_innermost() -> None:
    from taps_core.export import OpSplit

    op = OpSplit("L0.mlp.up", "matmul", 0, {"b": 2}, {"b": 2, "f": 4}, False, 0, False)
    g = grid([op], 2, 8, "x")
    assert (g.dp, g.tp) == (4, 4)
    assert g.ranks() == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]


def test_engine_pipelined_plan_exports_when_the_json_has_stages(tmp_path) -> None:
    """The engine's Megatron-style plan of the small GPT-2 on the emulated levels is pipelined
    (a stage per node, TP 2 inside): PP 2 x TP 2 once the plan JSON carries ``pipeline``."""
    from taps_core.models import build_graph, config_from_dict
    from taps_core.plan.report import plan_to_json
    from taps_core.search.baselines import compare
    from validation.calibrate import build_topology
    from validation.dtensor_config import TinyGPTConfig
    from validation.dtensor_run import LEVELS

    cfg = TinyGPTConfig().engine_config()
    graph = build_graph(config_from_dict(cfg, name="tiny"))
    data = plan_to_json(compare(graph, build_topology(2, 2, LEVELS))["megatron"])
    if not data.get("pipeline"):
        pytest.skip("no pipeline in this plan JSON (the engine did not pipeline, or the JSON "
                    "does not carry stages yet)")
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(cfg))
    stages = len(data["pipeline"]["stages"])
    out = export_plan(data, "megatron", model=str(path))
    assert out.data["pipeline_parallel"] == stages
    assert out.data["tensor_parallel"] * out.data["data_parallel"] * stages == 4
    dt = export_plan(data, "dtensor", model=str(path))
    assert len(dt.data["stages"]) == stages


def test_fastest_megatron_configuration_exports_to_megatron(tmp_path, capsys):
    """The fastest Megatron-LM configuration (``--space megatron``, the shape TAPS's own plan
    refines per op here) exports as that configuration's arguments (TP, PP, micro-batch, SP,
    distributed optimizer), exit 0."""
    target = tmp_path / "plan.json"
    args = ["plan", "gpt2", "--topology", "dgx-a100:4", "--batch", "64", "--json", str(target)]
    assert main(args) == 0
    taps = json.loads(target.read_text())["search"]["note"]
    assert main([*args, "--space", "megatron"]) == 0
    capsys.readouterr()
    note = json.loads(target.read_text())["search"]["note"]
    # the fastest on 4 DGX hosts: 4 stages, the first and last holding fewer layers
    config = parse_fixed(configuration_in(note))
    assert (config.tp, config.pp, config.mbs, config.sp, config.zero) == (2, 4, 1, True, 1)
    assert config.first is not None and config.last is not None and config.text() in taps
    assert main(["export", str(target), "--format", "megatron"]) == 0
    out, _ = capsys.readouterr()
    for flag in ("--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 4",
                 "--micro-batch-size 1", "--global-batch-size 64", "--sequence-parallel",
                 "--use-distributed-optimizer",
                 f"--decoder-first-pipeline-num-layers {config.first}",
                 f"--decoder-last-pipeline-num-layers {config.last}"):
        assert flag in out, (flag, out)


def test_megatron_zero3_passes_validate_args_or_is_refused_with_its_reason() -> None:
    """ZeRO-3 as --use-torch-fsdp2 with gradient-accumulation fusion off (validate_args refuses
    the two together); a tied model or tensor parallelism beside it is refused with the reason
    Megatron-LM's validate_args gives."""
    out = export_plan(make_plan("llama3-8b", 1, 8, data_parallel_rule(1, 8), zero=3), "megatron")
    args = out.data["args"] if isinstance(out.data, dict) and "args" in out.data else out.text
    assert "--use-torch-fsdp2" in args and "--no-gradient-accumulation-fusion" in args
    assert any("CUDA_DEVICE_MAX_CONNECTIONS unset" in n for n in out.notes)
    with pytest.raises(NotExpressibleError, match="untie-embeddings-and-output-weights"):
        export_plan(make_plan("gpt2", 1, 8, data_parallel_rule(1, 8), zero=3), "megatron")
    rule = megatron_rule(4, 1, dp_intra=2)
    with pytest.raises(NotExpressibleError, match="CUDA_DEVICE_MAX_CONNECTIONS"):
        export_plan(make_plan("llama3-8b", 1, 8, rule, zero=3), "megatron")
    tp = export_plan(make_plan("llama3-8b", 1, 8, rule), "megatron")
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=1" in n for n in tp.notes)
