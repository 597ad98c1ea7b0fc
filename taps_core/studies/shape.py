"""A plan's structure in Megatron-LM's words (TP/PP/DP sizes, ZeRO, recomputation, hosts
repeating work), and a change between two plans said in those words."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from taps_core.plan.records import Plan


@dataclass(frozen=True)
class Shape:
    """A plan's structure as Megatron-LM practice names it, read off the ops carrying the most
    compute (TAPS picks a strategy per op; the sizes most compute runs at stand for the plan).

    ``tp`` ways a model dimension is split over all GPUs (tensor parallelism; ``tp_across`` of
    them across nodes); ``pp`` pipeline stages; ``dp`` batch ways over all GPUs (``dp_across``
    of them across nodes); ``copies`` nodes of a stage that compute the same thing (replicated
    work, 1 when none); ``zero`` the ZeRO stage most ops use; ``recompute`` recomputed layers
    out of ``layers``; ``microbatches`` per step; ``training`` whether gradients are synced;
    ``letters`` the planner's label of the dominant strategy; ``selective`` layers whose
    attention core alone is recomputed (selective recomputation).
    """

    tp: int
    tp_across: int
    pp: int
    dp: int
    dp_across: int
    copies: int
    zero: int
    recompute: int
    layers: int
    microbatches: int
    letters: str
    training: bool = True
    selective: int = 0

    def words(self) -> str:
        """``TP 2 x PP 1 x DP 8 (2 across nodes), ZeRO-2``; replicated work named."""
        tp = f"TP {self.tp}" + (f" ({self.tp_across} across nodes)" if self.tp_across > 1 else "")
        dp = f"DP {self.dp}" + (f" ({self.dp_across} across nodes)" if self.dp_across > 1 else "")
        parts = [f"{tp} x PP {self.pp} x {dp}"]
        if self.copies > 1:
            parts.append(f"replicated work: {self.copies} nodes compute the same")
        if self.zero:
            parts.append(f"ZeRO-{self.zero}")
        if self.recompute:
            parts.append(f"recompute {self.recompute} of {self.layers} layers")
        if self.selective:
            parts.append(f"selective recompute {self.selective} of {self.layers} layers")
        if self.microbatches > 1:
            parts.append(f"{self.microbatches} micro-batches")
        return ", ".join(parts)


def _ways(split: Sequence[tuple[str, int]], batch: bool) -> int:
    """Ways ``split`` divides the batch letter (``batch``) or every other letter."""
    return math.prod(f for ch, f in split if (ch == "b") == batch)


def plan_shape(plan: Plan) -> Shape:
    """The :class:`Shape` of ``plan`` (see there): the (TP, DP) sizes inside and across nodes
    that most of the compute (seconds per step) runs at."""
    weight: Counter[tuple[int, int, int, int]] = Counter()
    letters: dict[tuple[int, int, int, int], Counter[str]] = {}
    for op in plan.ops:
        s = op.strategy
        key = (_ways(s.intra, False), _ways(s.inter, False), _ways(s.intra, True),
               _ways(s.inter, True))  # (tp inside, tp across, dp inside, dp across)
        weight[key] += op.compute_s
        letters.setdefault(key, Counter())[s.label()] += op.compute_s
    key = weight.most_common(1)[0][0] if weight else (1, 1, 1, 1)
    tp_in, tp_across, dp_in, dp_across = key
    pi = plan.pipeline
    pp = len(pi.stages) if pi is not None else 1
    nodes = max(plan.nodes // pp, 1)  # nodes per stage
    zeros = Counter(op.zero for op in plan.ops)
    return Shape(
        tp=tp_in * tp_across,
        tp_across=tp_across,
        pp=pp,
        dp=dp_in * dp_across,
        dp_across=dp_across,
        copies=max(nodes // max(tp_across * dp_across, 1), 1),
        zero=max(zeros, key=lambda z: (zeros[z], z)) if zeros else 0,
        recompute=plan.recomputed_layers,
        layers=len({op.layer for op in plan.ops if op.layer is not None}),
        microbatches=pi.microbatches if pi is not None else plan.microbatches,
        letters=letters[key].most_common(1)[0][0] if key in letters else "",
        training=plan.mode == "train",
        selective=plan.selective_layers,
    )


def _who(slow: Shape) -> str:
    """Who repeats work in ``slow``: 'the second node would only duplicate' and the like."""
    if slow.copies == 2 and slow.pp == 1:
        return "the second node would only duplicate"
    if slow.pp > 1:
        return f"the {slow.copies} nodes of each stage duplicate"
    return f"{slow.copies - 1} of the {slow.copies} nodes only duplicate"


def shape_change_words(slow: Shape, fast: Shape) -> str:
    """What changes from the faster-network plan's structure ``fast`` to the slower-network
    plan's ``slow``, in Megatron-LM terms, the planner's letters beside (empty: no change).

    >>> a = Shape(2, 1, 1, 8, 2, 1, 2, 0, 12, 1, "inter[b2] intra[b4,n2]")
    >>> b = Shape(2, 1, 1, 4, 1, 2, 2, 0, 12, 1, "inter[R] intra[b4,n2]")
    >>> shape_change_words(b, a).split(" (planner")[0]
    'DP 2 -> 1 across nodes (8 -> 4 in all): the second node would only duplicate work, \
because at this bandwidth syncing gradients costs more than it saves'
    """
    clauses = []
    more_copies = slow.copies > fast.copies
    if slow.pp != fast.pp:
        text = f"PP {fast.pp} -> {slow.pp}: " + (
            "pipeline stages dropped" if slow.pp == 1
            else "fewer pipeline stages" if slow.pp < fast.pp
            else f"{slow.pp} pipeline stages, only the boundary activations cross nodes"
        )
        if more_copies and slow.dp_across == fast.dp_across:
            text += (
                f", so {_who(slow)} work (at this bandwidth sending activations between stages "
                "costs more than it saves)"
            )
        clauses.append(text)
    if slow.tp != fast.tp or slow.tp_across != fast.tp_across:
        where = (
            f" ({fast.tp_across} -> {slow.tp_across} across nodes)"
            if slow.tp_across != fast.tp_across else ""
        )
        clauses.append(f"TP {fast.tp} -> {slow.tp}{where}")
    if slow.dp_across != fast.dp_across:
        text = f"DP {fast.dp_across} -> {slow.dp_across} across nodes"
        if slow.dp != fast.dp:
            text += f" ({fast.dp} -> {slow.dp} in all)"
        if more_copies:
            cost = (
                "syncing gradients costs more than it saves" if slow.training
                else "exchanging activations costs more than it saves"
            )
            text += f": {_who(slow)} work, because at this bandwidth {cost}"
        clauses.append(text)
    elif slow.dp != fast.dp:
        clauses.append(f"DP {fast.dp} -> {slow.dp}")
    if slow.zero != fast.zero:
        clauses.append(f"ZeRO-{fast.zero} -> ZeRO-{slow.zero}")
    if slow.recompute != fast.recompute:
        clauses.append(f"recomputed layers {fast.recompute} -> {slow.recompute}")
    if slow.selective != fast.selective:
        clauses.append(f"selectively recomputed layers {fast.selective} -> {slow.selective}")
    if slow.microbatches != fast.microbatches:
        clauses.append(f"micro-batches {fast.microbatches} -> {slow.microbatches}")
    if not clauses:
        return ""
    letters = (
        f" (planner: {fast.letters} -> {slow.letters})" if fast.letters != slow.letters else ""
    )
    return "; ".join(clauses) + letters + "."
