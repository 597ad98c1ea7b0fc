"""A DeepSpeed config for a plan (training or inference), or why it cannot run."""

from __future__ import annotations

import json
from typing import Any

from taps_core.export.common import FRAMEWORK, Export, NotExpressibleError
from taps_core.export.grid import TENSOR_ROLES, check_family, role, sequence_parallel, uniform_grids
from taps_core.export.megatron import _ranges
from taps_core.export.plan_json import PlanView, Workload, per_replica_micro, workload_note
from taps_core.models.config import DTYPE_BYTES, ModelConfig


def to_deepspeed(view: PlanView, wl: Workload) -> Export:
    """A DeepSpeed config for the plan, or NotExpressibleError with the first reason."""
    fw = FRAMEWORK["deepspeed"]
    tensor_op = next((o for o in view.ops if o.model_letters()), None)
    c = wl.config
    notes = [workload_note(wl)]
    if view.mode == "infer":
        return _deepspeed_inference(view, wl, notes)
    if tensor_op is not None:
        raise NotExpressibleError(
            f"op {tensor_op.name} splits {tensor_op.words(tensor_op.model_letters()[0])}: "
            f"tensor splits need Megatron-DeepSpeed ({fw}'s config has no tensor parallelism; "
            "--format megatron writes the arguments)"
        )
    _, g = uniform_grids(view, fw)
    z = view.zero_stage
    if view.pipeline is not None:
        if z >= 2:
            raise NotExpressibleError(
                f"ZeRO-{z} with pipeline stages: {fw}'s pipeline engine takes "
                "ZeRO stage 0 or 1 only"
            )
        if len({st.layers for st in view.pipeline.stages}) > 1:
            raise NotExpressibleError(
                f"pipeline stages hold {[st.layers for st in view.pipeline.stages]} layers: "
                f"{fw}'s PipelineModule partitions layers evenly (partition_method)"
            )
        notes.append(
            f"pipeline: build the model as deepspeed.pipe.PipelineModule(layers, "
            f"num_stages={len(view.pipeline.stages)}, partition_method='type:<block "
            "class name>') ; gradient_accumulation_steps is its micro-batch count"
        )
    k, micro = per_replica_micro(view, wl, g.dp)
    cfg: dict[str, Any] = {
        "train_batch_size": c.batch_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": k,
        "zero_optimization": {"stage": z},
    }
    cfg.update(_deepspeed_dtype(c))
    if view.recomputed_layers or view.selective_layers:
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        }
        notes.append(
            f"recompute layers {_ranges(view.recomputed_layers)}: wrap those blocks' "
            "forward in deepspeed.checkpointing.checkpoint (the config section only "
            "configures it)"
        )
    if view.selective_layers:
        notes.append(
            f"recompute the attention core of layers {_ranges(view.selective_layers)} "
            "(selective recomputation, which DeepSpeed's config has no setting for): wrap "
            "softmax(QK^T)V of those blocks in deepspeed.checkpointing.checkpoint"
        )
    notes.append(
        f"data-parallel size {g.dp}: train_batch_size = micro x accumulation x {g.dp} GPUs"
    )
    return Export("deepspeed", json.dumps(cfg, indent=2), cfg, notes)


def _deepspeed_dtype(c: ModelConfig) -> dict[str, Any]:
    if DTYPE_BYTES[c.dtype] == 4:
        return {}
    if "b" in c.dtype:
        return {"bf16": {"enabled": True}}
    return {"fp16": {"enabled": True, "loss_scale": 0}}


def _deepspeed_inference(view: PlanView, wl: Workload, notes: list[str]) -> Export:
    """``deepspeed.init_inference`` kwargs (AutoTP) or a ZeRO-Inference config."""
    fw = "DeepSpeed-Inference"
    if view.pipeline is not None:
        raise NotExpressibleError(f"pipeline stages: {fw} has no pipeline parallelism")
    _, g = uniform_grids(view, fw)
    c = wl.config
    dtype = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16"}.get(
        c.dtype, "fp32"
    )
    if view.zero_stage:
        if g.tp > 1:
            raise NotExpressibleError(
                f"tensor splits with ZeRO-{view.zero_stage} in inference: "
                f"{fw}'s ZeRO-Inference shards weights without tensor splits"
            )
        _, micro = per_replica_micro(view, wl, g.dp)
        cfg: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": micro,
            "zero_optimization": {"stage": 3},
            **_deepspeed_dtype(c),
        }
        notes.append(
            "ZeRO-Inference: deepspeed.initialize(model=model, config=this)[0].module "
            "then eval(); weights are gathered before use as planned"
        )
        return Export("deepspeed", json.dumps(cfg, indent=2), cfg, notes)
    if g.tp > 1:
        check_family(wl, fw)
        if sequence_parallel(view, [g], fw):
            raise NotExpressibleError(
                f"sequence-split norms: {fw}'s automatic tensor parallelism "
                "keeps activations whole between layers"
            )
        for op in view.ops:
            if role(op.name) in TENSOR_ROLES - {"embed", "head"} and g.split[op.name] is None:
                raise NotExpressibleError(
                    f"op {op.name} is replicated over the {g.tp} GPUs of a "
                    f"tensor-parallel group: {fw}'s AutoTP splits every layer"
                )
    # DeepSpeed refuses AutoTP for GPT-2-family models ("AutoTP not supported for model.
    # Please use kernel injection since container policy for model exists"): their tensor
    # parallelism comes with its fused kernels
    inject = g.tp > 1 and wl.family in ("gpt2", "gpt3")
    cfg = {
        "tensor_parallel": {"tp_size": g.tp},
        "dtype": dtype,
        "replace_with_kernel_inject": inject,
    }
    notes.append(
        f"deepspeed.init_inference(model, config=this) on {g.tp * g.dp} GPUs: "
        f"{g.dp} replicas of {g.tp}-way "
        + ("tensor parallelism with DeepSpeed's GPT-2 kernel injection (its container policy; "
           "AutoTP refuses GPT-2 models; the fused kernels need CUDA)" if inject
           else "automatic tensor parallelism")
    )
    return Export("deepspeed", json.dumps(cfg, indent=2), cfg, notes)


# ---- PyTorch DTensor -----------------------------------------------------------------------------

_R, _S, _LAST = "Replicate()", "Shard(1)", "Shard(-1)"  # layouts of a (b, s, features) tensor


