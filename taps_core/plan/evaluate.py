"""A plan: one choice per op, costed with the topology-aware model whatever chose it.

:func:`evaluate` is the single place where a plan's reported numbers are computed: per-op
compute and communication (in-op collectives, weight-gradient sync, conversions of its inputs
forward and of their gradients back), per-link bytes and busy time, memory per device, and the
same communication under the volume model. Comparing plans chosen by different cost models is
fair because they are all reported through here.
"""


from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import Phase, TopologyCost, VolumeCost
from taps_core.costs.ops import Memory, OpCost, op_cost, op_option, reruns_forward, scaled
from taps_core.costs.reshard import convert_phases, plain
from taps_core.ir.graph import OpGraph
from taps_core.ir.strategies import Strategy, reader_layouts
from taps_core.memo import LruMemo
from taps_core.plan.records import LinkTraffic, OpChoice, OpPlan, PipelineInfo, Plan, SearchInfo


@dataclass
class PricingMemo:
    """What evaluations of many choices on one graph, mode and host type share: each op's
    cost per strategy, and its input conversions per (its choice, the strategies it reads
    from, micro-batches). None of it depends on a bandwidth."""

    op_costs: dict[tuple[str, Strategy], OpCost] = field(default_factory=dict)
    input_phases: dict[tuple, list[tuple[str, Phase]]] = field(default_factory=dict)


PRICING_MEMOS = 8  # graphs (x mode and host type) whose op costs the process keeps
PRICED_ENTRIES = 200_000  # entries of one memo (op costs + conversions) before it starts over
_PRICINGS: LruMemo[PricingMemo] = LruMemo(PRICING_MEMOS)


def pricing_memo(graph: OpGraph, topology: Topology, mode: str) -> PricingMemo:
    """The process's :class:`PricingMemo` of ``graph``'s content in ``mode`` on ``topology``'s
    host type: op costs and input conversions do not depend on a bandwidth, so a plan priced
    again at another link speed (a sweep, an edited link, a pipeline's stages) reuses them."""
    key = (graph.content, mode, topology.gpu, topology.gpus_per_node,
           topology.compute_efficiency)
    memo = _PRICINGS.get_or(key, PricingMemo)
    if len(memo.op_costs) + len(memo.input_phases) > PRICED_ENTRIES:  # bounds its memory
        memo.op_costs.clear()
        memo.input_phases.clear()
    return memo


def _input_key(graph: OpGraph, choice: dict[str, OpChoice], name: str, k: int) -> tuple:
    """Everything :func:`op_input_phases` of op ``name`` depends on."""
    op = graph.op_by_name[name]
    own = choice[name]
    deps = []
    for tname in op.inputs:
        producer = graph.producer.get(tname)
        t = graph.tensors[tname]
        if producer is not None:
            deps.append(choice[producer].strategy)
        elif t.tied:
            owner = graph.tied_owner(tname, name)
            deps.append(None if owner is None else choice[owner].strategy)
        else:
            deps.append(None)
    again = reruns_forward(graph.op_by_name[name], own.recompute, own.selective)
    return (name, own.strategy, again, k, tuple(deps))


def _as_choice(c: Strategy | OpChoice) -> OpChoice:
    return c if isinstance(c, OpChoice) else OpChoice(c)


