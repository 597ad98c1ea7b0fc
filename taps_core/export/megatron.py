"""Megatron-LM command-line arguments for a plan, or the first reason it cannot run."""

from __future__ import annotations

from taps_core.errors import InvalidInputError
from taps_core.export.common import FRAMEWORK, Export, NotExpressibleError
from taps_core.export.grid import (
    EDGE_ROLES,
    TENSOR_ROLES,
    check_family,
    role,
    sequence_parallel,
    uniform_grids,
)
from taps_core.export.plan_json import (
    PlanView,
    Workload,
    per_replica_micro,
    recompute_per_stage,
    workload_note,
)
from taps_core.models.config import DTYPE_BYTES, ModelConfig


def to_megatron(view: PlanView, wl: Workload) -> Export:
    """Megatron-LM arguments for the plan, or NotExpressibleError with the first reason."""
    fw = FRAMEWORK["megatron"]
    check_family(wl, fw)
    grids, g = uniform_grids(view, fw)
    if g.tp_inter > 1 and g.dp_intra > 1:
        raise NotExpressibleError(
            f"the plan splits tensors across nodes ({g.tp_inter} ways) and the batch inside them "
            f"({g.dp_intra} ways): {fw} places tensor-parallel ranks innermost, inside a node"
        )
    whole = [
        o.name
        for gg in grids
        for o in view.ops
        if g.tp > 1 and role(o.name) in TENSOR_ROLES and gg.split.get(o.name, "") is None
    ]
    layer_op = next((n for n in whole if role(n) not in EDGE_ROLES), None)
    if layer_op is not None:
        raise NotExpressibleError(
            f"op {layer_op} is replicated over the {g.tp} GPUs of a tensor-parallel group: "
            f"{fw} splits every layer's heads and FFN over the group"
        )
    sp = sequence_parallel(view, grids, fw)
    pp = len(view.pipeline.stages) if view.pipeline else 1
    c = wl.config
    notes = [
        workload_note(wl),
        f"data-parallel size {g.dp} (implied: {g.dp * g.tp * pp} GPUs / (TP {g.tp} x PP {pp}))",
    ]
    if whole:
        notes.append(
            f"the plan keeps {' and '.join(whole)} whole on every GPU; {fw} always splits the "
            "embedding and LM head over the vocabulary (a little less memory, one more "
            "all-reduce)"
        )
    args: list[str] = [
        "--tensor-model-parallel-size",
        str(g.tp),
        "--pipeline-model-parallel-size",
        str(pp),
    ]
    if sp:
        args.append("--sequence-parallel")
    if g.tp > 1:
        notes.append("export CUDA_DEVICE_MAX_CONNECTIONS=1 before launching: validate_args "
                     "requires it with tensor parallelism")
    args += _megatron_pipeline(view, fw)
    k, micro = per_replica_micro(view, wl, g.dp)
    args += ["--micro-batch-size", str(micro)]
    if view.mode == "train":
        args += ["--global-batch-size", str(c.batch_size)]
        args += _megatron_levers(view, fw, notes, g.dp, g.tp, bool(c.tie_word_embeddings))
        if k > 1 and view.pipeline is None:
            notes.append(
                f"{k} micro-batches per step: Megatron accumulates global / (micro x dp) "
                f"= {k} of them"
            )
    elif view.zero_stage:
        raise NotExpressibleError(
            f"ZeRO stage {view.zero_stage} in inference (weights sharded over "
            f"data-parallel ranks, gathered before use): {fw} has no such mode"
        )
    else:
        notes.append(
            "inference plan: use these with Megatron-LM's inference tools "
            "(e.g. tools/run_text_generation_server.py)"
        )
    args += _megatron_model(c, view)
    return Export(
        "megatron",
        " ".join(args),
        {
            "args": args,
            "tensor_parallel": g.tp,
            "pipeline_parallel": pp,
            "data_parallel": g.dp,
            "sequence_parallel": sp,
        },
        notes,
    )


def _megatron_pipeline(view: PlanView, fw: str) -> list[str]:
    """Uneven first/last stage arguments; refuse stage layouts Megatron cannot take."""
    if view.pipeline is None:
        return []
    p = view.pipeline
    if p.schedule.upper() != "1F1B":
        raise NotExpressibleError(
            f"pipeline schedule {p.schedule}: this export writes {fw}'s default 1F1B schedule only"
        )
    expect = 0
    for st in p.stages:
        if st.first is None or st.last is None:
            raise NotExpressibleError(
                f"pipeline stage {st.index} holds no transformer layer: every {fw} stage does"
            )
        if st.first != expect:
            raise InvalidInputError(
                f"pipeline.stages[{st.index}].layers",
                [st.first, st.last],
                f"layers starting at {expect} (stages in layer order)",
            )
        expect = st.last + 1
    embed, head = view.op("embed"), view.op("lm_head")
    last = len(p.stages) - 1
    if (embed and embed.stage != 0) or (head and head.stage != last):
        raise NotExpressibleError(
            f"the embedding or LM head is not on the first / last stage: {fw} puts them there"
        )
    sizes = [st.layers for st in p.stages]
    if len(set(sizes)) == 1 or len(sizes) == 1:
        return []
    middle = sizes[1:-1]
    if len(set(middle)) > 1:
        raise NotExpressibleError(
            f"pipeline stages hold {sizes} layers: {fw} splits layers evenly "
            "apart from the first and last stage"
        )
    args = []
    if not middle or sizes[0] != middle[0]:
        args += ["--decoder-first-pipeline-num-layers", str(sizes[0])]
    if not middle or sizes[-1] != middle[0]:
        args += ["--decoder-last-pipeline-num-layers", str(sizes[-1])]
    return args


