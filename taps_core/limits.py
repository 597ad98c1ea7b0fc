"""Every bound on user input, as data: one table shared by the CLI, the loaders and the dashboard.

A value outside its bound is refused before any work starts, with one line naming the field,
the value and the allowed range (see :func:`check`). The ranges are generous for real models
and clusters (the largest sample, gpt3-175b, has 96 layers; the largest preset cluster has
2048 hosts) and small enough that every accepted input is planned in bounded time and memory.

Examples
--------
>>> check("num_hidden_layers", 96)
96
>>> check("num_hidden_layers", 10**6)
Traceback (most recent call last):
...
taps_core.errors.InvalidInputError: num_hidden_layers must be an integer in [1, 1024] \
(layers); got 1000000
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from taps_core.errors import InvalidInputError


@dataclass(frozen=True)
class Bound:
    """Closed range ``[lo, hi]`` of one input; ``unit`` says what the number counts."""

    lo: float
    hi: float
    unit: str
    integer: bool = True
    lo_open: bool = False  # True: the range is (lo, hi]

    def describe(self) -> str:
        """The range in words, e.g. ``an integer in [1, 1024] (layers)``."""
        kind = "an integer" if self.integer else "a number"
        left = "(" if self.lo_open else "["
        return f"{kind} in {left}{_fmt(self.lo)}, {_fmt(self.hi)}] ({self.unit})"


def _fmt(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:g}"


KiB, MiB = 2**10, 2**20

LIMITS: dict[str, Bound] = {
    # ---- files and JSON text -----------------------------------------------------------------
    "config_file_bytes": Bound(0, 1 * MiB, "bytes"),
    "topology_file_bytes": Bound(0, 32 * MiB, "bytes"),
    "problem_file_bytes": Bound(0, 256 * MiB, "bytes"),  # IOPDDL problems reach ~150 MB
    "json_depth": Bound(1, 64, "levels of nested [ ] / { }"),
    # ---- model architecture (Hugging Face names) ---------------------------------------------
    "num_hidden_layers": Bound(1, 1024, "layers"),
    "hidden_size": Bound(1, 131_072, "features"),
    "num_attention_heads": Bound(1, 1024, "heads"),
    "num_key_value_heads": Bound(1, 1024, "heads"),
    "intermediate_size": Bound(1, 1_048_576, "features"),
    "vocab_size": Bound(1, 4_194_304, "tokens"),
    "max_position_embeddings": Bound(1, 16_777_216, "positions"),
    "num_local_experts": Bound(0, 1024, "experts"),
    "num_experts_per_tok": Bound(1, 1024, "experts"),
    "type_vocab_size": Bound(0, 1024, "token types"),
    "embedding_size": Bound(1, 65_536, "channels"),
    "hidden_sizes": Bound(1, 65_536, "channels per stage"),
    "hidden_sizes.length": Bound(1, 16, "stages"),
    "depths": Bound(1, 256, "blocks per stage"),
    "depths.total": Bound(1, 512, "blocks"),
    "num_labels": Bound(1, 1_048_576, "classes"),
    "image_size": Bound(1, 16_384, "pixels"),
    "attention_dropout": Bound(0, 1, "probability, below 1", integer=False),
    "hidden_dropout": Bound(0, 1, "probability, below 1", integer=False),
    # ---- workload ----------------------------------------------------------------------------
    "batch_size": Bound(1, 16_777_216, "samples"),
    "seq_length": Bound(1, 16_777_216, "tokens"),
    "tokens_per_step": Bound(1, 2**40, "batch_size x seq_length tokens"),
    "memory_limit_gib": Bound(0, 1_048_576, "GiB per device", integer=False, lo_open=True),
    # ---- clusters ----------------------------------------------------------------------------
    "preset_nodes": Bound(1, 2048, "hosts"),
    "hosts": Bound(1, 2048, "hosts"),
    "gpus_per_host": Bound(1, 128, "GPUs"),
    "gpus": Bound(1, 16_384, "GPUs"),  # the largest preset cluster (dgx-a100:2048)
    "devices": Bound(1, 200_000, "devices"),
    "links": Bound(0, 1_000_000, "links"),
    "bandwidth_Bps": Bound(0, 1e15, "bytes/s per direction", integer=False, lo_open=True),
    "latency_s": Bound(0, 10, "seconds", integer=False),
    "gpu.memory_bytes": Bound(0, 2.0**50, "bytes", integer=False, lo_open=True),
    "gpu.peak_flops": Bound(0, 1e18, "FLOP/s", integer=False, lo_open=True),
    "gpu.hbm_bandwidth_Bps": Bound(0, 1e15, "bytes/s", integer=False, lo_open=True),
    "name_length": Bound(0, 256, "characters"),
    # ---- solve-graph problems ----------------------------------------------------------------
    "problem_nodes": Bound(1, 200_000, "nodes"),
    "problem_edges": Bound(0, 2_000_000, "edges"),
    "strategies_per_node": Bound(1, 10_000, "strategies"),
    "problem_entries": Bound(0, 100_000_000, "cost entries in all edge matrices"),
    "cost": Bound(-1e300, 1e300, "finite number", integer=False),
    "iopddl_value": Bound(0, 2**63 - 1, "non-negative 64-bit integer"),
    "iopddl_time": Bound(0, 2**62, "time step"),
    "time_limit_s": Bound(0, 86_400, "seconds", integer=False, lo_open=True),
}


def check(name: str, value: object, *, field: str | None = None) -> float:
    """``value`` after checking it against ``LIMITS[name]``; errors name ``field`` (or ``name``).

    Integers must be real ints (not bools, not floats); numbers must be finite. Python's huge
    integers (400 digits) are refused by range, never converted to float.
    """
    bound = LIMITS[name]
    where = field or name
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(where, value, bound.describe())
    if bound.integer and not isinstance(value, int):
        raise InvalidInputError(where, value, bound.describe())
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInputError(where, value, bound.describe())
    low_ok = value > bound.lo if bound.lo_open else value >= bound.lo
    if not (low_ok and value <= bound.hi):
        raise InvalidInputError(where, value, bound.describe())
    return value


def check_size(name: str, size: int, *, field: str) -> int:
    """Check a count or a byte size (``size``) against ``LIMITS[name]``; return it."""
    bound = LIMITS[name]
    if size > bound.hi:
        raise InvalidInputError(field, size, f"at most {_fmt(bound.hi)} {bound.unit}")
    if size < bound.lo:
        raise InvalidInputError(field, size, f"at least {_fmt(bound.lo)} {bound.unit}")
    return size