def op_input_phases(
    graph: OpGraph,
    choice: dict[str, OpChoice],
    name: str,
    mode: str,
    gpus_per_node: int,
    microbatches: int = 1,
) -> list[tuple[str, Phase]]:
    """Conversions an op pays for its inputs: each produced input into the layout the op reads
    (twice when its forward re-runs in backward) and, in training, the input's gradient back to the
    producer's layout; a tied weight's reshard and gradient hand-back. Sibling ops share the
    leader's conversions (see :attr:`~taps_core.ir.graph.OpGraph.siblings`)."""
    op = graph.op_by_name[name]
    group = graph.siblings.get(name, (name,))
    own = choice[name]
    train = mode == "train"
    k = microbatches
    out: list[tuple[str, Phase]] = []
    for pos, tname in enumerate(op.inputs):
        producer = graph.producer.get(tname)
        t = graph.tensors[tname]
        if producer is not None and group[0] == name:
            pop = graph.op_by_name[producer]
            src = choice[producer].strategy.output_layout(pop)
            wanted, grads = reader_layouts(op, pos, [own.strategy])
            again = reruns_forward(op, own.recompute, own.selective)
            times = k * (2 if again and op.layer is not None and pop.layer == op.layer else 1)
            fwd = convert_phases(t.nbytes, src, wanted[0], gpus_per_node)
            out += [(f"reshard {tname}", scaled(p, times)) for p in fwd]
            if train:
                back = convert_phases(t.nbytes, grads[0], plain(src), gpus_per_node)
                out += [(f"grad {tname}", scaled(p, k)) for p in back]  # per micro-batch
        elif t.tied:
            owner = graph.tied_owner(tname, name)
            if owner is None:
                continue
            oop = graph.op_by_name[owner]
            opos = oop.inputs.index(t.tied_to)
            own_w, own_g = reader_layouts(oop, opos, [choice[owner].strategy])
            head_w, head_g = reader_layouts(op, pos, [own.strategy])
            fwd = convert_phases(t.nbytes, plain(own_w[0]), head_w[0], gpus_per_node)
            out += [(f"tied {tname}", p) for p in fwd]
            if train and own_g[0] != head_g[0]:
                back = convert_phases(t.nbytes, head_g[0], plain(own_w[0]), gpus_per_node)
                out += [(f"grad_sync tied {tname}", p) for p in back]
    return out


def evaluate(
    graph: OpGraph,
    links: LinkModel,
    mode: str,
    choice: dict[str, Strategy] | dict[str, OpChoice],
    *,
    label: str,
    cost_model: str,
    search: SearchInfo,
    memory_limit_bytes: float,
    microbatches: int = 1,
    activation_copies: int = 1,
    memo: PricingMemo | None = None,
    per_link: bool = True,
) -> Plan:
    """Cost ``choice`` on the topology of ``links`` (see the module docstring).

    ``choice`` maps every op to a :class:`OpChoice` (a bare Strategy means ZeRO 0, no
    recomputation). ``memo`` keeps op costs and input conversions for later calls on the
    same graph and host type (default: the process's, :func:`pricing_memo`); without
    ``per_link`` the plan lists no link loads (a caller that needs only its time and memory).
    """
    topology = links.topology
    memo = pricing_memo(graph, topology, mode) if memo is None else memo
    comm = TopologyCost(links)
    volume = VolumeCost()
    num_gpus = topology.num_gpus
    g = topology.gpus_per_node
    full = {n: _as_choice(c) for n, c in choice.items()}
    link_bytes = np.zeros(len(links.links))
    level_bytes = {"intra": 0.0, "inter": 0.0}
    volume_s = 0.0
    ops: list[OpPlan] = []
    memory = Memory()
    gathered: dict[int | str, float] = {}  # transient bytes per layer (or op outside them)
    remat: dict[int | str, float] = {}
    for op in graph.ops:
        c = full[op.name]
        key = (op.name, c.strategy)
        cost = memo.op_costs.get(key)
        if cost is None:
            cost = memo.op_costs[key] = op_cost(graph, op, c.strategy, topology, mode)
        opt = op_option(
            cost, mode, zero=c.zero, recompute=c.recompute, selective=c.selective,
            microbatches=microbatches, activation_copies=activation_copies,
        )
        phases = list(opt.phases)
        ikey = _input_key(graph, full, op.name, microbatches)
        converts = memo.input_phases.get(ikey)  # one read: another thread may empty the memo
        if converts is None:
            converts = memo.input_phases[ikey] = op_input_phases(
                graph, full, op.name, mode, g, microbatches
            )
        phases += converts
        seconds = 0.0
        sent = 0.0
        for _, p in phases:
            seconds += comm.seconds(p)
            volume_s += volume.seconds(p)
            sent += p.per_rank_bytes * num_gpus
            level_bytes[p.level] += p.per_rank_bytes * num_gpus
            if per_link:
                link_bytes += p.per_rank_bytes * links.pattern(*p.route).loads
        memory += opt.memory
        unit = op.layer if op.layer is not None else op.name
        gathered[unit] = gathered.get(unit, 0.0) + opt.gathered_bytes
        remat[unit] = remat.get(unit, 0.0) + opt.rematerialized_bytes
        ops.append(
            OpPlan(
                op.name,
                op.kind,
                op.layer,
                op.einsum,
                c.strategy,
                opt.compute_s,
                seconds,
                sent,
                tuple(phases),
                opt.memory,
                c.zero,
                c.recompute,
                selective=c.selective,
            )
        )
    # one layer (or op outside the layers) at a time holds its transient buffers
    peak = max(gathered.values(), default=0.0) + max(remat.values(), default=0.0)
    memory += Memory(transient=peak)
    traffic = link_traffic(links, link_bytes) if per_link else ()
    cfg = graph.meta.get("config")
    return plan_record(
        graph, topology, label=label, mode=mode, cost_model=cost_model, ops=tuple(ops),
        links=traffic, memory=memory, memory_limit_bytes=memory_limit_bytes,
        intra_node_bytes=level_bytes["intra"], inter_node_bytes=level_bytes["inter"],
        search=search, volume_comm_time_s=volume_s, microbatches=microbatches,
        flash_attention=bool(getattr(cfg, "flash_attention", False)),
    )


