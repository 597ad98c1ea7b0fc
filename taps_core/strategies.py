"""The strategy space: how each operator's letters are split over the two-level device mesh.

The mesh has an ``inter`` level (one coordinate per host, size = nodes) and an ``intra`` level
(GPUs inside a host). A strategy gives, per level, up to ``max_dims_per_level`` letters with a
split factor each. By default a level is either used whole (the factors multiply to the level
size) or left replicated, so e.g. 8 GPUs can be TP=4 x DP=2, TP=8 or DP=8, and 16 nodes can be
batch 16, or batch 4 x heads 4. Fixed letters are never split; every letter's total factor must
divide its size.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

from taps_core.graph import OpGraph, OpSpec

LEVELS = ("inter", "intra")

LevelSplit = tuple[tuple[str, int], ...]  # ((letter, factor), ...) in the op's letter order
Layout = tuple[tuple[int, ...], tuple[int, ...]]  # per level: factor per tensor position


@dataclass(frozen=True)
class Mesh:
    """Two-level device mesh: ``inter`` hosts x ``intra`` GPUs per host."""

    inter: int
    intra: int

    @property
    def devices(self) -> int:
        return self.inter * self.intra

    def size(self, level: str) -> int:
        return self.inter if level == "inter" else self.intra


@dataclass(frozen=True)
class SearchSpace:
    """Bounds of the strategy space (see the module docstring)."""

    max_dims_per_level: int = 2
    whole_levels: bool = True


@dataclass(frozen=True)
class Strategy:
    """One op's sharding: letter splits on the inter-node and intra-node levels."""

    inter: LevelSplit
    intra: LevelSplit

    def level(self, level: str) -> LevelSplit:
        return self.inter if level == "inter" else self.intra

    @cached_property
    def _factors(self) -> dict[tuple[str, str | None], int]:
        table: dict[tuple[str, str | None], int] = {}
        for lv in LEVELS:
            for ch, f in self.level(lv):
                table[(ch, lv)] = table.get((ch, lv), 1) * f
                table[(ch, None)] = table.get((ch, None), 1) * f
        return table

    def factor(self, letter: str, level: str | None = None) -> int:
        """Ways ``letter`` is split on one level, or on both when ``level`` is None."""
        return self._factors.get((letter, level), 1)

    def ways(self) -> int:
        """Number of distinct shards of the op's work (devices that do not duplicate)."""
        return math.prod(f for lv in LEVELS for _, f in self.level(lv))

    def layout(self, letters: str) -> Layout:
        """Per-level split factor of each position of a tensor indexed by ``letters``."""
        return (
            tuple(self.factor(ch, "inter") for ch in letters),
            tuple(self.factor(ch, "intra") for ch in letters),
        )

    def label(self) -> str:
        """Compact text, e.g. ``inter[b4] intra[n8]``; ``R`` is replicated."""

        def one(split: LevelSplit) -> str:
            return ",".join(f"{ch}{f}" for ch, f in split) or "R"

        return f"inter[{one(self.inter)}] intra[{one(self.intra)}]"


def _level_splits(size: int, letters: tuple[str, ...], space: SearchSpace) -> list[LevelSplit]:
    """Every split of one level of ``size`` devices over ``letters`` allowed by ``space``."""
    splits: list[LevelSplit] = [()]
    if size == 1:
        return splits
    divisors = [d for d in range(2, size + 1) if size % d == 0]
    for k in range(1, space.max_dims_per_level + 1):
        for chosen in itertools.combinations(letters, k):
            for factors in itertools.product(divisors, repeat=k):
                prod = math.prod(factors)
                if (prod == size) if space.whole_levels else (size % prod == 0):
                    splits.append(tuple(zip(chosen, factors)))
    return splits


MOE_KINDS = frozenset({"moe_dispatch", "moe_combine"})


def _splits(
    op: OpSpec, size: int, letters: tuple[str, ...], space: SearchSpace
) -> list[LevelSplit]:
    """Level splits of one op; a MoE dispatch/combine splits its token side and expert side
    independently (each whole or replicated), since the level's devices hold both."""
    if op.kind not in MOE_KINDS:
        return _level_splits(size, letters, space)
    src = tuple(ch for ch in letters if ch in op.input_letters[0])
    dst = tuple(ch for ch in letters if ch in op.output_letters and ch not in src)
    return [a + b for a in _level_splits(size, src, space) for b in _level_splits(size, dst, space)]


def op_strategies(graph: OpGraph, op: OpSpec, mesh: Mesh, space: SearchSpace) -> list[Strategy]:
    """All strategies of ``op`` in the space, in a deterministic order (replicated first)."""
    sizes = graph.dim_sizes(op)
    letters = tuple(ch for ch in op.letters if ch not in op.fixed and sizes[ch] > 1)
    out: list[Strategy] = []
    for inter in _splits(op, mesh.inter, letters, space):
        for intra in _splits(op, mesh.intra, letters, space):
            s = Strategy(inter, intra)
            if all(sizes[ch] % s.factor(ch) == 0 for ch in letters):
                out.append(s)
    return out
