"""Exports checked by the frameworks' own code, installed from the package registry
(requirements-validation.txt): DeepSpeed's config parsers (``DeepSpeedConfig``,
``DeepSpeedInferenceConfig``) on every DeepSpeed export, megatron-core's ``TransformerConfig``
(its ``__post_init__`` checks the parallel sizes, sequence parallelism, recomputation and uneven
pipeline stages) built from every Megatron-LM export. Skipped without the package."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

from taps_core.export import export_plan
from tests.test_export import data_parallel_rule, make_plan, megatron_rule

needs_ds = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                              reason="needs deepspeed (requirements-validation.txt)")
needs_mcore = pytest.mark.skipif(importlib.util.find_spec("megatron") is None,
                                 reason="needs megatron-core (requirements-validation.txt)")


class _DataParallel:
    """What DeepSpeedConfig asks a model-parallel unit without a process group."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_model_parallel_world_size(self) -> int:
        return 1


TRAINING = [  # (model, nodes, GPUs per node, rule, extra) -> DeepSpeed training configs
    ("gpt2", 2, 8, data_parallel_rule(2, 8), {"zero": z}) for z in (0, 1, 2, 3)
] + [("gpt2", 1, 8, data_parallel_rule(1, 8), {"zero": 1, "micro": 4})]


@pytest.fixture
def rank_zero(monkeypatch):
    """DeepSpeedConfig asks the process group for its rank first (and without one falls back to
    a world of 1, ignoring the model-parallel unit): answer rank 0 without starting a group."""
    import deepspeed.runtime.config as ds_config

    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)


@needs_ds
@pytest.mark.parametrize("model,nodes,gpus,rule,extra", TRAINING)
def test_deepspeed_accepts_every_training_export(rank_zero, model, nodes, gpus, rule, extra):
    from deepspeed.runtime.config import DeepSpeedConfig

    out = export_plan(make_plan(model, nodes, gpus, rule, **extra), "deepspeed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = DeepSpeedConfig(dict(out.data), mpu=_DataParallel(nodes * gpus))
    assert parsed.train_batch_size == out.data["train_batch_size"]
    assert parsed.zero_optimization_stage == extra["zero"]
    assert parsed.gradient_accumulation_steps == out.data["gradient_accumulation_steps"]


@needs_ds
@pytest.mark.parametrize("model", ["gpt3-175b", "llama3-8b"])
def test_deepspeed_accepts_every_inference_export(model):
    from deepspeed.inference.config import DeepSpeedInferenceConfig

    out = export_plan(make_plan(model, 1, 8, megatron_rule(8, 1), mode="infer"), "deepspeed")
    cfg = DeepSpeedInferenceConfig(**out.data)
    assert cfg.tensor_parallel.tp_size == 8
    assert cfg.replace_with_kernel_inject is (model == "gpt3-175b")


def _transformer_config(args: list[str]):
    """megatron-core's TransformerConfig from exported Megatron-LM arguments."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    def value(flag: str) -> str | None:
        return args[args.index(flag) + 1] if flag in args else None

    ints = {
        "--num-layers": "num_layers", "--hidden-size": "hidden_size",
        "--num-attention-heads": "num_attention_heads", "--ffn-hidden-size": "ffn_hidden_size",
        "--num-query-groups": "num_query_groups",
        "--tensor-model-parallel-size": "tensor_model_parallel_size",
        "--pipeline-model-parallel-size": "pipeline_model_parallel_size",
        "--recompute-num-layers": "recompute_num_layers",
        "--decoder-first-pipeline-num-layers": "num_layers_in_first_pipeline_stage",
        "--decoder-last-pipeline-num-layers": "num_layers_in_last_pipeline_stage",
    }
    kwargs: dict = {field: int(value(flag)) for flag, field in ints.items() if value(flag)}
    for flag, field in (("--recompute-granularity", "recompute_granularity"),
                        ("--recompute-method", "recompute_method")):
        if value(flag):
            kwargs[field] = value(flag)
    kwargs["sequence_parallel"] = "--sequence-parallel" in args
    kwargs["bf16"] = "--bf16" in args
    if kwargs.get("pipeline_model_parallel_size", 1) > 1:  # Megatron-LM sets it from the dtype
        import torch

        kwargs["pipeline_dtype"] = (torch.bfloat16 if "--bf16" in args else
                                    torch.float16 if "--fp16" in args else torch.float32)
    kwargs["add_bias_linear"] = "--disable-bias-linear" not in args
    kwargs["gated_linear_unit"] = "--swiglu" in args
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return TransformerConfig(**kwargs)


MEGATRON = [  # (model, nodes, GPUs, rule, extra)
    ("gpt3-175b", 2, 8, megatron_rule(8, 2), {}),
    ("gpt3-175b", 2, 8, megatron_rule(8, 2, sp=True), {}),
    ("gpt3-175b", 2, 8, megatron_rule(8, 2), {"recompute": frozenset(range(96))}),
    ("gpt3-175b", 2, 8, megatron_rule(8, 2, sp=True), {"selective": frozenset(range(96))}),
    ("llama3-8b", 1, 8, megatron_rule(8, 1), {}),
    ("gpt2", 2, 8, data_parallel_rule(2, 8), {"zero": 1}),
]


@needs_mcore
@pytest.mark.parametrize("model,nodes,gpus,rule,extra", MEGATRON)
def test_megatron_core_accepts_every_megatron_export(model, nodes, gpus, rule, extra):
    out = export_plan(make_plan(model, nodes, gpus, rule, **extra), "megatron")
    args = out.data["args"]
    cfg = _transformer_config(args)
    assert cfg.tensor_model_parallel_size == out.data["tensor_parallel"]
    assert cfg.sequence_parallel == ("--sequence-parallel" in args)
    if extra.get("recompute"):
        assert cfg.recompute_granularity == "full"
    if extra.get("selective"):
        assert cfg.recompute_granularity == "selective"


@needs_mcore
@pytest.mark.parametrize("model,topo,batch", [("gpt3-175b", "dgx-a100:16", 64),
                                              ("llama3-8b", "dgx-a100:2", 16),
                                              ("gpt2", "dgx-a100:8", 32)])  # uneven stages
def test_space_megatron_plans_export_to_arguments_megatron_core_accepts(model, topo, batch):
    """``plan --space megatron``'s answer (the fastest configuration Megatron-LM accepts,
    searched exhaustively) exports to arguments megatron-core's TransformerConfig takes."""
    from taps_core.cluster.presets import preset
    from taps_core.models import build_graph, load_model_config
    from taps_core.plan.report import plan_to_json
    from taps_core.search.configs import best_configuration

    graph = build_graph(load_model_config(model).with_workload(batch_size=batch))
    plan = best_configuration(graph, preset(topo), space="megatron")
    out = export_plan(plan_to_json(plan), "megatron")
    cfg = _transformer_config(out.data["args"])
    stages = len(plan.pipeline.stages) if plan.pipeline else 1
    assert cfg.pipeline_model_parallel_size == stages
    assert cfg.num_layers == graph.num_layers
    split = list(plan.pipeline.layer_split) if plan.pipeline else []
    if len(set(split)) > 1:  # megatron-core checked the middle stages share the rest evenly
        assert cfg.num_layers_in_first_pipeline_stage == split[0]
        assert cfg.num_layers_in_last_pipeline_stage == split[-1]