def plan_record(
    graph: OpGraph,
    topology: Topology,
    *,
    label: str,
    mode: str,
    cost_model: str,
    ops: tuple[OpPlan, ...],
    links: tuple[LinkTraffic, ...],
    memory: Memory,
    memory_limit_bytes: float,
    intra_node_bytes: float,
    inter_node_bytes: float,
    search: SearchInfo,
    volume_comm_time_s: float,
    microbatches: int,
    flash_attention: bool,
    pipeline: PipelineInfo | None = None,
) -> Plan:
    """The Plan record of priced ops on ``topology``: model and cluster fields read off
    ``graph`` and ``topology`` (one constructor for plans with and without stages)."""
    return Plan(
        label=label,
        model_name=graph.name,
        parameters=graph.num_parameters,
        topology_name=topology.name,
        nodes=topology.nodes,
        gpus_per_node=topology.gpus_per_node,
        mode=mode,
        cost_model=cost_model,
        ops=ops,
        links=links,
        memory=memory,
        memory_limit_bytes=memory_limit_bytes,
        intra_node_bytes=intra_node_bytes,
        inter_node_bytes=inter_node_bytes,
        search=search,
        volume_comm_time_s=volume_comm_time_s,
        microbatches=microbatches,
        flash_attention=flash_attention,
        pipeline=pipeline,
        workload=workload_of(graph, microbatches),
    )


def link_traffic(links: LinkModel, link_bytes: np.ndarray) -> tuple[LinkTraffic, ...]:
    """Every directed link that carries bytes (per step), with its busy time at its capacity."""
    out = []
    for i in np.flatnonzero(link_bytes > 0):
        u, v, link = links.links[i]
        b = float(link_bytes[i])
        out.append(
            LinkTraffic(u, v, link.kind, link.bandwidth_Bps, b, float(b / links.capacity_Bps[i]))
        )
    return tuple(out)


def workload_of(graph: OpGraph, microbatches: int = 1) -> dict[str, object]:
    """The step's workload from the model config: global batch (samples), micro-batch,
    sequence length (tokens) and dtype; empty without a config."""
    cfg = graph.meta.get("config")
    if cfg is None or not hasattr(cfg, "batch_size"):
        return {}
    out: dict[str, object] = {
        "batch_size": cfg.batch_size * microbatches,
        "micro_batch_size": cfg.batch_size,
        "dtype": cfg.dtype,
    }
    if getattr(cfg, "model_type", "") != "resnet":
        out["seq_length"] = cfg.seq_length
    return out
