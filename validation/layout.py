"""Where every element of every tensor lives when a plan runs, worked out for all ranks at once.

This is the symbolic half of the plan executor (:mod:`validation.executor` is the data half). It
needs no torch and no process group, so every rank computes the same answer for every rank and
the unit tests can check it directly.

Mesh and coordinates: rank ``r`` of an ``inter`` x ``intra`` mesh has inter coordinate
``r // intra`` (its node) and intra coordinate ``r % intra`` (its local rank). A strategy's level
split ``((c1, f1), (c2, f2))`` decomposes that level's coordinate mixed-radix with the *last*
letter fastest: ``idx(c2) = c % f2``, ``idx(c1) = (c // f2) % f1``; if the split uses fewer
devices than the level has, ``c // (f1 * f2)`` is a replica index. A letter split on both levels
owns block ``idx_inter * f_intra + idx_intra`` (inter-major) when a tensor is first sliced.

Index lists: rather than trusting a block convention, every local shard carries, per tensor
position, the list of global indices it holds (in local order). Slices, gathers and all-to-alls
update those lists; an op then checks that all its operands agree on every letter (a local
permutation fixes a different order, anything else is an error), and uses the real global
indices where an op depends on them (causal mask, positions, vocabulary ranges, data slices).
This keeps the executor correct for any resharding history, e.g. a gather across the node level
of a dimension also split inside the node, which leaves a strided (non-contiguous) shard.

Reshards follow ``costs.reshard.level_move`` level by level (inter, then intra), exactly
as the engine costs them: ``none``, ``slice`` (free), ``all_gather`` or ``all_to_all``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from taps_core.costs.ops import summed_letters

LEVELS = ("inter", "intra")

Lists = tuple[np.ndarray, ...]  # global indices held, one array per tensor position


class UnsupportedPlanError(ValueError):
    """The executor cannot run this strategy or reshard; the message says which op and why."""


@dataclass(frozen=True)
class MeshCoords:
    """Two-level mesh of ``inter`` nodes x ``intra`` ranks per node (rank r on node r // intra)."""

    inter: int
    intra: int

    @property
    def world(self) -> int:
        return self.inter * self.intra

    def coord(self, rank: int, level: str) -> int:
        return rank // self.intra if level == "inter" else rank % self.intra

    def size(self, level: str) -> int:
        return self.inter if level == "inter" else self.intra

    def level_of(self, members: tuple[int, ...]) -> str:
        """``intra`` (one node), ``inter`` (one rank per node, same local index) or ``mixed``."""
        nodes = {r // self.intra for r in members}
        local = {r % self.intra for r in members}
        if len(nodes) == 1:
            return "intra"
        if len(local) == 1:
            return "inter"
        return "mixed"


def level_split(strategy, level: str) -> tuple[tuple[str, int], ...]:
    return tuple(strategy.inter if level == "inter" else strategy.intra)


def subcoords(split: tuple[tuple[str, int], ...], size: int, c: int) -> tuple[dict[str, int], int]:
    """Letter -> index on one level for level coordinate ``c``, plus the replica index."""
    prod = math.prod(f for _, f in split) if split else 1
    if size % prod:
        raise UnsupportedPlanError(f"level split {split} does not divide the level size {size}")
    idx, replica = c % prod, c // prod
    out: dict[str, int] = {}
    for ch, f in reversed(split):
        out[ch] = idx % f
        idx //= f
    return out, replica


def rank_key(mesh: MeshCoords, strategy, rank: int, free: frozenset[str] | set[str],
             levels: tuple[str, ...] = LEVELS) -> tuple:
    """What rank ``rank`` shares with every member of its group that varies ``free`` letters.

    Only the given ``levels`` may vary; the other level's coordinate is part of the key.
    """
    key: list[object] = []
    for lv in LEVELS:
        c = mesh.coord(rank, lv)
        if lv not in levels:
            key.append((lv, "coord", c))
            continue
        subs, replica = subcoords(level_split(strategy, lv), mesh.size(lv), c)
        key.append((lv, "replica", replica))
        key.extend((lv, ch, i) for ch, i in sorted(subs.items()) if ch not in free)
    return tuple(key)


def group_of(mesh: MeshCoords, strategy, rank: int, free: frozenset[str] | set[str],
             levels: tuple[str, ...] = LEVELS) -> tuple[int, ...]:
    """Ranks (sorted) that differ from ``rank`` only in the sub-coordinates of ``free``."""
    mine = rank_key(mesh, strategy, rank, free, levels)
    return tuple(r for r in range(mesh.world) if rank_key(mesh, strategy, r, free, levels) == mine)


def letter_index(strategy, mesh: MeshCoords, rank: int, letter: str) -> tuple[int, int]:
    """(block index, number of blocks) of ``letter`` at ``rank``, inter-major."""
    fi, fa = strategy.factor(letter, "inter"), strategy.factor(letter, "intra")
    si = subcoords(level_split(strategy, "inter"), mesh.inter, mesh.coord(rank, "inter"))[0]
    sa = subcoords(level_split(strategy, "intra"), mesh.intra, mesh.coord(rank, "intra"))[0]
    return si.get(letter, 0) * fa + sa.get(letter, 0), fi * fa


def canonical(strategy, mesh: MeshCoords, rank: int, letter: str, size: int) -> np.ndarray:
    """Global indices of ``letter`` (dimension ``size``) a fresh slice gives ``rank``."""
    block, blocks = letter_index(strategy, mesh, rank, letter)
    if size % blocks:
        raise UnsupportedPlanError(f"letter {letter} of size {size} is not divisible by {blocks}")
    n = size // blocks
    return np.arange(block * n, (block + 1) * n)


# ---- reshard steps -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One level's move of one tensor at one rank.

    ``kind``: ``slice`` (keep chunk ``chunk`` of ``parts`` along ``dim``; its backward
    all-gathers over ``members``), ``all_gather`` (concatenate ``members``' shards along
    ``dim``), ``all_to_all`` (split along ``dim`` into ``len(members)`` chunks, chunk
    ``send_chunk[j]`` to member j, concatenate what arrives along ``cat_dim``).
    ``per_rank_bytes`` is what each rank sends in the forward direction (engine convention).
    """

    level: str
    kind: str
    dim: int
    members: tuple[int, ...]
    chunk: int = 0
    parts: int = 1
    cat_dim: int = -1
    send_chunk: tuple[int, ...] = ()
    per_rank_bytes: float = 0.0


@dataclass(frozen=True)
class Realign:
    """Gather dimension ``dim`` over ``members`` and keep positions ``take``; the backward
    gathers the members' gradients and keeps ``back`` (see :func:`_realign`)."""

    dim: int
    members: tuple[int, ...]
    take: np.ndarray
    back: np.ndarray
    per_rank_bytes: float


@dataclass
class TensorState:
    """Global index lists of one tensor at every rank (``lists[rank][position]``)."""

    lists: list[Lists]
    dtype_bytes: int

    def local_numel(self, rank: int) -> int:
        return math.prod(len(a) for a in self.lists[rank])

    def local_bytes(self, rank: int) -> int:
        return self.local_numel(rank) * self.dtype_bytes


def _moves(src: tuple[int, ...], dst: tuple[int, ...]) -> tuple[list[int], list[int]]:
    """Positions gathered (split -> whole) and sliced (whole -> split) on one level."""
    lost, gained = [], []
    for p, (a, b) in enumerate(zip(src, dst)):
        if a == b:
            continue
        if b == 1:
            lost.append(p)
        elif a == 1:
            gained.append(p)
        else:
            raise UnsupportedPlanError(
                f"position {p} changes split {a} -> {b} on one level (only split <-> whole)"
            )
    return lost, gained


def plan_reshard(mesh: MeshCoords, state: TensorState, src_strategy, src_letters: str,
                 dst_strategy, dst_letters: str) -> tuple[list[list[Step]], TensorState]:
    """Steps (per rank) turning ``state`` (laid out by ``src_strategy`` over ``src_letters``)
    into the layout ``dst_strategy`` wants for ``dst_letters``; and the resulting state.

    Levels are processed inter then intra. On each level the engine's
    :func:`taps_core.costs.reshard.level_move` classification is reproduced: slice, all-gather or
    all-to-all (an all-gather followed by a slice when the split counts differ).
    """
    from taps_core.costs.reshard import level_move

    src_layout = src_strategy.layout(src_letters)
    dst_layout = dst_strategy.layout(dst_letters)
    world = mesh.world
    steps: list[list[Step]] = [[] for _ in range(world)]
    lists = [list(state.lists[r]) for r in range(world)]
    for li, lv in enumerate(LEVELS):
        src, dst = src_layout[li], dst_layout[li]
        move = level_move(src, dst)
        if move.collective == "none":
            continue
        lost, gained = _moves(src, dst)
        if len(lost) > 1 or len(gained) > 1:
            raise UnsupportedPlanError(f"more than one position changes on level {lv}: "
                                       f"{src} -> {dst}")
        before = [list(x) for x in lists]
        nbytes = [math.prod(len(a) for a in before[r]) * state.dtype_bytes for r in range(world)]
        if move.collective == "all_to_all" and lost and gained and src[lost[0]] == dst[gained[0]]:
            ps, pd = lost[0], gained[0]
            ls, ld = src_letters[ps], dst_letters[pd]
            for r in range(world):
                members = group_of(mesh, src_strategy, r, {ls}, (lv,))
                q = len(members)
                if q != src[ps]:
                    raise UnsupportedPlanError(f"all-to-all group {members} is not {src[ps]}-way")
                send = tuple(
                    subcoords(level_split(dst_strategy, lv), mesh.size(lv),
                              mesh.coord(m, lv))[0][ld] for m in members)
                if sorted(send) != list(range(q)):
                    raise UnsupportedPlanError(f"all-to-all chunks {send} are not a permutation")
                if any(not np.array_equal(before[m][pd], before[r][pd]) for m in members):
                    raise UnsupportedPlanError("all-to-all members disagree on the split dim")
                mine = send[members.index(r)]
                chunks = np.array_split(before[r][pd], q)
                lists[r][pd] = chunks[mine]
                lists[r][ps] = np.concatenate([before[m][ps] for m in members])
                steps[r].append(Step(lv, "all_to_all", pd, members, cat_dim=ps, send_chunk=send,
                                     per_rank_bytes=(q - 1) / q * nbytes[r]))
            continue
        # all-gather the lost position (if any), then slice the gained one (if any)
        if lost:
            p = lost[0]
            letter = src_letters[p]
            for r in range(world):
                members = group_of(mesh, src_strategy, r, {letter}, (lv,))
                order = sorted(members, key=lambda m: subcoords(
                    level_split(src_strategy, lv), mesh.size(lv), mesh.coord(m, lv))[0][letter])
                q = len(order)
                lists[r][p] = np.concatenate([before[m][p] for m in order])
                steps[r].append(Step(lv, "all_gather", p, tuple(order),
                                     per_rank_bytes=(q - 1) * nbytes[r]))
        if gained:
            p = gained[0]
            letter = dst_letters[p]
            k = dst[p]
            mid = [list(x) for x in lists]
            for r in range(world):
                members = group_of(mesh, dst_strategy, r, {letter}, (lv,))
                split = level_split(dst_strategy, lv)

                def idx(m: int, split=split, letter=letter, lv=lv) -> int:
                    return subcoords(split, mesh.size(lv), mesh.coord(m, lv))[0][letter]

                order = tuple(sorted(members, key=idx))
                if len(order) != k or len(lists[r][p]) % k:
                    raise UnsupportedPlanError(f"cannot slice position {p} {k} ways")
                if any(not all(np.array_equal(a, b) for a, b in zip(mid[m], mid[r]))
                       for m in order):
                    raise UnsupportedPlanError(f"slice group {order} holds different data")
                chunk = idx(r)
                lists[r][p] = np.array_split(lists[r][p], k)[chunk]
                steps[r].append(Step(lv, "slice", p, order, chunk=chunk, parts=k))
    return steps, TensorState([tuple(x) for x in lists], state.dtype_bytes)


# ---- one op ------------------------------------------------------------------------------------


@dataclass
class OpLayout:
    """Everything one op needs at every rank: reshard steps and permutations of its activation
    inputs, index lists of every letter, and the groups of its collectives."""

    name: str
    steps: dict[int, list[list[Step]]] = field(default_factory=dict)  # input pos -> per rank
    perms: dict[int, list[tuple[np.ndarray | None, ...]]] = field(default_factory=dict)
    realign: dict[int, list[list[Realign]]] = field(default_factory=dict)  # pos -> [per rank]
    letters: list[dict[str, np.ndarray]] = field(default_factory=list)  # per rank
    copy_groups: dict[int, list[tuple[int, ...]]] = field(default_factory=dict)  # input pos
    contract_group: list[tuple[int, ...]] = field(default_factory=list)
    stat_group: list[tuple[int, ...]] = field(default_factory=list)
    output: TensorState | None = None


def split_letters(strategy) -> set[str]:
    return {ch for lv in LEVELS for ch, f in level_split(strategy, lv) if f > 1}


def plan_op(graph, op, strategy, mesh: MeshCoords, producer_states: dict[str, TensorState],
            producer_strategies: dict[str, object], train: bool = True) -> OpLayout:
    """Lay out one op (see :class:`OpLayout`); ``producer_states`` holds activation states."""
    world = mesh.world
    out = OpLayout(op.name)
    sizes = graph.dim_sizes(op)
    aligned: dict[int, TensorState] = {}
    for pos, tname in enumerate(op.inputs):
        producer = graph.producer.get(tname)
        if producer is None:
            continue
        pop = graph.op_by_name[producer]
        steps, st = plan_reshard(mesh, producer_states[tname], producer_strategies[producer],
                                 pop.output_letters, strategy, op.input_letters[pos])
        out.steps[pos] = steps
        aligned[pos] = st
    # index list of every letter: from the first activation that has it, else a fresh slice
    for r in range(world):
        chosen: dict[str, np.ndarray] = {}
        for pos, st in aligned.items():
            for i, ch in enumerate(op.input_letters[pos]):
                chosen.setdefault(ch, st.lists[r][i])
        for ch in op.letters:
            if ch not in chosen:
                full = sizes[ch]
                for letters, tname in zip(op.input_letters, op.inputs):
                    if ch in letters:  # a fixed letter may be longer in one tensor (positions)
                        full = max(full, graph.tensors[tname].shape[letters.index(ch)])
                chosen[ch] = (canonical(strategy, mesh, r, ch, full) if ch in sizes
                              and strategy.factor(ch) > 1 else np.arange(full))
        out.letters.append(chosen)
    for pos, st in aligned.items():
        st = _realign(op, pos, st, out, mesh)
        per_rank = []
        for r in range(world):
            perm: list[np.ndarray | None] = []
            for i, ch in enumerate(op.input_letters[pos]):
                have, want = st.lists[r][i], out.letters[r][ch]
                if np.array_equal(have, want):
                    perm.append(None)
                    continue
                where = {int(g): k for k, g in enumerate(have)}
                perm.append(np.array([where[int(g)] for g in want]))
            per_rank.append(tuple(perm))
        out.perms[pos] = per_rank
    split = split_letters(strategy)
    fixed = set(op.fixed)
    for pos, tname in enumerate(op.inputs):
        t = graph.tensors[tname]
        if not (train and t.requires_grad):
            continue
        absent = split & summed_letters(op, pos) - fixed  # the executor reduces in the op
        out.copy_groups[pos] = [group_of(mesh, strategy, r, absent) for r in range(world)]
    contracted = (set(op.contracted) - fixed) & split
    out.contract_group = [group_of(mesh, strategy, r, contracted) for r in range(world)]
    stats = set(op.stat_letters) & split
    out.stat_group = [group_of(mesh, strategy, r, stats) for r in range(world)]
    _check_partition(op, out, contracted, sizes)
    tensor = graph.tensors[op.output]
    out.output = TensorState([tuple(out.letters[r][ch] for ch in op.output_letters)
                              for r in range(world)], tensor.dtype_bytes)
    return out


def _realign(op, pos: int, st: TensorState, lay: OpLayout, mesh: MeshCoords) -> TensorState:
    """Give input ``pos`` the same indices as the op's other operands where it holds others.

    Two operands can reach an op with the same split factors but different pieces, when their
    histories split a dimension over both levels in different orders (e.g. intra then inter
    versus inter then intra). The engine sees no move there; the executor gathers that dimension
    over the ranks that hold its pieces and keeps what the op wants (recorded as ``realign``,
    communication the engine does not model). Returns the state after it.
    """
    world = mesh.world
    lists = [list(x) for x in st.lists]
    for i, ch in enumerate(op.input_letters[pos]):
        def same_set(r: int, i=i, ch=ch) -> bool:
            have, want = lists[r][i], lay.letters[r][ch]
            return len(have) == len(want) and np.array_equal(np.sort(have), np.sort(want))

        if all(same_set(r) for r in range(world)):
            continue
        steps = []
        for r in range(world):
            members = tuple(m for m in range(world) if all(
                np.array_equal(lists[m][k], lists[r][k]) for k in range(len(lists[r])) if k != i))
            gathered = np.concatenate([lists[m][i] for m in members])
            wanted = np.concatenate([lay.letters[m][ch] for m in members])
            take = _positions(gathered, lay.letters[r][ch])
            back = _positions(wanted, lists[r][i])
            if take is None or back is None:
                raise UnsupportedPlanError(f"op {op.name}: cannot realign letter {ch} of input "
                                           f"{op.inputs[pos]} over ranks {members}")
            nbytes = math.prod(len(a) for a in lists[r]) * st.dtype_bytes
            steps.append(Realign(i, members, take, back, (len(members) - 1) * nbytes))
        for r in range(world):
            lists[r][i] = lay.letters[r][ch]
        lay.realign.setdefault(pos, []).append(steps)
    return TensorState([tuple(x) for x in lists], st.dtype_bytes)


def _positions(pool: np.ndarray, wanted: np.ndarray) -> np.ndarray | None:
    """Index in ``pool`` of every element of ``wanted`` (first occurrence), None if missing."""
    where: dict[int, int] = {}
    for k, g in enumerate(pool.tolist()):
        where.setdefault(g, k)
    try:
        return np.array([where[g] for g in wanted.tolist()], dtype=np.int64)
    except KeyError:
        return None


def _check_partition(op, lay: OpLayout, contracted: set[str], sizes: dict[str, int]) -> None:
    """Members of a contracted group must hold disjoint blocks of the contracted letters that
    together cover them (with several contracted letters split, blocks of their product)."""
    letters = sorted(contracted)
    total = math.prod(sizes[ch] for ch in letters)
    for members in lay.contract_group:
        if len(members) == 1:
            continue
        seen: set[tuple[int, ...]] = set()
        count = 0
        for m in members:
            lists = [lay.letters[m][ch].tolist() for ch in letters]
            count += math.prod(len(x) for x in lists)
            seen.update(itertools.product(*lists))
        if count != total or len(seen) != total:
            bad = next((ch for ch in letters), "?")
            raise UnsupportedPlanError(
                f"op {op.name}: the contracted letter {bad} is not partitioned over "
                f"group {members}")


def replication(state: TensorState) -> list[int]:
    """How many ranks hold exactly the same shard as each rank."""
    keys = [tuple(tuple(a.tolist()) for a in lists) for lists in state.lists]
    return [keys.count(k) for k in keys]


def plan_graph(graph, strategies: dict[str, object], mesh: MeshCoords,
               train: bool = True) -> dict[str, OpLayout]:
    """:class:`OpLayout` of every op of ``graph`` under ``strategies``, in graph order."""
    states: dict[str, TensorState] = {}
    out: dict[str, OpLayout] = {}
    for op in graph.ops:
        lay = plan_op(graph, op, strategies[op.name], mesh, states, strategies, train)
        states[op.output] = lay.output
        out[op.name] = lay
    return out
