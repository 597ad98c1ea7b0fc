"""What every exporter shares: the formats, the refusal and the result record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taps_core.errors import TapsError

FORMATS = ("megatron", "deepspeed", "dtensor")
EXIT_NOT_EXPRESSIBLE = 3  # the plan is valid but the framework cannot run it as planned
FRAMEWORK = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "dtensor": "DTensor"}
PLAN_FILE_LIMIT = "topology_file_bytes"  # plan JSON files share the 32 MiB bound of topologies
GPT_FAMILIES = ("gpt2", "gpt3", "llama", "mistral")  # dense decoders with HF module names


class NotExpressibleError(TapsError):
    """The plan is valid, but the target framework cannot run it as planned (one-line reason)."""


# ---- the plan JSON, read into typed records ----------------------------------------------------



@dataclass
class Export:
    """One export: the artifact's text, its data, and notes for the person running it."""

    format: str
    text: str  # what goes to the file or stdout
    data: Any  # the same as JSON-able data (arguments list, config dict, DTensor plan)
    notes: list[str] = field(default_factory=list)
    python: str | None = None  # DTensor only: the runnable snippet



def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None

