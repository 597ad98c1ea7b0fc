"""Converting a tensor between layouts: slices, all-gathers, all-to-alls and partial-sum reductions.

A :data:`~taps_core.ir.strategies.Layout` gives, per mesh level, the split factor of each tensor
position and the ways partial sums are still pending. Converting ``src`` into ``dst`` (never
partial) runs level by level, inside the host first:

- pending partial sums over ``p`` devices are reduce-scattered when ``dst`` splits the tensor
  exactly ``p`` ways further on that level (Megatron's sequence parallelism), otherwise
  all-reduced before the move;
- then the split changes: nothing, a free local slice, an all-gather, or an all-to-all.

The inter-host step sees the destination's intra-host split. When GPUs of a host then hold
copies of the same data, each copy moves 1/copies of it across hosts and the host all-gathers
the result over NVLink (and an intra-host all-reduce before it shrinks to a reduce-scatter).

:func:`convert_phases` lists the phases of one conversion; :class:`Resharder` computes the
same costs as matrices over many layouts at once (what the search needs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from taps_core.costs.collectives import CommCost, Phase
from taps_core.ir.strategies import LEVELS, NO_PARTIAL, Layout

INTER, INTRA = LEVELS.index("inter"), LEVELS.index("intra")


@dataclass(frozen=True)
class LevelMove:
    """How one level's split of a tensor changes: collective, group size, bytes divisor."""

    collective: str  # none | slice | all_gather | all_to_all
    q: int
    divisor: int  # per-rank message = tensor bytes / (divisor * other level's kept split)


