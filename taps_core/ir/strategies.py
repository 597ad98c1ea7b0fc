"""The strategy space: how each operator's letters are split over the two-level device mesh.

The mesh has an ``inter`` level (one coordinate per host, size = nodes) and an ``intra`` level
(GPUs inside a host). A strategy gives, per level, up to ``max_dims_per_level`` letters with a
split factor each. By default a level is either used whole (the factors multiply to the level
size) or left replicated, so e.g. 8 GPUs can be TP=4 x DP=2, TP=8 or DP=8, and 16 nodes can be
batch 16, or batch 4 x heads 4. Fixed letters are never split; every letter's total factor must
divide its size, except ``padded`` letters (the vocabulary), which are padded up to the split.

An op whose contraction is split leaves partial sums. By default it all-reduces them itself; a
``defer`` strategy instead emits the partial sums and lets the consumer's conversion reduce
them, as a reduce-scatter when the consumer wants the output split that way (Megatron's
sequence parallelism) or an all-reduce otherwise.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

from taps_core.ir.graph import OpGraph, OpSpec

LEVELS = ("inter", "intra")

LevelSplit = tuple[tuple[str, int], ...]  # ((letter, factor), ...) in the op's letter order
# per level: split factor per tensor position, then (inter, intra) ways of pending partial sums
Layout = tuple[tuple[int, ...], tuple[int, ...], tuple[int, int]]
NO_PARTIAL = (1, 1)
DEFERRABLE_KINDS = frozenset({"matmul", "embedding", "conv"})


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
    """One op's sharding: letter splits on the inter-node and intra-node levels.

    ``defer`` (only with a split contraction) emits the output as partial sums, reduced by the
    consumer's conversion instead of an all-reduce inside the op.
    """

    inter: LevelSplit
    intra: LevelSplit
    defer: bool = False

    def level(self, level: str) -> LevelSplit:
        return self.inter if level == "inter" else self.intra

    def __post_init__(self) -> None:
        # the factor table and a memo of products, set once (plain attributes: the cost tables
        # read them millions of times, and a cached_property's lookup costs more than the read)
        table: dict[tuple[str, str | None], int] = {}
        for lv in LEVELS:
            for ch, f in self.level(lv):
                table[(ch, lv)] = table.get((ch, lv), 1) * f
                table[(ch, None)] = table.get((ch, None), 1) * f
        # not dataclass fields: out of eq, hash, repr and asdict
        object.__setattr__(self, "_factors", table)
        object.__setattr__(self, "_products", {})

    def factor(self, letter: str, level: str | None = None) -> int:
        """Ways ``letter`` is split on one level, or on both when ``level`` is None."""
        return self._factors.get((letter, level), 1)

    def split_ways(self, letters: str | frozenset[str], level: str | None = None) -> int:
        """Product of the factors of ``letters`` on one level (both when ``level`` is None):
        the shards a tensor indexed by them is cut into. Memoised per strategy (the cost
        tables ask the same few questions of every strategy many times)."""
        key = (letters, level)
        ways = self._products.get(key)
        if ways is None:
            ways = math.prod(self._factors.get((ch, level), 1) for ch in letters)
            self._products[key] = ways
        return ways

    def ways(self) -> int:
        """Number of distinct shards of the op's work (devices that do not duplicate)."""
        return math.prod(f for lv in LEVELS for _, f in self.level(lv))

    def layout(self, letters: str) -> Layout:
        """Per-level split factor of each position of a tensor indexed by ``letters``
        (memoised per strategy, like :meth:`split_ways`)."""
        found = self._products.get(("layout", letters))
        if found is None:
            found = self._products[("layout", letters)] = (
                tuple(self.factor(ch, "inter") for ch in letters),
                tuple(self.factor(ch, "intra") for ch in letters),
                NO_PARTIAL,
            )
        return found

    def partial(self, letters: frozenset[str] | set[str]) -> tuple[int, int]:
        """(inter, intra) ways the given (contracted) letters are split: the partial-sum group."""
        key = letters if isinstance(letters, frozenset) else frozenset(letters)
        return self.split_ways(key, "inter"), self.split_ways(key, "intra")

    def output_layout(self, op: OpSpec) -> Layout:
        """The layout ``op`` emits under this strategy (with pending partial sums if deferred)."""
        inter, intra, _ = self.layout(op.output_letters)
        if not self.defer:
            return inter, intra, NO_PARTIAL
        return inter, intra, self.partial(op.contracted - op.fixed)

    def label(self) -> str:
        """Compact text, e.g. ``inter[b4] intra[n8]``; ``R`` is replicated; ``+RS`` deferred."""

        def one(split: LevelSplit) -> str:
            return ",".join(f"{ch}{f}" for ch, f in split) or "R"

        tail = " partial" if self.defer else ""
        return f"inter[{one(self.inter)}] intra[{one(self.intra)}]{tail}"


