"""What moves between pipeline stages: the boundary activation (and its gradient) per
micro-batch, point to point, and a tied embedding's gradient between the first and the last
stage once per step, each routed over the real links.

Between stages each GPU of one stage sends its 1/G slice to the GPU with the same local index
in the next (Megatron's scatter-gather). A tied embedding (GPT-2, BERT) is held by the first
stage's embedding and the last stage's LM head: GPU j of each exchanges the head's shard where
both split the weight alike, the whole weight where they do not (the gradient is then summed
whole and split again).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from taps_core.cluster.links import LinkModel
from taps_core.costs.ops import shard
from taps_core.ir.graph import OpGraph, OpSpec
from taps_core.ir.strategies import Strategy, pad_factor
from taps_core.plan.records import Plan
from taps_core.search.problem import SearchProblem


def send_flows(
    src_hosts: tuple[int, ...], dst_hosts: tuple[int, ...], g: int, nbytes: float
) -> list[tuple[int, int, float]]:
    """GPU j of one stage to GPU j of the next, each 1/G of ``nbytes``."""
    src = [h * g + j for h in src_hosts for j in range(g)]
    dst = [h * g + j for h in dst_hosts for j in range(g)]
    return [(a, b, nbytes / len(src)) for a, b in zip(src, dst)]


def send_seconds(
    links: LinkModel, src_hosts: tuple[int, ...], dst_hosts: tuple[int, ...], nbytes: float
) -> tuple[float, float, np.ndarray]:
    """Seconds, bytes (all GPUs) and per-link loads of sending a tensor of ``nbytes`` from one
    stage to the next: the flows of :func:`send_flows`, routed."""
    flows = send_flows(src_hosts, dst_hosts, links.topology.gpus_per_node, nbytes)
    src, dst, size = (np.array(x) for x in zip(*flows))
    per = nbytes / len(src)
    loads, latency = links._route(src, dst, size)
    seconds = float((loads / links.capacity_Bps).max(initial=0.0)) + latency
    return seconds, per * len(src), loads


@dataclass(frozen=True)
class BoundarySend:
    """The activation sent across one stage boundary per micro-batch and its gradient sent
    back: seconds, bytes (all GPUs) and per-link loads (bytes) each way."""

    src: tuple[int, ...]  # the earlier stage's hosts
    dst: tuple[int, ...]  # the later stage's hosts
    forward_s: float
    forward_bytes: float
    forward_loads: np.ndarray
    backward_s: float
    backward_bytes: float
    backward_loads: np.ndarray


def boundary_sends(links: LinkModel, p: int, boundary_bytes: list[float]) -> list[BoundarySend]:
    """Every boundary of ``p`` equal-width stages (stage i on hosts i*H .. (i+1)*H - 1), given
    the activation bytes crossing each per micro-batch."""
    hosts = links.topology.nodes // p
    sends = []
    for i in range(p - 1):
        src = tuple(range(i * hosts, (i + 1) * hosts))
        dst = tuple(range((i + 1) * hosts, (i + 2) * hosts))
        fwd = send_seconds(links, src, dst, boundary_bytes[i])
        bwd = send_seconds(links, dst, src, boundary_bytes[i])
        sends.append(BoundarySend(src, dst, *fwd, *bwd))
    return sends


def stage_send_seconds(sends: list[BoundarySend]) -> list[float]:
    """Seconds per micro-batch each stage spends sending: the activation forward to the next
    stage and the gradient back to the previous (the sender is charged, as 1F1B overlaps
    neither with its own compute)."""
    seconds = [0.0] * (len(sends) + 1)
    for i, send in enumerate(sends):
        seconds[i] += send.forward_s
        seconds[i + 1] += send.backward_s
    return seconds


def tied_head(micro: OpGraph, ops: set[str] | None = None) -> tuple[OpSpec, int] | None:
    """The op (among ``ops``, default all) reading a tied weight, and that input's position;
    None without one."""
    return next(
        (
            (op, pos)
            for op in micro.ops
            for pos, t in enumerate(op.inputs)
            if micro.tensors[t].tied and (ops is None or op.name in ops)
        ),
        None,
    )


def tied_held_bytes(micro: OpGraph, op: OpSpec, pos: int, strategy: Strategy) -> float:
    """Bytes per GPU of the tied weight's shard ``op`` holds under ``strategy``."""
    return float(shard(
        micro.tensors[op.inputs[pos]], op.input_letters[pos], strategy,
        pad_factor(micro, op, strategy, op.input_letters[pos]),
    ))


