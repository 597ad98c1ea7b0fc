"""Functions the gloo ranks run (called by :mod:`validation.worker` as ``fn(ctx, **kwargs)``).

A *scenario* is a name plus a list of rank groups that run the same collective at the same
time, e.g. ``{"name": "cross-node", "groups": [[0, 2]]}``. Every rank creates every group (gloo
requires it) and joins a world barrier before each repeat; only members time the collective.
"""

from __future__ import annotations

import time
from typing import Any

from validation.formulas import KINDS

ELEMENT_BYTES = 4  # float32
MIN_SAMPLE_BYTES = 2**20  # small messages are looped until one sample moves about this much
MAX_INNER = 64


def inner_loops(size_bytes: int) -> int:
    """Back-to-back calls per timed sample: enough to amortise barrier skew on small messages."""
    return max(1, min(MAX_INNER, -(-MIN_SAMPLE_BYTES // max(size_bytes, 1))))


def _op_p2p(kind: str, comm: Any, ranks: list[int], bufs: dict[str, Any]) -> None:
    """One collective on a flat group by the receive-first point-to-point ring algorithms of
    :mod:`validation.comm` (all-to-all: pairwise), results copied into the buffers."""
    members = tuple(ranks)
    torch = comm.torch
    if kind == "all_reduce":
        flat = comm._ring_reduce_scatter(bufs["inp"], members)
        bufs["inp"].copy_(torch.cat(comm._ring_gather(flat, members)))
    elif kind == "all_gather":
        bufs["out"].copy_(torch.cat(comm._ring_gather(bufs["inp"], members)))
    elif kind == "reduce_scatter":
        bufs["out"].copy_(comm._ring_reduce_scatter(bufs["inp"], members))
    elif kind == "all_to_all":
        order = tuple(range(len(members)))
        bufs["out"].copy_(comm.all_to_all(bufs["inp"], members, 0, 0, order, order,
                                          ("bench", kind)))
        comm.records.clear()
    else:
        raise ValueError(f"unknown collective {kind!r}; expected one of {KINDS}")


def _op(kind: str, dist: Any, group: Any, bufs: dict[str, Any]) -> None:
    """Run one collective on preallocated buffers."""
    if kind == "all_reduce":
        dist.all_reduce(bufs["inp"], group=group)
    elif kind == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(bufs["out"], bufs["inp"], group=group)
    elif kind == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(bufs["out"], bufs["inp"], group=group)
    elif kind == "all_to_all":
        dist.all_to_all_single(bufs["out"], bufs["inp"], group=group)
    else:
        raise ValueError(f"unknown collective {kind!r}; expected one of {KINDS}")


def _buffers(kind: str, p: int, size_bytes: int, torch: Any) -> dict[str, Any]:
    """Input/output float32 tensors for ``kind`` with full size S = ``size_bytes``."""
    n = size_bytes // ELEMENT_BYTES
    if n % (p * p):
        raise ValueError(f"size {size_bytes} B is not a multiple of 4 * p^2 = {4 * p * p}")
    if kind == "all_reduce":
        return {"inp": torch.empty(n)}
    if kind == "all_gather":
        return {"inp": torch.empty(n // p), "out": torch.empty(n)}
    if kind == "reduce_scatter":
        return {"inp": torch.empty(n), "out": torch.empty(n // p)}
    return {"inp": torch.empty(n // p), "out": torch.empty(n // p)}


def _fill(kind: str, bufs: dict[str, Any], rank: int, p: int, torch: Any) -> None:
    """Known input values: all-to-all chunk j of rank r holds 100*r + j, others r + 1 + i%7."""
    inp = bufs["inp"]
    if kind == "all_to_all":
        chunks = inp.view(p, -1)
        for j in range(p):
            chunks[j].fill_(100.0 * rank + j)
    else:
        pattern = torch.arange(inp.numel(), dtype=torch.float32).remainder_(7)
        inp.copy_(pattern).add_(rank + 1)


def _check(kind: str, bufs: dict[str, Any], me: int, group: list[int], torch: Any) -> bool:
    """True if the collective's result matches the values :func:`_fill` put in."""
    p = len(group)
    if kind == "all_to_all":
        out = bufs["out"].view(p, -1)
        return all(bool(torch.all(out[i] == 100.0 * src + me)) for i, src in enumerate(group))
    if kind == "all_gather":
        out = bufs["out"].view(p, -1)
        k = out.shape[1]
        pattern = torch.arange(k, dtype=torch.float32).remainder_(7)
        return all(bool(torch.equal(out[i], pattern + (src + 1))) for i, src in enumerate(group))
    total = float(sum(r + 1 for r in group))
    full = bufs["inp"].numel()
    pattern = torch.arange(full, dtype=torch.float32).remainder_(7)
    expect = pattern * p + total
    if kind == "all_reduce":
        return bool(torch.equal(bufs["inp"], expect))
    k = full // p
    return bool(torch.equal(bufs["out"], expect[me * k:(me + 1) * k]))


def bench_collectives(
    ctx: Any,
    *,
    scenarios: list[dict[str, Any]],
    kinds: list[str],
    sizes: list[int],
    repeats: int,
    warmup: int = 1,
    verify: bool = True,
    impl: str = "gloo",
    single_shot: bool = False,
) -> dict[str, Any]:
    """Time every (scenario, kind, size) ``repeats`` times after ``warmup`` untimed runs.

    ``single_shot`` times one call after the barrier even for small messages (as the plan
    executor runs them) instead of :func:`inner_loops` back-to-back calls.

    ``impl`` ``gloo`` runs gloo's own collectives; ``p2p`` the receive-first point-to-point
    ring algorithms that the plan executor uses (:mod:`validation.comm`).

    Returns ``{"records": [...], "checks": [...]}``: one record per timed run of this rank
    (``seconds`` per call: wall clock around :func:`inner_loops` back-to-back calls, divided by
    their number; ``t0``/``t1`` the ``perf_counter`` stamps around them, comparable between
    ranks of one machine) and, with ``verify``, one correctness check per (scenario, kind,
    size) from the first warm-up run (values filled before a single call, compared after).
    """
    import torch
    import torch.distributed as dist

    if warmup < 1 and verify:
        warmup = 1
    comm = None
    if impl == "p2p":
        from validation.comm import Comm
        from validation.layout import MeshCoords

        comm = Comm(MeshCoords(ctx.world_size // ctx.ranks_per_node, ctx.ranks_per_node),
                    ctx.rank, impl="p2p")
    elif impl != "gloo":
        raise ValueError(f"unknown collective implementation {impl!r}")
    world = list(range(ctx.world_size))
    handles: list[list[tuple[list[int], Any]]] = []
    for sc in scenarios:
        made = []
        for g in sc["groups"]:
            ranks = sorted(g)
            made.append((ranks, None if ranks == world else dist.new_group(ranks=ranks)))
        handles.append(made)
    records: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    for sc, made in zip(scenarios, handles, strict=True):
        mine = next(((ranks, h) for ranks, h in made if ctx.rank in ranks), None)
        for kind in kinds:
            for size in sizes:
                bufs = None
                if mine is not None:
                    bufs = _buffers(kind, len(mine[0]), size, torch)
                for it in range(warmup + repeats):
                    dist.barrier()
                    if mine is None or bufs is None:
                        continue
                    ranks, handle = mine
                    me = ranks.index(ctx.rank)
                    probe = verify and it == 0
                    if probe:
                        _fill(kind, bufs, ctx.rank, len(ranks), torch)
                    loops = 1 if probe or single_shot else inner_loops(size)
                    t0 = time.perf_counter()
                    for _ in range(loops):
                        if comm is None:
                            _op(kind, dist, handle, bufs)
                        else:
                            _op_p2p(kind, comm, ranks, bufs)
                    t1 = time.perf_counter()
                    seconds = (t1 - t0) / loops
                    if probe:
                        checks.append({"scenario": sc["name"], "kind": kind, "size_bytes": size,
                                       "rank": ctx.rank, "ok": _check(kind, bufs, me, ranks,
                                                                      torch)})
                        bufs["inp"].zero_()  # repeated in-place all-reduces then stay finite
                    if it >= warmup:
                        records.append({
                            "scenario": sc["name"], "kind": kind, "size_bytes": size,
                            "p": len(ranks), "groups": [sorted(g) for g in sc["groups"]],
                            "repeat": it - warmup, "rank": ctx.rank, "seconds": seconds,
                            "inner": loops, "t0": t0, "t1": t1,
                        })
    dist.barrier()
    return {"records": records, "checks": checks}


def whereami(ctx: Any) -> dict[str, Any]:
    """Launcher self-check: this rank's node, socket interface and network-namespace inode."""
    import os

    return {"rank": ctx.rank, "node": ctx.node, "ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
            "netns_inode": os.stat("/proc/self/ns/net").st_ino}


def stall(ctx: Any, *, seconds: float, fail_rank: int | None = None) -> None:
    """Launcher self-check: rank ``fail_rank`` raises at once, the others sleep ``seconds``."""
    if ctx.rank == fail_rank:
        raise RuntimeError(f"rank {ctx.rank} failed on purpose")
    time.sleep(min(seconds, 600.0))
