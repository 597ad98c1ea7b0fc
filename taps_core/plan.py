"""A plan: one strategy per op, costed with the topology-aware model whatever chose it.

:func:`evaluate` is the single place where a plan's reported numbers are computed: per-op
compute and communication (in-op collectives plus resharding of its inputs, forward and
gradient), per-link bytes and busy time, and memory per device. Comparing plans chosen by
different cost models is fair because they are all reported through here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from taps_core.collectives import Phase, TopologyCost
from taps_core.costs import Memory, op_cost, reshard_phases
from taps_core.graph import OpGraph
from taps_core.linkmodel import LinkModel
from taps_core.strategies import Strategy


@dataclass(frozen=True)
class OpPlan:
    """One op's chosen strategy and what it costs (seconds, bytes sent by all GPUs)."""

    name: str
    kind: str
    layer: int | None
    einsum: str
    strategy: Strategy
    compute_s: float
    comm_time_s: float
    comm_bytes: float
    phases: tuple[tuple[str, Phase], ...]
    memory: Memory


@dataclass(frozen=True)
class LinkTraffic:
    """Bytes one directed link carries over a training/inference step, and its busy time."""

    src: str
    dst: str
    kind: str
    bandwidth_Bps: float
    bytes: float
    busy_time_s: float


@dataclass(frozen=True)
class SearchInfo:
    """How the plan was found: algorithm, wall time (s), strategies considered, optimality."""

    algorithm: str
    time_s: float
    num_strategies: int
    status: str = "optimal"
    memory_weight: float = 0.0
    lower_bound_s: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Plan:
    """A costed plan for one model on one topology."""

    label: str
    model_name: str
    parameters: int
    topology_name: str
    nodes: int
    gpus_per_node: int
    mode: str
    cost_model: str
    ops: tuple[OpPlan, ...]
    links: tuple[LinkTraffic, ...]
    memory: Memory
    memory_limit_bytes: float
    intra_node_bytes: float
    inter_node_bytes: float
    search: SearchInfo = field(default_factory=lambda: SearchInfo("manual", 0.0, 0))

    @property
    def comm_time_s(self) -> float:
        return sum(op.comm_time_s for op in self.ops)

    @property
    def compute_time_s(self) -> float:
        return sum(op.compute_s for op in self.ops)

    @property
    def total_time_s(self) -> float:
        """Compute plus communication, assuming no overlap (seconds per step)."""
        return self.comm_time_s + self.compute_time_s

    @property
    def comm_bytes(self) -> float:
        return self.intra_node_bytes + self.inter_node_bytes

    @property
    def strategies(self) -> dict[str, Strategy]:
        return {op.name: op.strategy for op in self.ops}


def evaluate(
    graph: OpGraph,
    links: LinkModel,
    mode: str,
    choice: dict[str, Strategy],
    *,
    label: str,
    cost_model: str,
    search: SearchInfo,
    memory_limit_bytes: float,
) -> Plan:
    """Cost ``choice`` on the topology of ``links`` (see the module docstring)."""
    topology = links.topology
    comm = TopologyCost(links)
    train = mode == "train"
    num_gpus = topology.num_gpus
    link_bytes = np.zeros(len(links.links))
    level_bytes = {"intra": 0.0, "inter": 0.0}
    ops: list[OpPlan] = []
    memory = Memory()
    for op in graph.ops:
        s = choice[op.name]
        cost = op_cost(graph, op, s, topology, mode)
        phases = list(cost.phases)
        for pos, tname in enumerate(op.inputs):
            producer = graph.producer.get(tname)
            if producer is None:
                continue
            src = choice[producer].layout(graph.op_by_name[producer].output_letters)
            dst = s.layout(op.input_letters[pos])
            nbytes = graph.tensors[tname].nbytes
            phases += [(f"reshard {tname}", p) for p in reshard_phases(nbytes, src, dst)]
            if train:
                phases += [(f"reshard grad {tname}", p) for p in reshard_phases(nbytes, dst, src)]
        seconds = 0.0
        sent = 0.0
        for _, p in phases:
            seconds += comm.seconds(p)
            sent += p.per_rank_bytes * num_gpus
            level_bytes[p.level] += p.per_rank_bytes * num_gpus
            link_bytes += p.per_rank_bytes * links.pattern(p.level, p.q, p.pattern).loads
        memory += cost.memory
        ops.append(
            OpPlan(
                op.name,
                op.kind,
                op.layer,
                op.einsum,
                s,
                cost.compute_s,
                seconds,
                sent,
                tuple(phases),
                cost.memory,
            )
        )
    traffic = tuple(
        LinkTraffic(u, v, link.kind, link.bandwidth_Bps, float(b), float(b / links.capacity_Bps[i]))
        for i, ((u, v, link), b) in enumerate(zip(links.links, link_bytes))
        if b > 0
    )
    return Plan(
        label=label,
        model_name=graph.name,
        parameters=graph.num_parameters,
        topology_name=topology.name,
        nodes=topology.nodes,
        gpus_per_node=topology.gpus_per_node,
        mode=mode,
        cost_model=cost_model,
        ops=tuple(ops),
        links=traffic,
        memory=memory,
        memory_limit_bytes=memory_limit_bytes,
        intra_node_bytes=level_bytes["intra"],
        inter_node_bytes=level_bytes["inter"],
        search=search,
    )
