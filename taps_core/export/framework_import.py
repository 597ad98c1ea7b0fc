"""What a team runs today, read from its framework's own files: a Megatron-LM argument list or
a DeepSpeed config, as the :class:`~taps_core.search.fixed_config.FixedConfig` that ``plan
--fixed`` prices (``plan MODEL --fixed-from megatron-args.txt`` / ``--fixed-from ds.json``).

Only the flags and keys that decide the parallel layout are read; flags that only steer
training (learning rate, data, logging, checkpoints, precision) are accepted and ignored. A flag
or key that is neither, a value of the wrong kind, or two that contradict each other is refused
with one line naming it: a configuration is priced as written or not at all.
"""

from __future__ import annotations

import shlex
from typing import Any

from taps_core import strict_json
from taps_core.errors import InvalidInputError
from taps_core.search.fixed_config import FixedConfig, parse_fixed

# Megatron-LM flags that set the layout: ones taking a value, then switches
_MEGATRON_LAYOUT_VALUE = frozenset((
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
    "--global-batch-size", "--recompute-granularity", "--recompute-method",
    "--recompute-num-layers", "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
))
_MEGATRON_LAYOUT_SWITCH = frozenset((
    "--sequence-parallel", "--use-distributed-optimizer", "--use-torch-fsdp2",
    "--recompute-activations",
))
# layout flags the cost model has no lever for: refused unless they leave the layout alone
_MEGATRON_UNSUPPORTED = {
    "--context-parallel-size": "1",
    "--expert-model-parallel-size": "1",
    "--num-layers-per-virtual-pipeline-stage": None,
    "--num-virtual-stages-per-pipeline-rank": None,
}
# flags that steer training but not the layout (value-taking ones, then switches)
_MEGATRON_IGNORED_VALUE = frozenset((
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
    "--num-query-groups", "--seq-length", "--max-position-embeddings", "--vocab-size",
    "--kv-channels", "--lr", "--min-lr", "--lr-decay-style", "--lr-warmup-iters",
    "--lr-warmup-fraction", "--lr-decay-iters", "--train-iters", "--train-samples",
    "--weight-decay", "--clip-grad", "--adam-beta1", "--adam-beta2", "--adam-eps",
    "--init-method-std", "--attention-dropout", "--hidden-dropout", "--seed", "--data-path",
    "--split", "--vocab-file", "--merge-file", "--tokenizer-type", "--tokenizer-model", "--save",
    "--load", "--save-interval", "--eval-interval", "--eval-iters", "--log-interval",
    "--tensorboard-dir", "--wandb-project", "--exit-interval", "--distributed-backend",
    "--position-embedding-type", "--normalization", "--rotary-base", "--loss-scale",
    "--initial-loss-scale", "--dataloader-type", "--num-workers", "--distributed-timeout-minutes",
    "--ckpt-format",
))
_MEGATRON_IGNORED_SWITCH = frozenset((
    "--bf16", "--fp16", "--swiglu", "--untie-embeddings-and-output-weights",
    "--disable-bias-linear", "--no-masked-softmax-fusion", "--no-bias-gelu-fusion",
    "--no-bias-dropout-fusion", "--use-flash-attn", "--use-mcore-models", "--overlap-grad-reduce",
    "--overlap-param-gather", "--no-gradient-accumulation-fusion", "--group-query-attention",
    "--use-rotary-position-embeddings", "--no-position-embedding", "--log-throughput",
    "--log-timers-to-tensorboard", "--no-async-tensor-model-parallel-allreduce",
    "--transformer-impl", "--mock-data", "--accumulate-allreduce-grads-in-fp32",
))


def model_flags(cfg: Any) -> dict[str, int]:
    """Megatron-LM's model flags and the values the planned model (a ModelConfig) has."""
    flags = {"--num-layers": cfg.num_hidden_layers, "--hidden-size": cfg.hidden_size,
             "--num-attention-heads": cfg.num_attention_heads, "--seq-length": cfg.seq_length}
    if cfg.intermediate_size:
        flags["--ffn-hidden-size"] = cfg.intermediate_size
    return flags