def level_move(src: tuple[int, ...], dst: tuple[int, ...]) -> LevelMove:
    """Classify the change of one level's per-position split factors from src to dst."""
    if src == dst:
        return LevelMove("none", 1, 1)
    if all(t % s == 0 for s, t in zip(src, dst)):
        return LevelMove("slice", 1, 1)
    ps, pt = math.prod(src), math.prod(dst)
    common = math.prod(math.gcd(s, t) for s, t in zip(src, dst))
    if all(s % t == 0 for s, t in zip(src, dst)):
        return LevelMove("all_gather", ps // pt, pt)
    if ps == pt:
        return LevelMove("all_to_all", ps // common, ps)
    # gather down to the common split, then slice locally
    return LevelMove("all_gather", ps // common, common)


@dataclass(frozen=True)
class Step:
    """One collective of a level's conversion; bytes per rank = frac * N / (divisor * other)."""

    collective: str
    q: int
    frac: float
    divisor: int

    @property
    def steps(self) -> int:
        return 2 * (self.q - 1) if self.collective == "all_reduce" else self.q - 1

    @property
    def pattern(self) -> str:
        return "pairs" if self.collective == "all_to_all" else "ring"


def level_steps(src: tuple[int, ...], partial: int, dst: tuple[int, ...]) -> tuple[Step, ...]:
    """The collectives one level runs to turn ``src`` (with ``partial`` pending) into ``dst``."""
    out: list[Step] = []
    ps = math.prod(src)
    if partial > 1:
        refines = all(t % s == 0 for s, t in zip(src, dst))
        if refines and math.prod(dst) == ps * partial:
            return (Step("reduce_scatter", partial, (partial - 1) / partial, ps),)
        out.append(Step("all_reduce", partial, 2 * (partial - 1) / partial, ps))
    move = level_move(src, dst)
    if move.collective == "all_gather":
        out.append(Step("all_gather", move.q, (move.q - 1) / move.q, move.divisor))
    elif move.collective == "all_to_all":
        out.append(Step("all_to_all", move.q, (move.q - 1) / move.q, move.divisor))
    return tuple(out)


def _others(src: Layout, dst: Layout, g: int, inter_busy: bool) -> tuple[int, int, int]:
    """(split of the other level during the intra step, during the inter step, copies)."""
    intra_other = math.prod(src[INTER]) if inter_busy else math.prod(dst[INTER])
    copies = g // math.prod(dst[INTRA]) if inter_busy else 1
    inter_other = g if copies > 1 else math.prod(dst[INTRA])
    return intra_other, inter_other, copies


def convert_phases(nbytes: float, src: Layout, dst: Layout, g: int) -> tuple[Phase, ...]:
    """Phases that turn a tensor of ``nbytes`` from ``src`` into ``dst`` on hosts of g GPUs."""
    p_inter, p_intra = src[2]
    inter_steps = level_steps(src[INTER], p_inter, dst[INTER])
    intra_steps = level_steps(src[INTRA], p_intra, dst[INTRA])
    intra_other, inter_other, copies = _others(src, dst, g, bool(inter_steps))
    if copies > 1:
        intra_steps = _shrink_all_reduce(intra_steps)
    phases = [
        Phase(st.collective, "intra", st.q, st.frac * nbytes / (st.divisor * intra_other), st.steps)
        for st in intra_steps
    ]
    phases += [
        Phase(st.collective, "inter", st.q, st.frac * nbytes / (st.divisor * inter_other), st.steps)
        for st in inter_steps
    ]
    if copies > 1:
        out = nbytes / (math.prod(dst[INTER]) * math.prod(dst[INTRA]))
        phases.append(Phase("all_gather", "intra", copies, (copies - 1) / copies * out, copies - 1))
    return tuple(phases)


def _shrink_all_reduce(steps: tuple[Step, ...]) -> tuple[Step, ...]:
    """An intra all-reduce followed by a sliced inter step becomes a reduce-scatter: the final
    all-gather over the host's copies completes it."""
    return tuple(
        Step("reduce_scatter", st.q, (st.q - 1) / st.q, st.divisor)
        if st.collective == "all_reduce"
        else st
        for st in steps
    )


def plain(layout: Layout) -> Layout:
    """The layout without pending partial sums."""
    return layout[0], layout[1], NO_PARTIAL


class Resharder:
    """Vectorised conversion costs for one comm model, with per-level tables cached.

    Each level's steps cost ``latency + coefficient * N / other`` (see :func:`convert_phases`),
    so a matrix over many layouts is a few table look-ups and broadcasts.
    """

    def __init__(self, comm: CommCost, gpus_per_node: int) -> None:
        self.comm = comm
        self.g = gpus_per_node
        self._level: dict[tuple, tuple[float, float, float, float, bool]] = {}
        self._copies: dict[int, tuple[float, float]] = {}
        self._affine: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def _cost(self, lv: str, steps: tuple[Step, ...]) -> tuple[float, float]:
        lat = coef = 0.0
        for st in steps:
            alpha, beta = self.comm.coefficients(lv, st.q, st.pattern)
            lat += st.steps * alpha
            coef += st.frac / st.divisor * beta
        return lat, coef

    def _entry(
        self, lv: int, a: tuple[int, ...], p: int, b: tuple[int, ...]
    ) -> tuple[float, float, float, float, bool]:
        """(latency, coefficient, same two with all-reduce shrunk, busy?) of one level step."""
        key = (lv, a, p, b)
        if key not in self._level:
            steps = level_steps(a, p, b)
            lat, coef = self._cost(LEVELS[lv], steps)
            lat2, coef2 = self._cost(LEVELS[lv], _shrink_all_reduce(steps))
            self._level[key] = (lat, coef, lat2, coef2, bool(steps))
        return self._level[key]

    def _gather_copies(self, c: int) -> tuple[float, float]:
        """(latency, seconds per output byte) of the all-gather over ``c`` copies in a host."""
        if c not in self._copies:
            if c <= 1:
                self._copies[c] = (0.0, 0.0)
            else:
                alpha, beta = self.comm.coefficients("intra", c, "ring")
                self._copies[c] = ((c - 1) * alpha, (c - 1) / c * beta)
        return self._copies[c]

    def _level_table(
        self, lv: int, src: list[Layout], dst: list[Layout]
    ) -> Callable[[int], np.ndarray]:
        """Channel ``c`` of :meth:`_entry` as a [len(src), len(dst)] matrix, one channel at a
        time (the table is built over the distinct per-level splits only)."""
        ua = sorted({(a[lv], a[2][lv]) for a in src})
        ub = sorted({b[lv] for b in dst})
        pa = {x: i for i, x in enumerate(ua)}
        pb = {x: i for i, x in enumerate(ub)}
        ia = np.array([pa[(a[lv], a[2][lv])] for a in src])[:, None]
        ib = np.array([pb[b[lv]] for b in dst])[None, :]
        ent = np.array([[self._entry(lv, a, p, b) for b in ub] for a, p in ua], dtype=float)
        return lambda c: ent[:, :, c][ia, ib]

    def convert(self, nbytes: float, src: list[Layout], dst: list[Layout]) -> np.ndarray:
        """Matrix [len(src), len(dst)] of seconds to convert (same as :func:`convert_phases`)."""
        latency, per_byte = self.affine(src, dst)
        return latency + per_byte * nbytes

    def affine(self, src: list[Layout], dst: list[Layout]) -> tuple[np.ndarray, np.ndarray]:
        """(latency s, seconds per tensor byte) matrices, each [len(src), len(dst)]: converting a
        tensor of N bytes costs ``latency + N * per_byte`` (every step's bytes are a fixed share
        of N). Cached per pair of layout lists, so tensors of any size (another micro-batch
        size) reuse them."""
        key = (tuple(src), tuple(dst))
        if key not in self._affine:
            self._affine[key] = self._affine_terms(src, dst)
        return self._affine[key]

    def _affine_terms(self, src: list[Layout], dst: list[Layout]) -> tuple[np.ndarray, np.ndarray]:
        inter, intra = (self._level_table(lv, src, dst) for lv in (INTER, INTRA))
        busy = inter(4) > 0
        src_inter = np.array([math.prod(a[INTER]) for a in src], dtype=float)[:, None]
        dst_inter = np.array([math.prod(b[INTER]) for b in dst], dtype=float)[None, :]
        dst_intra = np.array([math.prod(b[INTRA]) for b in dst], dtype=float)[None, :]
        copies = np.where(busy, self.g / dst_intra, 1.0)
        sliced = copies > 1
        intra_other = np.where(busy, src_inter, dst_inter)
        inter_other = np.where(sliced, float(self.g), dst_intra)
        intra_lat = np.where(sliced, intra(2), intra(0))
        intra_coef = np.where(sliced, intra(3), intra(1))
        cvals = np.unique(copies)  # the all-gather over a host's copies, per copy count
        gather = np.array([self._gather_copies(int(c)) for c in cvals])
        at = np.searchsorted(cvals, copies)
        gl, gb = gather[at, 0], gather[at, 1]
        latency = intra_lat + inter(0) + gl
        per_byte = intra_coef / intra_other + inter(1) / inter_other + gb / (dst_inter * dst_intra)
        return latency, per_byte
