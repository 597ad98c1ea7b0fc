"""What each op is (its role) and the rank grid the plan's splits place it on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from taps_core.errors import InvalidInputError
from taps_core.export.common import GPT_FAMILIES, NotExpressibleError
from taps_core.export.plan_json import OpSplit, PlanView, Stage, Workload

# ---- what each op is: roles, and the one letter a framework may split it on --------------------

_LAYER = re.compile(r"^L(\d+)\.(.+)$")
# op name (without the ``L{i}.`` prefix) -> role
_ROLE_OF = {
    name: r
    for r, names in (
        ("embed", "embed"),
        ("pos", "embed_pos"),
        ("norm", "ln1 ln2 ln_f"),
        ("add", "add1 add2"),
        ("qkv", "attn.q attn.k attn.v"),
        ("core", "attn.core"),
        ("out", "attn.o"),
        ("up", "mlp.up mlp.gate fc1"),  # fc1, gelu, fc2: the 2-layer MLP
        ("act", "mlp.gelu mlp.swiglu gelu"),
        ("down", "mlp.down fc2"),
        ("head", "lm_head"),
        ("loss", "loss"),
    )
    for name in names.split()
}
# role -> (the one letter a framework splits it on, how the framework splits it)
_ROLES = {
    "embed": ("v", "the token embedding only on the vocabulary (vocab-parallel)"),
    "pos": ("s", "the position embedding only on the sequence (sequence parallelism)"),
    "norm": ("s", "a norm only on the sequence (sequence parallelism)"),
    "add": ("s", "a residual add only on the sequence (sequence parallelism)"),
    "qkv": ("n", "Q, K and V only on heads (column-parallel)"),
    "core": ("n", "attention only on heads"),
    "out": ("n", "the attention output projection only on heads (row-parallel)"),
    "up": ("f", "an MLP up/gate projection only on FFN (column-parallel)"),
    "act": ("f", "the MLP activation only on FFN"),
    "down": ("f", "an MLP down projection only on FFN (row-parallel)"),
    "head": ("v", "the LM head only on the vocabulary (column-parallel)"),
    "loss": ("v", "the loss only on the vocabulary (vocab-parallel cross entropy)"),
}
TENSOR_ROLES = frozenset({"embed", "qkv", "core", "out", "up", "act", "down", "head"})
EDGE_ROLES = frozenset({"embed", "head"})  # Megatron splits them anyway: a note, not a refusal
SEQUENCE_ROLES = frozenset({"pos", "norm", "add"})


def role(name: str) -> str | None:
    """The op's role (``qkv``, ``down``, ``norm``, ...), or None for ops no framework names."""
    m = _LAYER.match(name)
    return _ROLE_OF.get(m.group(2) if m else name)


@dataclass(frozen=True)
class Grid:
    """How one group of GPUs (the cluster, or one pipeline stage) divides: batch x tensor ways.

    ``dp_*`` are the batch ways per level; the rest of each level is the tensor-parallel group.
    Ranks are numbered node-major (rank = node x GPUs per node + local GPU), tensor-parallel
    ranks innermost on each level.
    """

    nodes: int
    gpus_per_node: int
    dp_inter: int
    dp_intra: int
    split: dict[str, str | None] = field(default_factory=dict)  # op -> its split letter

    @property
    def tp_inter(self) -> int:
        return self.nodes // self.dp_inter

    @property
    def tp_intra(self) -> int:
        return self.gpus_per_node // self.dp_intra

    @property
    def dp(self) -> int:
        return self.dp_inter * self.dp_intra

    @property
    def tp(self) -> int:
        return self.tp_inter * self.tp_intra

    def ranks(self) -> list[list[int]]:
        """The dp x tp matrix of ranks (row = one data-parallel replica's tensor group)."""
        out = []
        for d in range(self.dp):
            dn, dl = divmod(d, self.dp_intra)
            row = []
            for t in range(self.tp):
                tn, tl = divmod(t, self.tp_intra)
                node = dn * self.tp_inter + tn
                row.append(node * self.gpus_per_node + dl * self.tp_intra + tl)
            out.append(row)
        return out