def fixed_from_megatron_args(
    text: str, batch: int | None = None, model: dict[str, int] | None = None
) -> FixedConfig:
    """The configuration a Megatron-LM argument list (``pretrain_gpt.py`` flags, newlines and
    backslash continuations allowed, ``#`` comments) sets. ``batch``: the planned global batch,
    checked against ``--global-batch-size``; ``model``: the planned model's flags
    (:func:`model_flags`), each checked where the list gives it."""
    try:
        words = [w for w in shlex.split(text.replace("\\\n", " "), comments=True)
                 if w.strip() and w != "\\"]  # a pasted line keeps its continuation marks
    except ValueError as err:
        raise InvalidInputError("--fixed-from", str(err), "a Megatron-LM argument list") from None
    scripts = [i for i, w in enumerate(words) if w.endswith(".py")]
    if scripts:  # the launcher and its own flags (torchrun --nproc-per-node 8 ...) come first
        words = words[scripts[-1] + 1:]
    flags: dict[str, str] = {}
    i = 0
    while i < len(words):
        flag = words[i]
        if "=" in flag and flag.startswith("--"):
            flag, value = flag.split("=", 1)
            i += 1
        elif flag in _MEGATRON_IGNORED_SWITCH or flag in _MEGATRON_LAYOUT_SWITCH:
            value = "1"
            i += 1
        elif flag.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            value = words[i + 1]
            i += 2
        else:
            raise InvalidInputError("--fixed-from", flag, "Megatron-LM flags (--name value)")
        known = any(flag in group for group in (
            _MEGATRON_LAYOUT_VALUE, _MEGATRON_LAYOUT_SWITCH, _MEGATRON_UNSUPPORTED,
            _MEGATRON_IGNORED_VALUE, _MEGATRON_IGNORED_SWITCH,
        ))
        if not known:
            raise InvalidInputError(
                "--fixed-from flag", flag,
                "a Megatron-LM flag this import knows (parallel sizes, micro and global "
                "batch, sequence parallelism, recomputation, distributed optimizer or FSDP)",
            )
        if flag in flags and flags[flag] != value:
            raise InvalidInputError(f"--fixed-from {flag}", value, f"given once ({flags[flag]})")
        flags[flag] = value
    for flag, want in (model or {}).items():
        if flag in flags and flags[flag] != str(want):
            raise InvalidInputError(f"--fixed-from {flag}", flags[flag],
                                    f"{want}, the planned model's (pass the model it trains)")
    for flag, neutral in _MEGATRON_UNSUPPORTED.items():
        if flag in flags and flags[flag] != neutral:
            raise InvalidInputError(
                f"--fixed-from {flag}", flags[flag],
                f"{neutral} (the cost model has no lever for it)" if neutral else
                "absent (interleaved pipeline stages are not in the cost model)",
            )
    return _megatron_config(flags, batch)


def _megatron_config(flags: dict[str, str], batch: int | None) -> FixedConfig:
    def count(flag: str) -> int | None:
        if flag not in flags:
            return None
        try:
            n = int(flags[flag])
        except ValueError:
            raise InvalidInputError(f"--fixed-from {flag}", flags[flag], "an integer") from None
        if n < 1:
            raise InvalidInputError(f"--fixed-from {flag}", n, "an integer >= 1")
        return n

    tp, pp, mbs = (count(f) or 1 for f in ("--tensor-model-parallel-size",
                                          "--pipeline-model-parallel-size", "--micro-batch-size"))
    global_batch = count("--global-batch-size")
    if batch is not None and global_batch is not None and global_batch != batch:
        raise InvalidInputError("--fixed-from --global-batch-size", global_batch,
                                f"the planned batch {batch} (or pass --batch {global_batch})")
    granularity = flags.get("--recompute-granularity")
    if "--recompute-activations" in flags:  # Megatron's alias of selective recomputation
        granularity = granularity or "selective"
    if granularity not in (None, "full", "selective"):
        raise InvalidInputError("--fixed-from --recompute-granularity", granularity,
                                "full or selective")
    if granularity != "full" and ("--recompute-method" in flags or
                                "--recompute-num-layers" in flags):
        raise InvalidInputError("--fixed-from --recompute-method", flags.get(
            "--recompute-method", flags.get("--recompute-num-layers")),
            "with --recompute-granularity full")
    if granularity == "full" and "--recompute-num-layers" in flags:
        layers = count("--recompute-num-layers")
        method = flags.get("--recompute-method")
        if method == "block" or (layers != 1 and method != "uniform"):
            raise InvalidInputError(
                "--fixed-from --recompute-num-layers", layers,
                "with --recompute-method uniform (every layer recomputed): --fixed prices "
                "full recomputation of every layer",
            )
    fsdp = "--use-torch-fsdp2" in flags
    if fsdp and "--use-distributed-optimizer" in flags:
        raise InvalidInputError("--fixed-from --use-torch-fsdp2", "with "
                                "--use-distributed-optimizer", "one of the two (FSDP shards "
                                "weights itself)")
    zero = 3 if fsdp else 1 if "--use-distributed-optimizer" in flags else 0
    return FixedConfig(
        tp=tp, pp=pp, mbs=mbs, sp="--sequence-parallel" in flags,
        recompute=granularity or "none", zero=zero,
        first=count("--decoder-first-pipeline-num-layers"),
        last=count("--decoder-last-pipeline-num-layers"),
    )