@lru_cache(maxsize=4096)
def _level_splits(
    size: int, letters: tuple[str, ...], space: SearchSpace
) -> tuple[LevelSplit, ...]:
    """Every split of one level of ``size`` devices over ``letters`` allowed by ``space``
    (memoised: a pure function asked the same question for every op of a graph)."""
    splits: list[LevelSplit] = [()]
    if size == 1:
        return tuple(splits)
    divisors = [d for d in range(2, size + 1) if size % d == 0]
    for k in range(1, space.max_dims_per_level + 1):
        for chosen in itertools.combinations(letters, k):
            for factors in itertools.product(divisors, repeat=k):
                prod = math.prod(factors)
                if (prod == size) if space.whole_levels else (size % prod == 0):
                    splits.append(tuple(zip(chosen, factors)))
    return tuple(splits)


MOE_KINDS = frozenset({"moe_dispatch", "moe_combine"})


def _splits(
    op: OpSpec, size: int, letters: tuple[str, ...], space: SearchSpace
) -> list[LevelSplit]:
    """Level splits of one op; a MoE dispatch/combine splits its token side and expert side
    independently (each whole or replicated), since the level's devices hold both."""
    if op.kind not in MOE_KINDS:
        return list(_level_splits(size, letters, space))
    src = tuple(ch for ch in letters if ch in op.input_letters[0])
    dst = tuple(ch for ch in letters if ch in op.output_letters and ch not in src)
    return [a + b for a in _level_splits(size, src, space) for b in _level_splits(size, dst, space)]


def _fits(size: int, factor: int, padded: bool) -> bool:
    """A letter of ``size`` can be split ``factor`` ways (evenly, or padded up when allowed)."""
    return size % factor == 0 or (padded and factor <= size)


def op_strategies(graph: OpGraph, op: OpSpec, mesh: Mesh, space: SearchSpace) -> list[Strategy]:
    """All strategies of ``op`` in the space, in a deterministic order (replicated first).

    Strategies that split a contraction inside the host (and not across hosts) come with a
    ``defer`` twin (right after) when the op's output feeds another op: partial sums handed on
    over NVLink, as in Megatron's sequence parallelism.
    """
    sizes = graph.dim_sizes(op)
    letters = tuple(ch for ch in op.letters if ch not in op.fixed and sizes[ch] > 1)
    contracted = op.contracted - op.fixed
    deferrable = op.kind in DEFERRABLE_KINDS and bool(graph.consumers.get(op.output))
    out: list[Strategy] = []
    for inter in _splits(op, mesh.inter, letters, space):
        for intra in _splits(op, mesh.intra, letters, space):
            s = interned(inter, intra, False)
            if all(_fits(sizes[ch], s.factor(ch), ch in op.padded) for ch in letters):
                out.append(s)
                p_inter, p_intra = s.partial(contracted)
                if deferrable and p_inter == 1 and p_intra > 1:
                    out.append(interned(inter, intra, True))
    return out


@lru_cache(maxsize=65536)
def interned(inter: LevelSplit, intra: LevelSplit, defer: bool) -> Strategy:
    """One shared instance per distinct strategy, so its memoised factor products serve every
    op and every problem built with it (strategies are immutable values)."""
    return Strategy(inter, intra, defer)


def pad_factor(graph: OpGraph, op: OpSpec, s: Strategy, letters: str) -> float:
    """Padded size over true size of a tensor indexed by ``letters`` (1.0 when nothing pads)."""
    if not op.padded:
        return 1.0
    sizes = graph.dim_sizes(op)
    out = 1.0
    for ch in set(letters) & op.padded:
        f = s.factor(ch)
        out *= -(-sizes[ch] // f) * f / sizes[ch]
    return out


def grad_partial(op: OpSpec, pos: int, s: Strategy) -> tuple[int, int]:
    """(inter, intra) ways the gradient of input ``pos`` is a partial sum under ``s``."""
    absent = _absent(op, pos)
    return (1, 1) if absent is None else s.partial(absent)


def _absent(op: OpSpec, pos: int) -> frozenset[str] | None:
    """The letters input ``pos``'s gradient is summed over (None for a MoE reshuffle, whose
    gradient is never partial)."""
    if op.kind in MOE_KINDS:
        return None
    return frozenset(set(op.letters) - set(op.input_letters[pos]) - op.fixed)


def reader_layouts(op: OpSpec, pos: int, strats: list[Strategy]) -> tuple[list, list]:
    """(layout each strategy reads input ``pos`` in, layout of its gradient with partials)."""
    letters = op.input_letters[pos]
    absent = _absent(op, pos)
    wanted = [s.layout(letters) for s in strats]
    grads = [
        (w[0], w[1], (1, 1) if absent is None else s.partial(absent))
        for w, s in zip(wanted, strats)
    ]
    return wanted, grads