def grid(ops: list[OpSplit] | tuple[OpSplit, ...], nodes: int, gpus_per_node: int, fw: str) -> Grid:
    """The data x tensor grid of ``ops``, or NotExpressibleError naming the op that breaks it.

    Every op must split the batch the same ways; every other split must be one letter, the
    one its role allows, over the whole tensor-parallel group (or no split: replicated).
    """
    first = ops[0]
    for op in ops:
        if op.batch_ways() != first.batch_ways():
            raise NotExpressibleError(
                f"op {op.name} splits the batch {batch_ways(op.batch_ways())} but op {first.name} "
                f"{batch_ways(first.batch_ways())}: {fw} keeps one data-parallel size for every op"
            )
    g = Grid(nodes, gpus_per_node, *first.batch_ways())
    for level, size, used in (
        ("nodes", g.tp_inter, any(o.model_ways()[0] > 1 for o in ops)),
        ("GPUs of a node", g.tp_intra, any(o.model_ways()[1] > 1 for o in ops)),
    ):
        if size > 1 and not used:
            raise NotExpressibleError(
                f"no op splits anything but the batch over the {level}, so {size} of them "
                f"repeat each other's work: {fw} has no replicated copies (plan for "
                f"{'fewer nodes' if level == 'nodes' else 'fewer GPUs per node'} instead)"
            )
    for op in ops:
        letters = op.model_letters()
        if len(letters) > 1:
            raise NotExpressibleError(
                f"op {op.name} splits {' and '.join(op.words(ch) for ch in letters)} (a 2-D "
                f"split): {fw} splits an op on one dimension of its tensor-parallel group"
            )
        ways = op.model_ways()
        if letters and ways != (g.tp_inter, g.tp_intra):
            raise NotExpressibleError(
                f"op {op.name} splits {op.words(letters[0])}, not over all {g.tp} GPUs of its "
                f"tensor-parallel group: {fw} splits an op over the whole group or not at all"
            )
        r = role(op.name)
        if r is None:
            raise NotExpressibleError(
                f"op {op.name} ({op.kind or 'unknown kind'}) has no "
                f"counterpart in {fw}'s module plans"
            )
        if letters and letters[0] != _ROLES[r][0]:
            where = op.words(letters[0])
            raise NotExpressibleError(f"op {op.name} splits {where}: {fw} splits {_ROLES[r][1]}")
        g.split[op.name] = letters[0] if letters else None
    return g


def batch_ways(batch: tuple[int, int]) -> str:
    i, j = batch
    return (
        f"{i * j} ways ({i} across nodes x {j} inside)"
        if i > 1 and j > 1
        else (f"{i * j} way{'s' if i * j > 1 else ''}")
    )


def stage_groups(view: PlanView) -> list[tuple[Stage | None, list[OpSplit], int, int]]:
    """(stage, its ops, nodes, GPUs per node) per pipeline stage, or once for the whole plan."""
    if view.pipeline is None:
        return [(None, list(view.ops), view.nodes, view.gpus_per_node)]
    out = []
    for st in view.pipeline.stages:
        ops = [o for o in view.ops if o.stage == st.index]
        if not ops:
            raise InvalidInputError(
                f"pipeline.stages[{st.index}]", "no ops", "a stage that holds ops (ops[].stage)"
            )
        out.append((st, ops, st.nodes, st.gpus // st.nodes))
    return out


def uniform_grids(view: PlanView, fw: str) -> tuple[list[Grid], Grid]:
    """Grids per stage, all of the same shape (``fw`` has one TP/DP size), and the first."""
    grids = [grid(ops, n, g, fw) for _, ops, n, g in stage_groups(view)]
    for i, g in enumerate(grids[1:], start=1):
        if (g.tp, g.dp) != (grids[0].tp, grids[0].dp):
            raise NotExpressibleError(
                f"pipeline stage {i} runs tensor-parallel {g.tp} x data-parallel {g.dp}, stage 0 "
                f"{grids[0].tp} x {grids[0].dp}: {fw} uses one size of each for every stage"
            )
    return grids, grids[0]


def sequence_parallel(view: PlanView, grids: list[Grid], fw: str) -> bool:
    """True when every norm, add and position embedding is sequence-split; refuse a mix."""
    letter = {name: ch for g in grids for name, ch in g.split.items()}
    seq = [o for o in view.ops if role(o.name) in SEQUENCE_ROLES]
    split = [o for o in seq if letter.get(o.name) == "s"]
    if split and len(split) != len(seq):
        whole = next(o for o in seq if letter.get(o.name) != "s")
        raise NotExpressibleError(
            f"op {split[0].name} is sequence-split but op {whole.name} is not: {fw}'s sequence "
            "parallelism covers every norm and residual add or none"
        )
    return bool(split)


def check_family(wl: Workload, fw: str, families: tuple[str, ...] = GPT_FAMILIES) -> None:
    if wl.family not in families:
        raise NotExpressibleError(
            f"model family {wl.family}: this export covers {', '.join(families)} for {fw}"
        )


# ---- the result ----------------------------------------------------------------------------------


