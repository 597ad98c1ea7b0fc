"""Model configs in the Hugging Face config.json vocabulary, plus workload fields.

Workload fields (``batch_size``, ``seq_length``, ``dtype``) may sit in the same file; the CLI
and dashboard can override them. Unknown keys are ignored, as transformers does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from taps_core import strict_json
from taps_core.errors import InvalidInputError, check_positive_int
from taps_core.limits import LIMITS, check, check_size

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2}
TRANSFORMER_TYPES = ("gpt2", "gpt3", "bert", "llama", "mistral", "mixtral")
FAMILIES = (*TRANSFORMER_TYPES, "mlp", "resnet")
MAX_CONFIG_BYTES = int(LIMITS["config_file_bytes"].hi)


@dataclass(frozen=True)
class ModelConfig:
    """Architecture (HF names) and workload of one model."""

    name: str
    model_type: str
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_key_value_heads: int | None = None
    intermediate_size: int | None = None
    vocab_size: int = 50257
    max_position_embeddings: int = 1024
    tie_word_embeddings: bool = True
    num_local_experts: int = 0
    num_experts_per_tok: int = 2
    type_vocab_size: int = 0
    # ResNet (HF ResNetConfig names)
    embedding_size: int = 64
    hidden_sizes: tuple[int, ...] = (256, 512, 1024, 2048)
    depths: tuple[int, ...] = (3, 4, 6, 3)
    num_labels: int = 1000
    image_size: int = 224
    # dropout probabilities (HF names vary by family; None = the family's default)
    attention_dropout: float | None = None
    hidden_dropout: float | None = None
    # workload
    batch_size: int = 8
    seq_length: int = 1024
    dtype: str = "bfloat16"
    flash_attention: bool = False  # fused attention: no softmax/dropout tensors kept for backward

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def ffn_size(self) -> int:
        return self.intermediate_size or 4 * self.hidden_size

    @property
    def uses_dropout(self) -> tuple[bool, bool]:
        """(attention-probability dropout, hidden/residual dropout) in training.

        GPT-2/3 and BERT train with dropout 0.1 unless the config says otherwise (Megatron's
        and HF's defaults); Llama-family models train without dropout.
        """
        default = 0.0 if self.model_type in ("llama", "mistral", "mixtral") else 0.1
        attn = default if self.attention_dropout is None else self.attention_dropout
        hidden = default if self.hidden_dropout is None else self.hidden_dropout
        return attn > 0, hidden > 0

    def with_workload(
        self,
        *,
        batch_size: int | None = None,
        seq_length: int | None = None,
        dtype: str | None = None,
        flash_attention: bool | None = None,
    ) -> ModelConfig:
        """A copy with the workload overridden (None keeps the current value)."""
        new = replace(
            self,
            batch_size=self.batch_size if batch_size is None else batch_size,
            seq_length=self.seq_length if seq_length is None else seq_length,
            dtype=self.dtype if dtype is None else dtype,
            flash_attention=(self.flash_attention if flash_attention is None else flash_attention),
        )
        return validate_config(new)


# every field's JSON type; integers and probabilities are also bounded by taps_core.limits
_KINDS: dict[str, str] = {
    "name": "str",
    "model_type": "str",
    "hidden_size": "int",
    "num_hidden_layers": "int",
    "num_attention_heads": "int",
    "num_key_value_heads": "int",
    "intermediate_size": "int",
    "vocab_size": "int",
    "max_position_embeddings": "int",
    "tie_word_embeddings": "bool",
    "num_local_experts": "int",
    "num_experts_per_tok": "int",
    "type_vocab_size": "int",
    "embedding_size": "int",
    "hidden_sizes": "ints",
    "depths": "ints",
    "num_labels": "int",
    "image_size": "int",
    "attention_dropout": "prob",
    "hidden_dropout": "prob",
    "batch_size": "int",
    "seq_length": "int",
    "dtype": "str",
    "flash_attention": "bool",
}
_INT_FIELDS = tuple(k for k, kind in _KINDS.items() if kind == "int")


def _check_kind(key: str, value: Any) -> Any:
    """``value`` converted for the dataclass (lists become tuples) after a JSON type check."""
    kind = _KINDS[key]
    if kind == "str":
        if not isinstance(value, str):
            raise InvalidInputError(key, value, "a string")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise InvalidInputError(key, value, "true or false")
        return value
    if kind == "ints":
        if not isinstance(value, list) or not value:
            raise InvalidInputError(key, value, "a non-empty list of integers")
        check_size("hidden_sizes.length", len(value), field=f"{key} length")  # stages
        return tuple(check(key, x, field=f"{key}[{i}]") for i, x in enumerate(value))
    if kind == "prob":
        check(key, value)
        if value >= 1:
            raise InvalidInputError(key, value, "a probability in [0, 1)")
        return value
    return check(key, value)


def validate_config(cfg: ModelConfig) -> ModelConfig:
    """Check the fields the graph builders rely on; errors name the field."""
    if not isinstance(cfg.model_type, str) or cfg.model_type not in FAMILIES:
        raise InvalidInputError("model_type", cfg.model_type, f"one of {FAMILIES}")
    for name in _INT_FIELDS:
        value = getattr(cfg, name)
        if value is not None:
            check(name, value)
    if not isinstance(cfg.dtype, str) or cfg.dtype not in DTYPE_BYTES:
        raise InvalidInputError("dtype", cfg.dtype, f"one of {sorted(DTYPE_BYTES)}")
    check("tokens_per_step", cfg.batch_size * cfg.seq_length, field="batch_size x seq_length")
    if cfg.model_type == "resnet":
        for key in ("hidden_sizes", "depths"):
            _check_kind(key, list(getattr(cfg, key)))
        check_size("depths.total", sum(cfg.depths), field="sum of depths")
    if cfg.model_type in TRANSFORMER_TYPES:
        if cfg.hidden_size % cfg.num_attention_heads:
            raise InvalidInputError(
                "hidden_size",
                cfg.hidden_size,
                f"divisible by num_attention_heads ({cfg.num_attention_heads})",
            )
        if cfg.num_attention_heads % cfg.kv_heads:
            raise InvalidInputError(
                "num_key_value_heads",
                cfg.num_key_value_heads,
                f"a divisor of num_attention_heads ({cfg.num_attention_heads})",
            )
        if cfg.seq_length > cfg.max_position_embeddings and cfg.model_type in ("gpt2", "bert"):
            raise InvalidInputError(
                "seq_length",
                cfg.seq_length,
                f"<= max_position_embeddings ({cfg.max_position_embeddings})",
            )
        if cfg.num_local_experts:
            check_positive_int("num_experts_per_tok", cfg.num_experts_per_tok)
            if cfg.num_experts_per_tok > cfg.num_local_experts:
                raise InvalidInputError(
                    "num_experts_per_tok",
                    cfg.num_experts_per_tok,
                    f"<= num_local_experts ({cfg.num_local_experts})",
                )
    if cfg.model_type == "resnet" and len(cfg.hidden_sizes) != len(cfg.depths):
        raise InvalidInputError("depths", cfg.depths, "as many entries as hidden_sizes")
    return cfg


_ALIASES = {
    "n_embd": "hidden_size",
    "n_layer": "num_hidden_layers",
    "n_head": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_inner": "intermediate_size",
    "torch_dtype": "dtype",
    "micro_batch_size": "batch_size",
    "seq_len": "seq_length",
    "attn_pdrop": "attention_dropout",
    "attention_probs_dropout_prob": "attention_dropout",
    "resid_pdrop": "hidden_dropout",
    "hidden_dropout_prob": "hidden_dropout",
}


def config_from_dict(data: dict[str, Any], *, name: str | None = None) -> ModelConfig:
    """Build a validated config from an HF-style dict (GPT-2's n_embd etc. are understood)."""
    if not isinstance(data, dict):
        raise InvalidInputError("model config", type(data).__name__, "a JSON object")
    raw = {_ALIASES.get(k, k): v for k, v in data.items()}
    written = {_ALIASES[k]: k for k in data if k in _ALIASES}  # canonical -> key in the file
    try:
        return _build(raw, name)
    except InvalidInputError as err:
        if err.field not in written:
            raise
        # name the key the user wrote (n_layer), not only our canonical name for it
        raise InvalidInputError(
            f"{written[err.field]} ({err.field})", err.value, err.expected
        ) from None


def _build(raw: dict[str, Any], name: str | None) -> ModelConfig:
    """The validated config from canonical keys."""
    mtype = raw.get("model_type")
    if mtype is None:
        raise InvalidInputError("model_type", None, f"present, one of {FAMILIES}")
    fields = {f for f in ModelConfig.__dataclass_fields__}
    kwargs: dict[str, Any] = {
        k: _check_kind(k, v) for k, v in raw.items() if k in fields and v is not None
    }
    label = name or raw.get("name") or raw.get("_name_or_path") or mtype
    kwargs["name"] = " ".join(str(label).split())[: int(LIMITS["name_length"].hi)] or mtype
    try:
        cfg = ModelConfig(**kwargs)
    except TypeError as err:
        raise InvalidInputError("model config", str(err), "known fields") from None
    return validate_config(cfg)


def load_config_file(path: str | Path) -> ModelConfig:
    """Parse a config.json file (size checked before reading; plain JSON only, never code)."""
    p = Path(path)
    if not strict_json.is_file(p):
        raise InvalidInputError(
            "model", str(path), "a sample model name or an existing config.json"
        )
    data = strict_json.read_file(p, field="model config", limit="config_file_bytes")
    return config_from_text(data, name=p.stem if p.stem != "config" else None)


def config_from_text(text: str | bytes, *, name: str | None = None) -> ModelConfig:
    """Parse config JSON text (e.g. an upload): bounded size and depth, strict JSON."""
    data = strict_json.loads(text, field="model config", limit="config_file_bytes")
    return config_from_dict(data, name=name)
