"""Model configs and the graph builders behind them; sample configs live in sample_models/."""

from __future__ import annotations

from pathlib import Path

from taps_core.errors import InvalidInputError
from taps_core.ir.graph import OpGraph
from taps_core.models.config import (
    TRANSFORMER_TYPES,
    ModelConfig,
    config_from_dict,
    config_from_text,
    load_config_file,
)
from taps_core.models.transformer import build_transformer
from taps_core.models.vision import build_mlp, build_resnet
from taps_core.strict_json import is_file

SAMPLE_DIR = Path(__file__).resolve().parents[2] / "sample_models"

__all__ = [
    "SAMPLE_DIR",
    "ModelConfig",
    "build_graph",
    "config_from_dict",
    "config_from_text",
    "load_model_config",
    "sample_names",
]


def sample_names() -> list[str]:
    """Names of the bundled sample models."""
    return sorted(p.stem for p in SAMPLE_DIR.glob("*.json"))


def load_model_config(spec: str) -> ModelConfig:
    """A sample model name (``gpt2``) or the path of an HF-style config.json."""
    if "/" not in spec and spec in sample_names():
        sample = SAMPLE_DIR / f"{spec}.json"
        cfg = load_config_file(sample)
        return cfg if cfg.name == spec else config_from_text(sample.read_bytes(), name=spec)
    if not spec.endswith(".json") and not is_file(spec):
        raise InvalidInputError("model", spec, f"one of {sample_names()} or a config.json path")
    return load_config_file(spec)


def build_graph(cfg: ModelConfig) -> OpGraph:
    """The operator graph of a config (family chosen by ``model_type``)."""
    if cfg.model_type in TRANSFORMER_TYPES:
        return build_transformer(cfg)
    if cfg.model_type == "resnet":
        return build_resnet(cfg)
    return build_mlp(cfg)