def tied_shard_bytes(micro: OpGraph, last: Plan, first: Plan | None = None) -> float | None:
    """Bytes per GPU the first and the last stage exchange each step of a tied embedding's
    gradient: the shard the last stage's head holds, or, when the first stage's embedding
    (``first``'s plan, if given) holds the weight split another way, the whole weight (the
    gradient is then summed whole and split again). None without a tied head there."""
    head = tied_head(micro, {o.name for o in last.ops})
    if head is None:
        return None
    op, pos = head
    strategy = next(o.strategy for o in last.ops if o.name == op.name)
    held = tied_held_bytes(micro, op, pos, strategy)
    owner = micro.tensors[op.inputs[pos]].tied_to
    theirs = _tied_layout(micro, first, owner) if first is not None else None
    same = theirs is None or strategy.layout(op.input_letters[pos])[:2] == theirs
    return held if same else float(micro.tensors[owner].nbytes)


def tied_exchange_seconds(
    links: LinkModel, first: tuple[int, ...], last: tuple[int, ...], held_bytes: float
) -> float:
    """Seconds of the tied gradient's exchange between the first and last stage's hosts when
    each GPU holds ``held_bytes`` of it (both ways at once)."""
    gpus = len(first) * links.topology.gpus_per_node
    return max(send_seconds(links, first, last, held_bytes * gpus)[0],
               send_seconds(links, last, first, held_bytes * gpus)[0])


def tied_exchange_extra(
    problem: SearchProblem,
    micro: OpGraph,
    links: LinkModel,
    hosts: int,
    p: int,
    first: Plan | None = None,
) -> tuple[str, np.ndarray] | None:
    """The node of ``problem`` holding the op that reads the tied weight after the layers, and
    the seconds per strategy of the tied gradient's exchange (:func:`tied_exchange_seconds`,
    as the last of ``p`` stages of ``hosts`` hosts pays it): its shard, or the whole weight
    where the first stage's embedding (``first``, if given) holds it split another way (as
    :func:`tied_shard_bytes` prices it); None without a tied weight there."""
    end = max(i for i, op in enumerate(micro.ops) if op.layer is not None)
    head = tied_head(micro, {op.name for op in micro.ops[end + 1:]})
    if head is None:
        return None
    op, pos = head
    node = next((n for n, names in problem.members.items() if op.name in names), None)
    if node is None:
        return None
    owner = micro.tensors[op.inputs[pos]].tied_to
    theirs = _tied_layout(micro, first, owner) if first is not None else None
    whole = float(micro.tensors[owner].nbytes)
    return node, _exchanges(links, hosts, p, [
        tied_held_bytes(micro, op, pos, st)
        if theirs is None or st.layout(op.input_letters[pos])[:2] == theirs else whole
        for st in problem.strategies[node]
    ])


def _exchanges(links: LinkModel, hosts: int, p: int, held_bytes: list[float]) -> np.ndarray:
    """:func:`tied_exchange_seconds` between the first and the last of ``p`` stages of
    ``hosts`` hosts, for each of ``held_bytes`` (bytes per GPU)."""
    span0, span1 = tuple(range(hosts)), tuple(range((p - 1) * hosts, p * hosts))
    return np.array([tied_exchange_seconds(links, span0, span1, b) for b in held_bytes])


