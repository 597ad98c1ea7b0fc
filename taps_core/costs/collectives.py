"""Collectives as phases, and the two ways to cost them: topology-aware time or bytes.

A :class:`Phase` is one single-level step run by every group at once: ``per_rank_bytes`` is what
each rank sends (the ring formulas of the primer), ``steps`` the latency count. An all-reduce
whose group spans hosts and GPUs runs hierarchically: reduce-scatter inside the host, all-reduce
across hosts on 1/q of the data (every GPU on its own rail), all-gather inside the host.
A collective that crosses hosts while the GPUs of a host hold copies of the same data is
sliced: each copy sends 1/copies across hosts and the host all-gathers over NVLink.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from taps_core.cluster.links import LinkModel

DEFAULT_VOLUME_SECONDS_PER_BYTE = 1.0 / 100e9  # volume model: one fixed 100 GB/s for every byte


@dataclass(frozen=True)
class Phase:
    """One collective step on one mesh level, run by every group of that level at once."""

    collective: str  # all_reduce | all_gather | reduce_scatter | all_to_all
    level: str
    q: int
    per_rank_bytes: float
    steps: int

    @property
    def pattern(self) -> str:
        return "pairs" if self.collective == "all_to_all" else "ring"

    @property
    def route(self) -> tuple[str, int, str]:
        """(level, group size, pattern): what a link model prices the phase by (its bytes
        and steps aside)."""
        return self.level, self.q, self.pattern


def all_reduce(
    q_inter: int, q_intra: int, size_bytes: float, copies: int = 1
) -> tuple[Phase, ...]:
    """All-reduce of ``size_bytes`` over q_inter hosts x q_intra GPUs (hierarchical if both).

    ``copies``: GPUs of a host that hold the same data (the op is replicated inside the host).
    When the group crosses hosts, each of them reduces only 1/copies of the buffer across hosts
    and the host all-gathers the result over NVLink, instead of every copy sending all of it.
    """
    spread = q_intra * (copies if q_inter > 1 else 1)
    if q_inter > 1 and spread > 1:
        return (
            *reduce_scatter("intra", q_intra, size_bytes),
            *all_reduce(q_inter, 1, size_bytes / spread),
            *all_gather("intra", spread, size_bytes),
        )
    q, level = (q_inter, "inter") if q_inter > 1 else (q_intra, "intra")
    if q <= 1:
        return ()
    return (Phase("all_reduce", level, q, 2 * (q - 1) / q * size_bytes, 2 * (q - 1)),)


def reduce_scatter_levels(
    q_inter: int, q_intra: int, size_bytes: float, copies: int = 1
) -> tuple[Phase, ...]:
    """Reduce-scatter of ``size_bytes`` over q_inter x q_intra (inside the host first).

    With ``copies`` (see :func:`all_reduce`) and a group that crosses hosts, each copy takes
    1/copies of the data: every GPU ends with ``size / (q_inter * q_intra * copies)``.
    """
    spread = copies if q_inter > 1 else 1
    return (
        *reduce_scatter("intra", q_intra, size_bytes),
        *reduce_scatter("inter", q_inter, size_bytes / (q_intra * spread)),
    )


def all_gather_levels(
    q_inter: int, q_intra: int, out_bytes: float, copies: int = 1
) -> tuple[Phase, ...]:
    """All-gather to ``out_bytes`` per GPU over q_inter x q_intra: across hosts first on the
    shards, then inside the host (also over ``copies`` when the group crosses hosts)."""
    spread = q_intra * (copies if q_inter > 1 else 1)
    return (
        *all_gather("inter", q_inter, out_bytes / spread),
        *all_gather("intra", spread, out_bytes),
    )


def reduce_scatter(level: str, q: int, in_bytes: float) -> tuple[Phase, ...]:
    """Reduce-scatter on one level whose input (per rank) is ``in_bytes``."""
    if q <= 1:
        return ()
    return (Phase("reduce_scatter", level, q, (q - 1) / q * in_bytes, q - 1),)


def all_gather(level: str, q: int, out_bytes: float) -> tuple[Phase, ...]:
    """All-gather whose result (per rank) is ``out_bytes``."""
    if q <= 1:
        return ()
    return (Phase("all_gather", level, q, (q - 1) / q * out_bytes, q - 1),)


def all_to_all(level: str, q: int, held_bytes: float) -> tuple[Phase, ...]:
    """All-to-all where each rank holds ``held_bytes`` and keeps 1/q of it."""
    if q <= 1:
        return ()
    return (Phase("all_to_all", level, q, (q - 1) / q * held_bytes, q - 1),)


class CommCost(Protocol):
    """What the search needs from a communication cost model."""

    name: str

    def seconds(self, phase: Phase) -> float:
        """Cost of one phase, in seconds (or seconds-equivalent for the volume model)."""
        ...

    def coefficients(self, level: str, q: int, pattern: str) -> tuple[float, float]:
        """(seconds per step, seconds per per-rank byte) of a pattern, for vectorised costs."""
        ...


class TopologyCost:
    """Time over the real links: routed per-link load over bandwidth, plus step latency."""

    name = "topology"

    def __init__(self, links: LinkModel) -> None:
        self.links = links

    def coefficients(self, level: str, q: int, pattern: str) -> tuple[float, float]:
        p = self.links.pattern(level, q, pattern)
        return p.alpha_s, p.beta_s_per_B

    def seconds(self, phase: Phase) -> float:
        alpha, beta = self.coefficients(*phase.route)
        return phase.steps * alpha + phase.per_rank_bytes * beta


class VolumeCost:
    """Bytes each rank sends times one constant: blind to which link the bytes cross."""

    name = "volume"

    def __init__(self, seconds_per_byte: float = DEFAULT_VOLUME_SECONDS_PER_BYTE) -> None:
        self.seconds_per_byte = seconds_per_byte

    def coefficients(self, level: str, q: int, pattern: str) -> tuple[float, float]:
        return 0.0, self.seconds_per_byte

    def seconds(self, phase: Phase) -> float:
        return phase.per_rank_bytes * self.seconds_per_byte