def _megatron_levers(
    view: PlanView, fw: str, notes: list[str], dp: int, tp: int, tied: bool
) -> list[str]:
    """ZeRO stage and recomputation as Megatron training arguments (ZeRO-3 as FSDP2, with the
    flags Megatron-LM's validate_args asks for, or refused with its reason)."""
    args: list[str] = []
    z = view.zero_stage if dp > 1 else 0  # sharding over one data-parallel rank is a no-op
    if z in (1, 2):
        args.append("--use-distributed-optimizer")
        notes.append(
            f"ZeRO-{z}: Megatron's distributed optimizer shards the optimizer state "
            "over data-parallel ranks and reduce-scatters the gradients"
        )
    elif z == 3:
        if view.pipeline is not None:
            raise NotExpressibleError(
                f"ZeRO-3 with pipeline stages: {fw}'s FSDP2 mode "
                "(--use-torch-fsdp2) does not work with pipeline parallelism"
            )
        if tied:
            raise NotExpressibleError(
                f"ZeRO-3 on a model whose LM head shares the embedding's weight: {fw}'s "
                "--use-torch-fsdp2 requires --untie-embeddings-and-output-weights (another model)"
            )
        if tp > 1:
            raise NotExpressibleError(
                f"ZeRO-3 with tensor parallelism: {fw}'s --use-torch-fsdp2 needs "
                "CUDA_DEVICE_MAX_CONNECTIONS > 1 and tensor parallelism needs it = 1"
            )
        args += ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion"]
        notes.append("ZeRO-3 as Megatron's --use-torch-fsdp2 (marked experimental upstream), "
                     "without gradient-accumulation fusion (validate_args refuses the two "
                     "together); leave CUDA_DEVICE_MAX_CONNECTIONS unset (FSDP2 needs it > 1)")
    done, total = recompute_per_stage(view)
    selective = view.selective_layers
    if selective and any(done):
        raise NotExpressibleError(
            f"the plan recomputes some layers fully and the attention core of others: {fw}'s "
            "--recompute-granularity is one setting for every layer"
        )
    if selective:
        args += ["--recompute-granularity", "selective"]
        layers = sorted({o.layer for o in view.ops if o.layer is not None})
        if len(selective) < len(layers):
            notes.append(
                f"the plan recomputes the attention core of layers {_ranges(selective)} only; "
                f"{fw}'s selective granularity recomputes every layer's (a little more compute, "
                "less memory than planned)"
            )
    if any(done):
        if done == total:
            args += [
                "--recompute-granularity",
                "full",
                "--recompute-method",
                "uniform",
                "--recompute-num-layers",
                "1",
            ]
        elif len(set(done)) == 1:
            args += [
                "--recompute-granularity",
                "full",
                "--recompute-method",
                "block",
                "--recompute-num-layers",
                str(done[0]),
            ]
            notes.append(
                f"the plan recomputes layers {_ranges(view.recomputed_layers)}; "
                f"--recompute-method block recomputes the first {done[0]} of each "
                "stage: the same number of identical layers"
            )
        else:
            raise NotExpressibleError(
                f"pipeline stages recompute {done} layers: {fw}'s "
                "--recompute-num-layers is one number for every stage"
            )
    return args


def _megatron_model(c: ModelConfig, view: PlanView) -> list[str]:
    """Model shape and dtype arguments."""
    args = [
        "--num-layers",
        str(c.num_hidden_layers),
        "--hidden-size",
        str(c.hidden_size),
        "--num-attention-heads",
        str(c.num_attention_heads),
        "--ffn-hidden-size",
        str(c.ffn_size),
        "--seq-length",
        str(c.seq_length),
        "--max-position-embeddings",
        str(max(c.max_position_embeddings, c.seq_length)),
        "--vocab-size",
        str(c.vocab_size),
    ]
    if c.model_type in ("llama", "mistral"):
        args += [
            "--swiglu",
            "--normalization",
            "RMSNorm",
            "--position-embedding-type",
            "rope",
            "--disable-bias-linear",
        ]
        if c.kv_heads != c.num_attention_heads:
            args += ["--group-query-attention", "--num-query-groups", str(c.kv_heads)]
    if not c.tie_word_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if view.flash_attention:
        args.append("--use-flash-attn")
    if DTYPE_BYTES[c.dtype] == 2:
        args.append("--bf16" if "b" in c.dtype else "--fp16")
    return args


def _ranges(xs: list[int]) -> str:
    """``0-3, 7`` for sorted integers."""
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}-{x}" if x > start else str(x))
            start = None
    return ", ".join(out)


# ---- DeepSpeed -----------------------------------------------------------------------------------


