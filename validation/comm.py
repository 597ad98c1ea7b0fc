"""Collectives over explicit rank lists, each one recorded (and optionally timed) as it runs.

Two implementations over torch.distributed gloo:

- ``p2p`` (default): ring all-gather, ring reduce-scatter, all-reduce as ring reduce-scatter
  plus ring all-gather, and pairwise all-to-all, built from point-to-point ``irecv``/``isend``
  with every receive posted *before* the matching send. Gloo's TCP transport leaves a peer's
  bytes unread until the receive for them is posted, so its own all-gather, reduce-scatter and
  all-to-all (which send first) run half-duplex on the emulated links: 1.5-2x the ring time
  (see docs/VALIDATION.md). Posting receives first gives the full-duplex ring time.
- ``gloo``: gloo's own collectives on ``torch.distributed.new_group`` groups.

A group that spans both levels (ranks on several nodes and several local ranks) is reduced
hierarchically, as the engine costs it: reduce-scatter inside the node, all-reduce across nodes
on the node's shard, all-gather inside the node (three recorded phases).

Each call appends one record per phase: op, label, collective kind, level, group size q, bytes
each rank sends (the engine's ``per_rank_bytes`` convention) and, when ``timed``, the
``perf_counter`` stamps after a world barrier (so every group of the phase starts together, as
the engine assumes) and at the end of the phase. All ranks share one machine's monotonic clock,
so a phase's duration is taken as the last end minus the last start over the ranks: a rank that
leaves the barrier early does not count its wait for the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from validation.layout import MeshCoords

IMPLS = ("p2p", "gloo")


@dataclass
class Comm:
    """Collectives for rank ``rank`` of ``mesh``; see the module docstring."""

    mesh: MeshCoords
    rank: int
    impl: str = "p2p"
    timed: bool = False
    records: list[dict[str, Any]] = field(default_factory=list)
    _groups: dict[tuple[int, ...], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.impl not in IMPLS:
            raise ValueError(f"unknown collective implementation {self.impl!r}; one of {IMPLS}")
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist

    # ---- groups (gloo implementation only) ---------------------------------------------------

    def subgroups(self, members: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Groups a collective on ``members`` runs on: itself, or its hierarchical parts."""
        if self.mesh.level_of(members) != "mixed" or len(members) == 1:
            return [members]
        r = self.mesh.intra
        nodes = sorted({m // r for m in members})
        local = sorted({m % r for m in members})
        return ([tuple(n * r + j for j in local) for n in nodes]
                + [tuple(n * r + j for n in nodes) for j in local])

    def create_groups(self, member_sets: set[tuple[int, ...]]) -> None:
        """Create every group of ``member_sets`` (all ranks must call with the same sets)."""
        if self.impl != "gloo":
            return
        wanted: set[tuple[int, ...]] = set()
        for members in member_sets:
            if len(members) > 1:
                wanted.add(members)
                wanted.update(g for g in self.subgroups(members) if len(g) > 1)
        for members in sorted(wanted):
            if members not in self._groups:
                self._groups[members] = self.dist.new_group(ranks=list(members))

    # ---- recording ---------------------------------------------------------------------------

    def _phase(self, tag: tuple[str, str], kind: str, members: tuple[int, ...],
               per_rank_bytes: float, fn):
        t0 = None
        if self.timed:
            self.dist.barrier()
            t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter() if self.timed else None
        self.records.append({
            "op": tag[0], "label": tag[1], "kind": kind, "level": self.mesh.level_of(members),
            "q": len(members), "per_rank_bytes": float(per_rank_bytes),
            "seconds": None if t0 is None else t1 - t0, "t0": t0, "t1": t1,
        })
        return out

    # ---- point-to-point building blocks ------------------------------------------------------

    def _exchange(self, send, send_to: int, recv, recv_from: int) -> None:
        """Receive first, then send; wait for both (full duplex on gloo's TCP pairs)."""
        dist = self.dist
        r = dist.irecv(recv, src=recv_from)
        s = dist.isend(send, dst=send_to)
        r.wait()
        s.wait()

    def _ring_gather(self, x, members: tuple[int, ...]) -> list:
        """Every member's tensor (same shape), in member order, by the ring algorithm."""
        q = len(members)
        i = members.index(self.rank)
        parts: list = [None] * q
        parts[i] = x.contiguous()
        nxt, prv = members[(i + 1) % q], members[(i - 1) % q]
        for k in range(q - 1):
            src_idx, dst_idx = (i - k) % q, (i - k - 1) % q
            buf = self.torch.empty_like(parts[i])
            self._exchange(parts[src_idx], nxt, buf, prv)
            parts[dst_idx] = buf
        return parts

    def _ring_reduce_scatter(self, flat, members: tuple[int, ...]):
        """This member's 1/q of the element-wise sum of every member's ``flat`` (ring)."""
        q = len(members)
        i = members.index(self.rank)
        chunks = [c.clone() for c in flat.chunk(q)]
        nxt, prv = members[(i + 1) % q], members[(i - 1) % q]
        for k in range(q - 1):
            send_idx, recv_idx = (i - k - 1) % q, (i - k - 2) % q
            buf = self.torch.empty_like(chunks[recv_idx])
            self._exchange(chunks[send_idx], nxt, buf, prv)
            chunks[recv_idx] += buf
        return chunks[i]

    # ---- collectives -------------------------------------------------------------------------

    def _pad(self, x, q: int):
        flat = x.contiguous().reshape(-1)
        pad = (-flat.numel()) % q
        if pad:
            flat = self.torch.cat([flat, flat.new_zeros(pad)])
        return flat, pad

    def all_reduce(self, x, members: tuple[int, ...], tag: tuple[str, str]):
        """Element-wise sum over ``members`` (a new tensor; hierarchical if mixed levels)."""
        q = len(members)
        if q == 1:
            return x
        size = x.numel() * x.element_size()
        if self.mesh.level_of(members) == "mixed":
            return self._hierarchical(x, members, tag)

        def run():
            if self.impl == "gloo":
                y = x.contiguous().clone()
                self.dist.all_reduce(y, group=self._groups[members])
                return y
            flat, pad = self._pad(x, q)
            mine = self._ring_reduce_scatter(flat, members)
            full = self.torch.cat(self._ring_gather(mine, members))
            return (full[: full.numel() - pad] if pad else full).view(x.shape)

        return self._phase(tag, "all_reduce", members, 2 * (q - 1) / q * size, run)

    def _hierarchical(self, x, members: tuple[int, ...], tag: tuple[str, str]):
        r = self.mesh.intra
        node, local = self.rank // r, self.rank % r
        nodes = sorted({m // r for m in members})
        locs = sorted({m % r for m in members})
        if set(members) != {n * r + j for n in nodes for j in locs}:
            raise ValueError(f"group {members} is not a nodes x local-ranks grid")
        intra = tuple(node * r + j for j in locs)
        inter = tuple(n * r + local for n in nodes)
        qa = len(intra)
        flat, pad = self._pad(x, qa)
        size = flat.numel() * flat.element_size()

        def scatter():
            if self.impl == "gloo":
                out = flat.new_empty(flat.numel() // qa)
                self.dist.reduce_scatter_tensor(out, flat, group=self._groups[intra])
                return out
            return self._ring_reduce_scatter(flat, intra)

        mine = self._phase(tag, "reduce_scatter", intra, (qa - 1) / qa * size, scatter)
        mine = self.all_reduce(mine, inter, tag)
        full = self._phase(tag, "all_gather", intra, (qa - 1) / qa * size,
                           lambda: self._gather_cat(mine, intra, 0))
        return (full[: full.numel() - pad] if pad else full).view(x.shape)

    def _gather_cat(self, x, members: tuple[int, ...], dim: int):
        if self.impl == "gloo":
            parts = [self.torch.empty_like(x) for _ in members]
            self.dist.all_gather(parts, x.contiguous(), group=self._groups[members])
        else:
            parts = self._ring_gather(x, members)
        return self.torch.cat(parts, dim)

    def all_gather(self, x, members: tuple[int, ...], dim: int, tag: tuple[str, str]):
        """Concatenation along ``dim`` of every member's ``x``, in member order."""
        q = len(members)
        if q == 1:
            return x
        nbytes = (q - 1) * x.numel() * x.element_size()
        return self._phase(tag, "all_gather", members, nbytes,
                           lambda: self._gather_cat(x, members, dim))

    def all_max(self, x, members: tuple[int, ...], tag: tuple[str, str]):
        """Element-wise maximum over ``members`` (an all-gather and a local max; no autograd)."""
        if len(members) == 1:
            return x
        stacked = self.all_gather(x.unsqueeze(0), members, 0, tag)
        return stacked.amax(0)

    def all_to_all(self, x, members: tuple[int, ...], split_dim: int, cat_dim: int,
                   send_idx: tuple[int, ...], recv_order: tuple[int, ...],
                   tag: tuple[str, str]):
        """Split ``x`` along ``split_dim`` into q chunks; chunk ``send_idx[j]`` goes to member
        j. Returns what the members sent, concatenated along ``cat_dim`` in ``recv_order``."""
        q = len(members)
        if q == 1:
            return x
        i = members.index(self.rank)
        chunks = [c.contiguous() for c in x.chunk(q, split_dim)]
        nbytes = (q - 1) / q * x.numel() * x.element_size()

        def run():
            got: list = [None] * q
            got[i] = chunks[send_idx[i]]
            if self.impl == "gloo":
                flat_in = self.torch.cat([chunks[send_idx[j]].reshape(-1) for j in range(q)])
                flat_out = self.torch.empty_like(flat_in)
                self.dist.all_to_all_single(flat_out, flat_in, group=self._groups[members])
                got = [c.view(chunks[0].shape) for c in flat_out.chunk(q)]
            else:
                dist = self.dist
                reqs = []
                for j, m in enumerate(members):
                    if j != i:
                        got[j] = self.torch.empty_like(chunks[0])
                        reqs.append(dist.irecv(got[j], src=m))
                for j, m in enumerate(members):
                    if j != i:
                        reqs.append(dist.isend(chunks[send_idx[j]], dst=m))
                for req in reqs:
                    req.wait()
            return self.torch.cat([got[j] for j in recv_order], cat_dim)

        return self._phase(tag, "all_to_all", members, nbytes, run)