def embedding_exchange_extra(
    problem: SearchProblem, micro: OpGraph, links: LinkModel, hosts: int, p: int, last: Plan
) -> tuple[str, np.ndarray] | None:
    """The first stage's side of :func:`tied_exchange_extra`: the node of ``problem`` holding
    the op that reads the tied weight's owner before the layers, and per strategy the seconds
    of the exchange with ``last``'s LM head (its shard where both split the weight alike, the
    whole weight otherwise); None without a tied head in ``last``."""
    head = tied_head(micro, {o.name for o in last.ops})
    if head is None:
        return None
    op, pos = head
    strategy = next(o.strategy for o in last.ops if o.name == op.name)
    owner = micro.tensors[op.inputs[pos]].tied_to
    reader = next((o for o in micro.ops if owner in o.inputs), None)
    node = None if reader is None else next(
        (n for n, names in problem.members.items() if reader.name in names), None)
    if reader is None or node is None:
        return None
    theirs = strategy.layout(op.input_letters[pos])[:2]
    letters = reader.input_letters[reader.inputs.index(owner)]
    shard = tied_held_bytes(micro, op, pos, strategy)
    whole = float(micro.tensors[owner].nbytes)
    return node, _exchanges(links, hosts, p, [
        shard if st.layout(letters)[:2] == theirs else whole for st in problem.strategies[node]
    ])


def _tied_layout(micro: OpGraph, first: Plan, owner: str) -> tuple | None:
    """How the first stage's reader of the tied weight ``owner`` splits it (per level, per
    dim), or None when no op of ``first`` reads it."""
    mine = {o.name: o.strategy for o in first.ops}
    reader = next((o for o in micro.ops if owner in o.inputs and o.name in mine), None)
    if reader is None:
        return None
    return mine[reader.name].layout(reader.input_letters[reader.inputs.index(owner)])[:2]


def with_tied_exchange(
    problem: SearchProblem,
    micro: OpGraph,
    links: LinkModel,
    hosts: int,
    p: int,
    first: Plan | None = None,
) -> SearchProblem:
    """``problem`` with the op reading the tied weight after the layers priced with the tied
    gradient's exchange it makes (:func:`tied_exchange_extra`); ``problem`` itself without a
    tied weight there."""
    found = tied_exchange_extra(problem, micro, links, hosts, p, first)
    return problem if found is None else plus_seconds(problem, *found)


def plus_seconds(problem: SearchProblem, node: str, extra: np.ndarray) -> SearchProblem:
    """``problem`` with ``extra`` seconds per strategy on ``node`` (every option)."""
    times = dict(problem.option_time)
    times[node] = {rc: t + extra[:, None] for rc, t in problem.option_time[node].items()}
    return replace(problem, option_time=times)


def tied_exchange(
    micro: OpGraph, links: LinkModel, first: Plan, last: Plan, hosts: int, p: int
) -> tuple[float, float, np.ndarray, list[tuple[int, int, float]]]:
    """Seconds, bytes (all GPUs), link loads and GPU-to-GPU flows (bytes) of the once-per-step
    all-reduce of a tied embedding's gradient between the first and the last of ``p`` stages
    of ``hosts`` hosts (Megatron's embedding group): GPU j of each exchanges what
    :func:`tied_shard_bytes` says, both ways at once; nothing without a tied weight across
    them."""
    none = (0.0, 0.0, np.zeros(len(links.links)), [])
    held = tied_shard_bytes(micro, last, first) if p > 1 else None
    if held is None:
        return none
    first_hosts = tuple(range(hosts))
    last_hosts = tuple(range((p - 1) * hosts, p * hosts))
    g = links.topology.gpus_per_node
    gpus = hosts * g
    there_s, there_b, there = send_seconds(links, first_hosts, last_hosts, held * gpus)
    back_s, back_b, back = send_seconds(links, last_hosts, first_hosts, held * gpus)
    flows = (send_flows(first_hosts, last_hosts, g, held * gpus)
             + send_flows(last_hosts, first_hosts, g, held * gpus))
    return max(there_s, back_s), there_b + back_b, there + back, flows
