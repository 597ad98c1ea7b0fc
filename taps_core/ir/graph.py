"""Operator-graph IR: tensors, einsum-style operators, and the graph that joins them.

Every operator is an einsum over named one-letter dimensions, e.g. a matmul with bias is
``"bsk,kn,n->bsn"``. Letters absent from the output are contracted (a split one leaves partial
sums); ``fixed`` letters are never split (head_dim, attention's key sequence, conv windows).
Ops carry the index of the transformer layer (or stage) they belong to, so repeated blocks can
be collapsed in views and memoised in search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from taps_core.errors import InvalidInputError

OP_KINDS = (
    "matmul",
    "attention",
    "softmax",
    "norm",
    "elementwise",
    "embedding",
    "loss",
    "moe_dispatch",
    "moe_combine",
    "conv",
    "pool",
)
# ops whose time is bound by memory traffic, not FLOPs
MEMORY_BOUND_KINDS = frozenset(
    {"softmax", "norm", "elementwise", "embedding", "loss", "moe_dispatch", "moe_combine", "pool"}
)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor: shape (elements per dim), bytes per element, and whether it is a parameter.

    ``tied`` parameters reuse another parameter's storage (``tied_to``, e.g. GPT-2's LM head
    reuses the token embedding): they are left out of parameter counts and memory, and their
    gradient is added into the owner's before the owner's single gradient sync.
    """

    name: str
    shape: tuple[int, ...]
    dtype_bytes: int = 2
    is_param: bool = False
    requires_grad: bool = True
    tied: bool = False
    tied_to: str = ""

    @cached_property
    def numel(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def nbytes(self) -> int:
        return self.numel * self.dtype_bytes


@dataclass(frozen=True)
class OpSpec:
    """One operator: einsum over its input tensors, producing ``output``.

    ``tp_role`` marks Megatron's matmul roles ('column' splits the output features, 'row' the
    contraction) for the Megatron-style baseline; the search itself ignores it.
    ``stat_letters`` are output letters over which the op reduces statistics (a norm's hidden
    dim): splitting them costs a small all-reduce of those statistics.

    What training keeps for backward (Korthikanti et al. 2022): ``saves_inputs`` (False for a
    residual add, whose backward needs no input), ``mask_bytes`` per output element (a dropout
    mask, 1 byte) and ``score_bytes`` per attention-score element b·n·s·t (softmax output,
    dropout mask and dropout output: 2 + 1 + 2 bytes; 0 with flash attention).
    ``padded`` letters may be split unevenly: the size is padded up to the split (Megatron pads
    the vocabulary), and compute and memory count the padded size.
    """

    name: str
    kind: str
    einsum: str
    inputs: tuple[str, ...]
    output: str
    layer: int | None = None
    fixed: frozenset[str] = frozenset()
    stat_letters: frozenset[str] = frozenset()
    tp_role: str | None = None
    flops_factor: float = 2.0
    fwd_flops: float | None = None  # set when the einsum product is not the FLOP count (conv)
    saves_inputs: bool = True
    mask_bytes: float = 0.0
    score_bytes: float = 0.0
    padded: frozenset[str] = frozenset()

    @cached_property
    def input_letters(self) -> tuple[str, ...]:
        return tuple(self.einsum.split("->")[0].split(","))

    @cached_property
    def output_letters(self) -> str:
        return self.einsum.split("->")[1]

    @cached_property
    def letters(self) -> tuple[str, ...]:
        """All letters in first-seen order."""
        seen: dict[str, None] = {}
        for part in (*self.input_letters, self.output_letters):
            for ch in part:
                seen.setdefault(ch, None)
        return tuple(seen)

    @cached_property
    def contracted(self) -> frozenset[str]:
        """Letters summed over (in some input, not in the output)."""
        return frozenset(self.letters) - frozenset(self.output_letters)


class GraphContent:
    """What a graph's costs depend on (its ops, tensors and batch letter, not its name), as a
    key: hashed once, compared by value, so equal graphs built twice (a sweep's jobs each
    unpickle theirs) share what was computed for either."""

    __slots__ = ("_hash", "key")

    def __init__(self, key: tuple) -> None:
        self.key = key
        self._hash = hash(key)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        # hashed again where it is unpickled: string hashes differ between processes
        return (GraphContent, (self.key,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GraphContent) and (
            self is other or (self._hash == other._hash and self.key == other.key)
        )


@dataclass(frozen=True)
class OpGraph:
    """A model as operators over tensors, in topological order; ``batch_letter`` names DP's dim."""

    name: str
    tensors: dict[str, TensorSpec]
    ops: tuple[OpSpec, ...]
    batch_letter: str = "b"
    meta: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_graph(self)

    def __hash__(self) -> int:
        return hash((self.name, self.ops))

    @cached_property
    def content(self) -> GraphContent:
        """This graph's :class:`GraphContent` (computed once)."""
        return GraphContent((self.ops, tuple(sorted(self.tensors.items())), self.batch_letter))

    @cached_property
    def op_by_name(self) -> dict[str, OpSpec]:
        return {op.name: op for op in self.ops}

    @cached_property
    def producer(self) -> dict[str, str]:
        """Tensor name -> name of the op that outputs it."""
        return {op.output: op.name for op in self.ops}

    @cached_property
    def consumers(self) -> dict[str, tuple[str, ...]]:
        """Tensor name -> names of the ops that read it, in graph order."""
        found: dict[str, list[str]] = {}
        for op in self.ops:
            for t in dict.fromkeys(op.inputs):
                found.setdefault(t, []).append(op.name)
        return {k: tuple(v) for k, v in found.items()}

    def tied_owner(self, tensor: str, reader: str) -> str | None:
        """The op holding the weight a tied ``tensor`` reuses (another reader of its
        ``tied_to``, e.g. the embedding for GPT-2's LM head), as seen by op ``reader``; None
        when no other op reads it."""
        tied_to = self.tensors[tensor].tied_to
        return next((o for o in self.consumers.get(tied_to, ()) if o != reader), None)

    @cached_property
    def digraph(self) -> nx.DiGraph:
        """networkx view: op nodes (attr ``op``), edges producer -> consumer (attr ``tensor``)."""
        g = nx.DiGraph()
        for op in self.ops:
            g.add_node(op.name, op=op)
        for op in self.ops:
            for t in op.inputs:
                if t in self.producer:
                    g.add_edge(self.producer[t], op.name, tensor=t)
        return g

    @cached_property
    def _per_op(self) -> dict[tuple[str, str], object]:
        """Memo of the per-op questions below (asked once per strategy by the cost tables)."""
        return {}

    def dim_sizes(self, op: OpSpec) -> dict[str, int]:
        """Letter -> size for one op; a letter's size is the smallest over the tensors using it.
        Computed once per op (the dict is shared: read it, do not change it)."""
        key = ("sizes", op.name)
        if key not in self._per_op:
            self._per_op[key] = self._dim_sizes(op)
        return self._per_op[key]  # type: ignore[return-value]

    def _dim_sizes(self, op: OpSpec) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for letters, tname in zip((*op.input_letters, op.output_letters), (*op.inputs, op.output)):
            for ch, n in zip(letters, self.tensors[tname].shape):
                sizes[ch] = min(sizes.get(ch, n), n)
        return sizes

    def flops(self, op: OpSpec) -> float:
        """Forward FLOPs of one op (matmul-like: factor x product of every letter's size),
        computed once per op."""
        key = ("flops", op.name)
        if key not in self._per_op:
            self._per_op[key] = self._flops(op)
        return self._per_op[key]  # type: ignore[return-value]

    def _flops(self, op: OpSpec) -> float:
        if op.fwd_flops is not None:
            return op.fwd_flops
        if op.kind in MEMORY_BOUND_KINDS:
            return float(self.tensors[op.output].numel)
        full: dict[str, int] = {}
        for letters, tname in zip((*op.input_letters, op.output_letters), (*op.inputs, op.output)):
            for ch, n in zip(letters, self.tensors[tname].shape):
                full[ch] = max(full.get(ch, n), n)
        return op.flops_factor * math.prod(full.values())

    @cached_property
    def siblings(self) -> dict[str, tuple[str, ...]]:
        """Op name -> its sibling group (leader first): matmuls of one layer that read the same
        activation with the same einsum (Q, K, V; gate, up), as a fused projection does.

        Siblings share one strategy in the search, so the shared input is resharded once, kept
        once for backward, and its gradient is summed locally before a single reduction.
        """
        groups: dict[tuple, list[str]] = {}
        for op in self.ops:
            if op.kind not in ("matmul", "conv"):
                continue
            acts = [
                (pos, t)
                for pos, t in enumerate(op.inputs)
                if not self.tensors[t].is_param and t in self.producer
            ]
            if len(acts) != 1:
                continue
            pos, t = acts[0]
            key = (t, op.einsum, op.kind, op.layer, pos)
            groups.setdefault(key, []).append(op.name)
        out: dict[str, tuple[str, ...]] = {}
        for names in groups.values():
            for n in names:
                out[n] = tuple(names)
        return out

    def savers(self, tensor: str) -> int:
        """How many distinct readers keep ``tensor`` for backward (a sibling group counts once)."""
        seen: set[str] = set()
        for name in self.consumers.get(tensor, ()):
            op = self.op_by_name[name]
            if op.saves_inputs:
                seen.add(self.siblings.get(name, (name,))[0])
        return max(1, len(seen))

    @cached_property
    def signatures(self) -> dict[str, tuple]:
        """Op name -> everything that determines the op's strategies and costs (not its name
        or layer index): ops with equal signatures are costed once. Of a sibling group only
        the leader differs (it keeps the shared input, :func:`taps_core.costs.ops.op_cost`):
        K and V of one attention share their tables. Computed once per graph."""
        return {op.name: self._signature(op) for op in self.ops}

    def _signature(self, op: OpSpec) -> tuple:
        specs = tuple(
            (t.shape, t.dtype_bytes, t.is_param, t.tied, t.requires_grad)
            for t in (self.tensors[n] for n in (*op.inputs, op.output))
        )
        readers = tuple(self.savers(n) for n in op.inputs)  # activation sharing
        inside = tuple(
            self.producer.get(n) is not None
            and self.op_by_name[self.producer[n]].layer == op.layer
            for n in op.inputs
        )
        group = self.siblings.get(op.name, (op.name,))
        return (
            op.kind, op.einsum, specs, readers, inside, op.layer is None,
            group[0] == op.name, len(group), op.fixed, op.stat_letters, op.tp_role,
            op.flops_factor, op.fwd_flops, op.saves_inputs, op.mask_bytes, op.score_bytes,
            op.padded, bool(self.consumers.get(op.output)),
        )

    @property
    def num_parameters(self) -> int:
        """Parameters held (tied copies counted once)."""
        return sum(t.numel for t in self.tensors.values() if t.is_param and not t.tied)

    @cached_property
    def num_layers(self) -> int:
        return len({op.layer for op in self.ops if op.layer is not None})


def check_graph(graph: OpGraph) -> None:
    """Raise InvalidInputError if einsums, shapes or wiring are inconsistent."""
    produced: set[str] = set()
    for op in graph.ops:
        if op.kind not in OP_KINDS:
            raise InvalidInputError(f"op {op.name}.kind", op.kind, f"one of {OP_KINDS}")
        if len(op.input_letters) != len(op.inputs):
            raise InvalidInputError(f"op {op.name}.einsum", op.einsum, "one term per input")
        for letters, tname in zip((*op.input_letters, op.output_letters), (*op.inputs, op.output)):
            if tname not in graph.tensors:
                raise InvalidInputError(f"op {op.name} tensor", tname, "a declared tensor")
            shape = graph.tensors[tname].shape
            if len(letters) != len(shape):
                raise InvalidInputError(
                    f"op {op.name} term for {tname}",
                    letters,
                    f"{len(shape)} letters for shape {shape}",
                )
        for tname in op.inputs:
            t = graph.tensors[tname]
            if not t.is_param and tname in graph.producer and tname not in produced:
                raise InvalidInputError(f"op {op.name} input", tname, "produced by an earlier op")
        if op.output in produced:
            raise InvalidInputError(f"op {op.name}.output", op.output, "produced by one op only")
        produced.add(op.output)
