"""Run a taps_core plan as SPMD PyTorch: one process per mesh rank, local shards, autograd.

Every rank holds the shard of every tensor that the op strategy's layout gives it (index lists
from :mod:`validation.layout`). Per op, in graph order:

1. each activation input is resharded from its producer's layout to this op's, level by level,
   with autograd-aware slice / all-gather / all-to-all (their backward is the reverse move, which
   is what the engine charges as ``reshard grad``); parameters and data are sliced locally;
2. each input that needs a gradient and is replicated over devices that split other letters of
   the op passes an identity whose backward all-reduces over those devices: the engine's
   ``grad <tensor>`` (activations) and ``grad_sync`` (parameters: the data-parallel sync);
3. the op runs on local shards: ``torch.einsum`` for matmuls (a bias is added after the
   reduction of a split contraction, on every rank, as Megatron-LM does), tanh GELU /
   residual add, layer norm with an all-reduce of the row statistics when the normalised
   letter is split, causal attention with softmax, embedding lookup over a vocabulary
   range, positional add, cross-entropy over a split vocabulary;
4. a split contraction leaves a partial sum, all-reduced over its group (backward: identity).

The convention that makes this correct: a tensor replicated over some ranks has, on each of
them, the full gradient of its shard; partial contributions are summed exactly where step 2
says. Supported op kinds: matmul, elementwise (GELU, add, SwiGLU), norm, attention, embedding,
loss; ``UnsupportedPlanError`` names anything else.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from validation.comm import Comm
from validation.layout import MeshCoords, OpLayout, UnsupportedPlanError, plan_graph, replication
from validation.reference import LN_EPS, tie_target

SUPPORTED_KINDS = ("matmul", "elementwise", "norm", "attention", "embedding", "loss")
ATTENTION_EINSUM = "bsnd,btnd,btnd->bsnd"


def _functions():
    """The autograd functions (built lazily so this module imports without torch)."""
    import torch

    class Reduce(torch.autograd.Function):
        """All-reduce forward (partial sums -> full), identity backward."""

        @staticmethod
        def forward(ctx, x, comm, members, tag):
            return comm.all_reduce(x, members, tag)

        @staticmethod
        def backward(ctx, g):
            return g, None, None, None

    class Copy(torch.autograd.Function):
        """Identity forward, all-reduce of the gradient backward."""

        @staticmethod
        def forward(ctx, x, comm, members, tag):
            ctx.args = (comm, members, tag)
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            comm, members, tag = ctx.args
            return comm.all_reduce(g.contiguous(), members, tag), None, None, None

    class ReduceBoth(torch.autograd.Function):
        """All-reduce forward and backward (statistics used by every rank's shard)."""

        @staticmethod
        def forward(ctx, x, comm, members, tag, tag_bwd):
            ctx.args = (comm, members, tag_bwd)
            return comm.all_reduce(x, members, tag)

        @staticmethod
        def backward(ctx, g):
            comm, members, tag = ctx.args
            return comm.all_reduce(g.contiguous(), members, tag), None, None, None, None

    class Gather(torch.autograd.Function):
        """All-gather along ``dim`` forward; backward keeps this rank's chunk (no traffic)."""

        @staticmethod
        def forward(ctx, x, comm, members, dim, tag):
            ctx.args = (members.index(comm.rank), x.shape[dim], dim)
            return comm.all_gather(x, members, dim, tag)

        @staticmethod
        def backward(ctx, g):
            i, n, dim = ctx.args
            return g.narrow(dim, i * n, n), None, None, None, None

    class Slice(torch.autograd.Function):
        """Keep chunk ``chunk`` of ``parts`` along ``dim``; backward all-gathers the gradient
        over ``members`` (ordered by chunk), as the engine's reverse reshard does."""

        @staticmethod
        def forward(ctx, x, comm, members, dim, chunk, parts, tag_bwd):
            ctx.args = (comm, members, dim, tag_bwd)
            n = x.shape[dim] // parts
            return x.narrow(dim, chunk * n, n).contiguous()

        @staticmethod
        def backward(ctx, g):
            comm, members, dim, tag = ctx.args
            return comm.all_gather(g.contiguous(), members, dim, tag), *([None] * 6)

    class AllToAll(torch.autograd.Function):
        """All-to-all forward; the inverse all-to-all backward."""

        @staticmethod
        def forward(ctx, x, comm, members, dim, cat_dim, send, tag, tag_bwd):
            q = len(members)
            ctx.args = (comm, members, dim, cat_dim, send, tag_bwd)
            return comm.all_to_all(x, members, dim, cat_dim, send, tuple(range(q)), tag)

        @staticmethod
        def backward(ctx, g):
            comm, members, dim, cat_dim, send, tag = ctx.args
            q = len(members)
            order = tuple(sorted(range(q), key=lambda j: send[j]))
            back = comm.all_to_all(g.contiguous(), members, cat_dim, dim, tuple(range(q)),
                                   order, tag)
            return back, *([None] * 7)

    class Realign(torch.autograd.Function):
        """All-gather along ``dim`` and keep ``take``; backward all-gathers the gradients and
        keeps ``back`` (see :func:`validation.layout._realign`)."""

        @staticmethod
        def forward(ctx, x, comm, step, tag, tag_bwd):
            ctx.args = (comm, step, tag_bwd)
            full = comm.all_gather(x, step.members, step.dim, tag)
            return full.index_select(step.dim, torch.as_tensor(step.take))

        @staticmethod
        def backward(ctx, g):
            comm, step, tag = ctx.args
            full = comm.all_gather(g.contiguous(), step.members, step.dim, tag)
            return full.index_select(step.dim, torch.as_tensor(step.back)), None, None, None, None

    return Reduce, Copy, ReduceBoth, Gather, Slice, AllToAll, Realign


def _index(full, lists):
    """``full[np.ix_(*lists)]`` for a torch tensor."""
    import torch

    return full[tuple(torch.as_tensor(ix) for ix in np.ix_(*lists))]


def _lookup(global_ids: np.ndarray, size: int):
    """Tensor mapping a global index to its local position, or -1 when not held here."""
    import torch

    pos = torch.full((size,), -1, dtype=torch.long)
    pos[torch.as_tensor(global_ids)] = torch.arange(len(global_ids))
    return pos


def check_supported(graph) -> None:
    """Raise :class:`UnsupportedPlanError` for a graph with an op this executor cannot run."""
    for op in graph.ops:
        if op.kind not in SUPPORTED_KINDS:
            raise UnsupportedPlanError(f"op {op.name}: kind {op.kind} is not executable")
        if op.kind == "attention" and op.einsum != ATTENTION_EINSUM:
            raise UnsupportedPlanError(f"op {op.name}: attention einsum {op.einsum}")
        if op.kind == "elementwise" and len(op.inputs) == 2 and "swiglu" not in op.name \
                and ".add" not in op.name:
            raise UnsupportedPlanError(f"op {op.name}: unknown two-input elementwise op")
        if op.kind == "embedding" and len(op.inputs) != 2:
            raise UnsupportedPlanError(f"op {op.name}: embedding with {len(op.inputs)} inputs")
        if op.kind == "embedding" and graph.tensors[op.inputs[0]].is_param:
            raise UnsupportedPlanError(f"op {op.name}: embedding of a parameter")


class PlanExecutor:
    """One rank's view of a plan: parameter shards (autograd leaves) and a train step."""

    def __init__(self, graph, strategies: dict[str, Any], mesh: MeshCoords, comm: Comm,
                 params: dict[str, Any], data: dict[str, Any],
                 layouts: dict[str, OpLayout] | None = None) -> None:
        check_supported(graph)
        self.graph, self.strategies, self.mesh, self.comm = graph, strategies, mesh, comm
        self.rank = comm.rank
        self.layouts = layouts or plan_graph(graph, strategies, mesh)
        self.fn = _functions()
        self.data = data
        groups: set[tuple[int, ...]] = set()
        for lay in self.layouts.values():
            for per_rank in lay.steps.values():
                groups.update(st.members for steps in per_rank for st in steps)
            for per_rank in lay.copy_groups.values():
                groups.update(per_rank)
            for per_pos in lay.realign.values():
                groups.update(st.members for per_rank in per_pos for st in per_rank)
            groups.update(lay.contract_group)
            groups.update(lay.stat_group)
        comm.create_groups(groups)
        # one autograd leaf per (parameter, op that reads it): its local shard
        self.leaves: dict[tuple[str, str], Any] = {}
        self.leaf_lists: dict[tuple[str, str], tuple[np.ndarray, ...]] = {}
        for op in graph.ops:
            letters = self.layouts[op.name].letters[self.rank]
            for pos, tname in enumerate(op.inputs):
                if not graph.tensors[tname].is_param:
                    continue
                lists = tuple(letters[ch] for ch in op.input_letters[pos])
                self.leaves[(tname, op.name)] = (
                    _index(params[tname], lists).clone().requires_grad_(True))
                self.leaf_lists[(tname, op.name)] = lists
        last = graph.ops[-1]
        self.output_replication = replication(self.layouts[last.name].output)[self.rank]

    # ---- inputs ----------------------------------------------------------------------------

    def _reshard(self, x, op, pos: int, tname: str):
        Gather, Slice, AllToAll = self.fn[3], self.fn[4], self.fn[5]
        lay = self.layouts[op.name]
        fwd, bwd = (op.name, f"reshard {tname}"), (op.name, f"reshard grad {tname}")
        for st in lay.steps[pos][self.rank]:
            if st.kind == "slice":
                x = Slice.apply(x, self.comm, st.members, st.dim, st.chunk, st.parts, bwd)
            elif st.kind == "all_gather":
                x = Gather.apply(x, self.comm, st.members, st.dim, fwd)
            else:
                x = AllToAll.apply(x, self.comm, st.members, st.dim, st.cat_dim, st.send_chunk,
                                   fwd, bwd)
        for per_rank in lay.realign.get(pos, []):
            x = self.fn[6].apply(x, self.comm, per_rank[self.rank],
                                 (op.name, f"realign {tname}"),
                                 (op.name, f"realign grad {tname}"))
        for dim, perm in enumerate(lay.perms[pos][self.rank]):
            if perm is not None:
                import torch

                x = x.index_select(dim, torch.as_tensor(perm))
        return x

    def _inputs(self, op, values: dict[str, Any]) -> list:
        Copy = self.fn[1]
        lay = self.layouts[op.name]
        letters = lay.letters[self.rank]
        out = []
        for pos, tname in enumerate(op.inputs):
            t = self.graph.tensors[tname]
            if tname in self.graph.producer:
                x = self._reshard(values[tname], op, pos, tname)
            elif t.is_param:
                x = self.leaves[(tname, op.name)]
            else:
                x = _index(self.data[tname], [letters[ch] for ch in op.input_letters[pos]])
            if pos in lay.copy_groups:
                members = lay.copy_groups[pos][self.rank]
                if len(members) > 1:
                    label = "grad_sync" if t.is_param else f"grad {tname}"
                    x = Copy.apply(x, self.comm, members, (op.name, label))
            out.append(x)
        return out

    # ---- ops -------------------------------------------------------------------------------

    def _run_op(self, op, xs: list):
        import torch
        import torch.nn.functional as F  # noqa: N812

        Reduce, ReduceBoth = self.fn[0], self.fn[2]
        lay = self.layouts[op.name]
        letters = lay.letters[self.rank]
        contract = lay.contract_group[self.rank]
        terms, out_l = op.input_letters, op.output_letters
        bias = None
        if op.kind == "matmul":
            y = torch.einsum(f"{terms[0]},{terms[1]}->{out_l}", xs[0], xs[1])
            if len(xs) == 3:
                bl = terms[2]
                ordered = "".join(ch for ch in out_l if ch in bl)
                b = torch.einsum(f"{bl}->{ordered}", xs[2]) if ordered != bl else xs[2]
                shape = [b.shape[ordered.index(ch)] if ch in bl else 1 for ch in out_l]
                bias = b.reshape(shape)  # added after the reduction, on every rank
        elif op.kind == "elementwise":
            if len(xs) == 1:
                y = F.gelu(xs[0], approximate="tanh")
            elif "swiglu" in op.name:
                y = F.silu(xs[0]) * xs[1]
            else:
                y = xs[0] + xs[1]
        elif op.kind == "norm":
            y = self._norm(op, xs, lay, ReduceBoth)
        elif op.kind == "attention":
            q, k, v = xs
            scores = torch.einsum("bsnd,btnd->bnst", q, k) / math.sqrt(q.shape[-1])
            s_idx, t_idx = torch.as_tensor(letters["s"]), torch.as_tensor(letters["t"])
            mask = t_idx[None, :] > s_idx[:, None]
            scores = scores.masked_fill(mask, float("-inf"))
            y = torch.einsum("bnst,btnd->bsnd", torch.softmax(scores, -1), v)
        elif op.kind == "embedding":
            table = xs[1]
            if op.inputs[0] in self.graph.producer:  # positional add: x + table[s positions]
                y = xs[0] + table[torch.as_tensor(letters["s"])].unsqueeze(0)
            else:  # token lookup over the vocabulary rows held here
                vocab = terms[1][0]
                pos = _lookup(letters[vocab], self.graph.dim_sizes(op)[vocab])
                rows = pos[xs[0]]
                held = (rows >= 0).unsqueeze(-1).to(table.dtype)
                y = F.embedding(rows.clamp(min=0), table) * held
        elif op.kind == "loss":
            return self._loss(op, xs, lay, Reduce)
        else:  # pragma: no cover - check_supported rejects it
            raise UnsupportedPlanError(f"op {op.name}: kind {op.kind}")
        if len(contract) > 1:
            y = Reduce.apply(y, self.comm, contract, (op.name, "fwd"))
        return y if bias is None else y + bias

    def _norm(self, op, xs, lay: OpLayout, ReduceBoth):
        import torch
        import torch.nn.functional as F  # noqa: N812

        x, w = xs[0], xs[1]
        b = xs[2] if len(xs) == 3 else None
        stat = "".join(op.stat_letters)
        if op.output_letters[-len(stat):] != stat or len(stat) != 1:
            raise UnsupportedPlanError(f"op {op.name}: norm over {stat} must be the last letter")
        members = lay.stat_group[self.rank]
        n = self.graph.dim_sizes(op)[stat]
        if len(members) == 1 and b is not None:
            return F.layer_norm(x, (x.shape[-1],), w, b, LN_EPS)
        s2 = (x * x).sum(-1, keepdim=True)
        if b is None:  # RMSNorm
            st = s2 if len(members) == 1 else ReduceBoth.apply(
                s2, self.comm, members, (op.name, "stats"), (op.name, "stats backward"))
            return x * torch.rsqrt(st / n + LN_EPS) * w
        s1 = x.sum(-1, keepdim=True)
        st = ReduceBoth.apply(torch.cat([s1, s2], -1), self.comm, members, (op.name, "stats"),
                              (op.name, "stats backward"))
        mean = st[..., :1] / n
        var = st[..., 1:] / n - mean * mean
        return (x - mean) * torch.rsqrt(var + LN_EPS) * w + b

    def _loss(self, op, xs, lay: OpLayout, Reduce):
        import torch

        logits, labels = xs
        letters = lay.letters[self.rank]
        vocab = op.input_letters[0][-1]
        members = lay.contract_group[self.rank]
        with torch.no_grad():
            top = self.comm.all_max(logits.detach().amax(-1), members, (op.name, "loss max"))
        z = logits - top.unsqueeze(-1)
        pos = _lookup(letters[vocab], self.graph.dim_sizes(op)[vocab])
        rows = pos[labels]
        held = (rows >= 0).to(z.dtype)
        target = z.gather(-1, rows.clamp(min=0).unsqueeze(-1)).squeeze(-1) * held
        st = torch.stack([z.exp().sum(-1), target], -1)
        if len(members) > 1:
            st = Reduce.apply(st, self.comm, members, (op.name, "fwd"))
        return st[..., 0].log() - st[..., 1]

    # ---- a training step -------------------------------------------------------------------

    def forward(self):
        """This rank's share of the loss: its local terms over the global token count (mean
        cross-entropy for a graph ending in a loss op, else squared error against the seeded
        target summed over the last dimension)."""
        values: dict[str, Any] = {}
        for op in self.graph.ops:
            values[op.output] = self._run_op(op, self._inputs(op, values))
        last = self.graph.ops[-1]
        y = values[last.output]
        numel = self.graph.tensors[last.output].numel
        if last.kind == "loss":
            return y.sum() / numel
        lists = self.layouts[last.name].letters[self.rank]
        target = _index(self.data["target"], [lists[ch] for ch in last.output_letters])
        tokens = numel // self.graph.tensors[last.output].shape[-1]
        return ((y - target) ** 2).sum() / tokens

    def step(self) -> float:
        """Forward and backward; returns this rank's local loss share."""
        for leaf in self.leaves.values():
            leaf.grad = None
        loss = self.forward()
        loss.backward()
        return float(loss.detach())

    def gradients(self) -> dict[str, list[tuple[tuple[np.ndarray, ...], Any]]]:
        """Per parameter: (index lists, local gradient) of every leaf on this rank."""
        out: dict[str, list] = {}
        for (name, _op), leaf in self.leaves.items():
            out.setdefault(name, []).append((self.leaf_lists[(name, _op)], leaf.grad))
        return out


def assemble(graph, rank_grads: list[dict[str, list]]) -> tuple[dict[str, Any], float]:
    """Full gradient of every untied parameter from every rank's shards (tied ones are added
    to their target); also the largest difference between ranks holding the same element."""
    import torch

    full: dict[str, Any] = {}
    spread = 0.0
    for name, t in graph.tensors.items():
        if not t.is_param:
            continue
        acc = torch.zeros(t.shape)
        seen = torch.zeros(t.shape, dtype=torch.bool)
        for grads in rank_grads:
            for lists, g in grads.get(name, []):
                idx = tuple(torch.as_tensor(ix) for ix in np.ix_(*lists))
                if g is None:
                    g = torch.zeros([len(a) for a in lists])
                old = acc[idx]
                was = seen[idx]
                if bool(was.any()):
                    spread = max(spread, float((old - g).abs()[was].max()))
                acc[idx] = torch.where(was, old, g)
                seen[idx] = True
        if not bool(seen.all()):
            raise AssertionError(f"gradient of {name}: some elements are held by no rank")
        key = tie_target(graph, name) if t.tied else name
        full[key] = full[key] + acc if key in full else acc
    return full, spread