# DeepSpeed config keys: the ones read, then the ones that do not change the layout
_DS_READ = frozenset({"train_batch_size", "train_micro_batch_size_per_gpu",
                      "gradient_accumulation_steps", "zero_optimization",
                      "activation_checkpointing"})
_DS_IGNORED = frozenset({
    "optimizer", "scheduler", "fp16", "bf16", "amp", "gradient_clipping", "steps_per_print",
    "wall_clock_breakdown", "zero_allow_untested_optimizer", "prescale_gradients",
    "gradient_predivide_factor", "communication_data_type", "dump_state", "flops_profiler",
    "tensorboard", "wandb", "csv_monitor", "comms_logger", "elasticity", "data_types",
    "seq_parallel_communication_data_type", "checkpoint", "data_efficiency", "memory_breakdown",
})


def fixed_from_deepspeed(data: Any, gpus: int, batch: int | None = None) -> FixedConfig:
    """The configuration a DeepSpeed config (dict) sets on ``gpus`` GPUs: data parallel over
    all of them, its ZeRO stage, micro-batch, and full recomputation when activation
    checkpointing is configured. ``batch``: the planned global batch."""
    if not isinstance(data, dict):
        raise InvalidInputError("--fixed-from", type(data).__name__, "a DeepSpeed config object")
    for key in data:
        if key not in _DS_READ and key not in _DS_IGNORED:
            raise InvalidInputError("--fixed-from key", key, "a DeepSpeed config key this "
                                    "import knows (batch sizes, zero_optimization, "
                                    "activation_checkpointing, optimizer, precision, logging)")

    def count(key: str) -> int | None:
        v = data.get(key)
        if v is None or v == "auto":
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InvalidInputError(f"--fixed-from {key}", v, "an integer >= 1 or \"auto\"")
        return v

    total, mbs, gas = (count(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu",
                                          "gradient_accumulation_steps"))
    if total is not None and batch is not None and total != batch:
        raise InvalidInputError("--fixed-from train_batch_size", total,
                                f"the planned batch {batch} (or pass --batch {total})")
    if total is not None and mbs is not None and gas is not None and total != mbs * gas * gpus:
        raise InvalidInputError(
            "--fixed-from train_batch_size", total,
            f"train_micro_batch_size_per_gpu x gradient_accumulation_steps x {gpus} GPUs "
            f"= {mbs * gas * gpus}",
        )
    zo = data.get("zero_optimization", {})
    if not isinstance(zo, dict):
        raise InvalidInputError("--fixed-from zero_optimization", zo, "an object")
    stage = zo.get("stage", 0)
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):
        raise InvalidInputError("--fixed-from zero_optimization.stage", stage, "0, 1, 2 or 3")
    if mbs is None and total is not None and gas is not None and total % (gas * gpus) == 0:
        mbs = total // (gas * gpus)
    return FixedConfig(tp=1, pp=1, dp=gpus, mbs=mbs, zero=stage,
                       recompute="full" if data.get("activation_checkpointing") else "none")


def read_fixed_from(path: str, gpus: int, model: Any) -> FixedConfig:
    """``--fixed-from PATH``: a DeepSpeed config (JSON) or a Megatron-LM argument list, for the
    planned ``model`` (a ModelConfig: its batch and shape are checked) on ``gpus`` GPUs."""
    raw = strict_json.read_file(path, field="--fixed-from", limit="config_file_bytes")
    return fixed_from_text(raw.decode("utf-8", errors="replace"), gpus, model)


def fixed_from_text(text: str, gpus: int, model: Any) -> FixedConfig:
    """A configuration from text: a DeepSpeed config (JSON object), a Megatron-LM argument list
    (it starts with a flag or a launcher), or ``--fixed``'s own ``tp=8,pp=2,...``."""
    body = text.strip()
    if body.startswith("{"):
        data = strict_json.loads(body, field="--fixed-from", limit="config_file_bytes")
        return fixed_from_deepspeed(data, gpus, model.batch_size)
    if body.startswith(("-", "#", "torchrun", "python", "deepspeed ")):
        return fixed_from_megatron_args(body, model.batch_size, model_flags(model))
    return parse_fixed(body)
