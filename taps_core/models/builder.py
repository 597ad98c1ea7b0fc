"""A small accumulator of tensors and ops shared by every model family's graph builder."""

from __future__ import annotations

from taps_core.ir.graph import OpGraph, OpSpec, TensorSpec


class GraphBuilder:
    """Collects tensors and ops in order; one instance per graph build."""

    def __init__(self, dtype_bytes: int) -> None:
        self.dtype_bytes = dtype_bytes
        self.tensors: dict[str, TensorSpec] = {}
        self.ops: list[OpSpec] = []

    def param(self, name: str, shape: tuple[int, ...], *, tied_to: str = "") -> str:
        """Declare a weight (``tied_to`` names the weight whose storage it reuses)."""
        self.tensors[name] = TensorSpec(
            name, shape, self.dtype_bytes, is_param=True, tied=bool(tied_to), tied_to=tied_to
        )
        return name

    def data(self, name: str, shape: tuple[int, ...], *, dtype_bytes: int = 4) -> str:
        """Declare a graph input that needs no gradient (token ids, labels, pixels)."""
        self.tensors[name] = TensorSpec(name, shape, dtype_bytes, requires_grad=False)
        return name

    def op(
        self,
        name: str,
        kind: str,
        einsum: str,
        inputs: tuple[str, ...],
        out_shape: tuple[int, ...],
        layer: int | None,
        **extra: object,
    ) -> str:
        """Append an op whose output tensor shares the op's name; return that name."""
        self.tensors[name] = TensorSpec(name, out_shape, self.dtype_bytes)
        self.ops.append(OpSpec(name, kind, einsum, inputs, name, layer, **extra))  # type: ignore[arg-type]
        return name

    def graph(self, name: str, meta: dict[str, object]) -> OpGraph:
        return OpGraph(name, self.tensors, tuple(self.ops), meta=meta)
