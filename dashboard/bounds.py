"""Bounds the dashboard applies to uploads before any work: JSON nesting, model sizes and
cluster sizes. Model bounds come from :mod:`taps_core.limits` when it is available (one table
for CLI, loaders and dashboard); the cluster bounds are the widgets' own ranges, so an upload
cannot ask for more than the build form can express.
"""

from __future__ import annotations

from typing import Any

from taps_core.errors import InvalidInputError
from taps_core.limits import LIMITS

MAX_JSON_DEPTH = 64
MAX_HOSTS = int(LIMITS["hosts"].hi)  # the engine's bound, the Nodes widget's range
MAX_GPUS_PER_HOST = 16  # the build form's range
MAX_LINKS = 20_000
# used only while taps_core.limits is absent: the sizes that make a graph (and its search) big
FALLBACK = {
    "num_hidden_layers": 1024,
    "hidden_size": 131_072,
    "intermediate_size": 1_048_576,
    "vocab_size": 4_194_304,
    "num_attention_heads": 1024,
    "num_local_experts": 1024,
}


def json_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in JSON text, ignoring brackets inside strings (O(n))."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def check_json_text(text: str, field: str) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH` before parsing it."""
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise InvalidInputError(f"{field} nesting depth", depth, f"at most {MAX_JSON_DEPTH}")


def check_config(cfg: Any) -> None:
    """Refuse model configs too large to plan in bounded time (field named in the message)."""
    try:
        from taps_core import limits
    except ImportError:
        limits = None
    names = limits.LIMITS if limits is not None else FALLBACK
    for name in names:
        value = getattr(cfg, name, None)
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        if limits is not None:
            limits.check(name, value)
        elif not 0 <= value <= FALLBACK[name]:
            raise InvalidInputError(name, value, f"between 0 and {FALLBACK[name]}")


def check_topology(topo: Any) -> None:
    """Refuse clusters the dashboard's widgets cannot express."""
    if topo.nodes > MAX_HOSTS:
        raise InvalidInputError("topology hosts", topo.nodes, f"at most {MAX_HOSTS}")
    if topo.gpus_per_node > MAX_GPUS_PER_HOST:
        raise InvalidInputError(
            "topology GPUs per host", topo.gpus_per_node, f"at most {MAX_GPUS_PER_HOST}"
        )
    if len(topo.links) > MAX_LINKS:
        raise InvalidInputError("topology links", len(topo.links), f"at most {MAX_LINKS}")
