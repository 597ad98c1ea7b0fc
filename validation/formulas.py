"""Alpha-beta ring formulas (primer section 3) and a link-level prediction for the emulator.

Conventions: ``size_bytes`` S is the full, unsharded buffer (all-reduce: each rank holds S;
all-gather: output S; reduce-scatter: input S; all-to-all: each rank holds S/p). ``alpha_s`` is
the per-step latency in seconds, ``beta_s_per_byte`` the inverse per-rank bandwidth in s/byte.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _check(kind: str, p: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown collective {kind!r}; expected one of {KINDS}")
    if p < 1:
        raise ValueError(f"group size must be >= 1, got {p}")


def ring_steps(kind: str, p: int) -> int:
    """Latency steps of the ring algorithm: 2(p-1) for all-reduce, p-1 otherwise."""
    _check(kind, p)
    return 2 * (p - 1) if kind == "all_reduce" else p - 1


def ring_bytes_per_rank(kind: str, p: int, size_bytes: float) -> float:
    """Bytes each rank sends (and receives) in the ring algorithm."""
    _check(kind, p)
    if kind == "all_reduce":
        return 2 * (p - 1) / p * size_bytes
    if kind == "all_to_all":
        return (p - 1) / p * size_bytes / p
    return (p - 1) / p * size_bytes


def ring_time_s(kind: str, p: int, size_bytes: float, alpha_s: float,
                beta_s_per_byte: float) -> float:
    """Predicted time in seconds: steps * alpha + bytes per rank * beta."""
    return (ring_steps(kind, p) * alpha_s
            + ring_bytes_per_rank(kind, p, size_bytes) * beta_s_per_byte)


@dataclass(frozen=True)
class LevelParams:
    """Fitted alpha (s per step) and beta (s per byte) of one level (same-node or cross-node)."""

    alpha_s: float
    beta_s_per_byte: float

    @property
    def bandwidth_Bps(self) -> float:
        """Per-rank bandwidth in bytes/s (1 / beta)."""
        return 1.0 / self.beta_s_per_byte


def flows(kind: str, group: list[int], size_bytes: float) -> list[tuple[int, int, float]]:
    """Point-to-point flows (src rank, dst rank, bytes) of one collective on ``group``.

    Ring collectives send :func:`ring_bytes_per_rank` from each member to the next one in the
    (sorted) ring; all-to-all sends ``S / p**2`` bytes from every member to every other one.
    """
    ring = sorted(group)
    p = len(ring)
    if p < 2:
        return []
    if kind == "all_to_all":
        chunk = size_bytes / p / p
        return [(a, b, chunk) for a in ring for b in ring if a != b]
    per_rank = ring_bytes_per_rank(kind, p, size_bytes)
    return [(ring[i], ring[(i + 1) % p], per_rank) for i in range(p)]


def link_level_time_s(kind: str, groups: list[list[int]], size_bytes: float,
                      ranks_per_node: int, intra: LevelParams, inter: LevelParams) -> float:
    """Time of ``groups`` running ``kind`` at once on the emulated cluster, link by link.

    Links: each node's veth in each direction (bandwidth ``inter``) and each rank's local send
    path (bandwidth ``intra``, CPU-bound loopback). Time = max over links of bytes * beta plus
    the ring steps times the alpha of the slowest level any group crosses.
    """
    egress: dict[int, float] = {}
    ingress: dict[int, float] = {}
    local: dict[int, float] = {}
    crosses = False
    steps = 0
    for group in groups:
        steps = max(steps, ring_steps(kind, len(group)))
        for src, dst, nbytes in flows(kind, group, size_bytes):
            a, b = src // ranks_per_node, dst // ranks_per_node
            if a == b:
                local[src] = local.get(src, 0.0) + nbytes
            else:
                crosses = True
                egress[a] = egress.get(a, 0.0) + nbytes
                ingress[b] = ingress.get(b, 0.0) + nbytes
    network = max([*egress.values(), *ingress.values(), 0.0]) * inter.beta_s_per_byte
    loopback = max([*local.values(), 0.0]) * intra.beta_s_per_byte
    alpha = inter.alpha_s if crosses else intra.alpha_s
    return max(network, loopback) + steps * alpha
