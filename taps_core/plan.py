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

from taps_core.collectives import Phase, TopologyCost, VolumeCost
from taps_core.costs import Memory, OpCost, op_cost, op_option, scaled
from taps_core.graph import OpGraph
from taps_core.linkmodel import LinkModel
from taps_core.reshard import convert_phases, plain
from taps_core.search.problem import reader_layouts
from taps_core.strategies import Strategy


@dataclass(frozen=True)
class OpChoice:
    """What the plan does with one op: its sharding, ZeRO stage and layer recomputation."""

    strategy: Strategy
    zero: int = 0
    recompute: bool = False


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
    zero: int = 0
    recompute: bool = False
    stage: int | None = None  # pipeline stage (None without pipelining)


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
class StageInfo:
    """One pipeline stage: its layers, hosts, its own plan, and its per-step figures.

    ``microbatch_s`` is one micro-batch's forward and backward on this stage including its
    point-to-point sends (seconds); ``sync_s`` what runs once per step (gradient sync, with
    ``tied_sync_s`` of it the exchange of a tied embedding's gradient between the first and
    last stage); ``send_bytes`` what the stage sends to its neighbours per step (all GPUs).
    """

    index: int
    layers: tuple[int, int] | None
    hosts: tuple[int, ...]
    gpus: int
    plan: Plan
    microbatch_s: float
    sync_s: float
    send_s: float
    send_bytes: float
    volume_microbatch_s: float = 0.0  # the same under the volume model
    volume_sync_s: float = 0.0
    tied_sync_s: float = 0.0


@dataclass(frozen=True)
class PipelineInfo:
    """Stages on groups of hosts, micro-batches through them under a 1F1B schedule.

    Step time = (m - 1) x the slowest stage's micro-batch + the sum over stages of one
    micro-batch (the fill and drain) + the slowest gradient sync; the difference to
    m x the slowest stage is the bubble, (p - 1) / (m + p - 1) of it for balanced stages.
    """

    stages: tuple[StageInfo, ...]
    microbatches: int
    micro_batch_size: int
    step_time_s: float
    compute_time_s: float
    comm_time_s: float
    bubble_time_s: float
    p2p_bytes: float
    schedule: str = "1F1B"
    volume_step_s: float = 0.0  # the step under the volume model (what a volume planner sees)
    p2p_flows: tuple[tuple[int, int, float], ...] = ()  # (src GPU, dst GPU, bytes per step)
    tied_sync_bytes: float = 0.0  # a tied embedding's gradient, first <-> last stage, per step

    @property
    def bubble_fraction(self) -> float:
        busy = self.step_time_s - max((st.sync_s for st in self.stages), default=0.0)
        return self.bubble_time_s / busy if busy > 0 else 0.0


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
    volume_comm_time_s: float = 0.0  # the same phases under the volume model (1/100 GB/s)
    microbatches: int = 1
    flash_attention: bool = False
    pipeline: PipelineInfo | None = None
    workload: dict[str, object] = field(default_factory=dict)  # batch, seq, dtype of the step

    @property
    def comm_time_s(self) -> float:
        """Communication seconds per step (a pipeline's: the slowest stage's, sync included)."""
        if self.pipeline is not None:
            return self.pipeline.comm_time_s
        return sum(op.comm_time_s for op in self.ops)

    @property
    def compute_time_s(self) -> float:
        if self.pipeline is not None:
            return self.pipeline.compute_time_s
        return sum(op.compute_s for op in self.ops)

    @property
    def bubble_time_s(self) -> float:
        """Idle seconds of the pipeline's fill and drain (0 without pipelining)."""
        return self.pipeline.bubble_time_s if self.pipeline is not None else 0.0

    @property
    def total_time_s(self) -> float:
        """Compute plus communication (plus a pipeline's bubble), no overlap (s per step)."""
        return self.comm_time_s + self.compute_time_s + self.bubble_time_s

    @property
    def volume_objective_s(self) -> float:
        """The step as a volume-based planner scores it (compute + bytes at 100 GB/s)."""
        if self.pipeline is not None:
            return self.pipeline.volume_step_s
        return self.compute_time_s + self.volume_comm_time_s

    @property
    def comm_bytes(self) -> float:
        return self.intra_node_bytes + self.inter_node_bytes

    @property
    def strategies(self) -> dict[str, Strategy]:
        return {op.name: op.strategy for op in self.ops}

    @property
    def choices(self) -> dict[str, OpChoice]:
        """Every op's full choice (strategy, ZeRO stage, recomputation), to re-evaluate."""
        return {op.name: OpChoice(op.strategy, op.zero, op.recompute) for op in self.ops}

    @property
    def recomputed_layers(self) -> int:
        """Layers whose forward is recomputed in backward."""
        return len({op.layer for op in self.ops if op.recompute and op.layer is not None})


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
    (twice when its layer is recomputed) and, in training, the input's gradient back to the
    producer's layout; a tied weight's reshard and gradient hand-back. Sibling ops share the
    leader's conversions (see :attr:`~taps_core.graph.OpGraph.siblings`)."""
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
            times = k * (2 if own.recompute and op.layer is not None and pop.layer == op.layer
                         else 1)
            fwd = convert_phases(t.nbytes, src, wanted[0], gpus_per_node)
            out += [(f"reshard {tname}", scaled(p, times)) for p in fwd]
            if train:
                back = convert_phases(t.nbytes, grads[0], plain(src), gpus_per_node)
                out += [(f"grad {tname}", scaled(p, k)) for p in back]  # per micro-batch
        elif t.tied:
            owner = next((o for o in graph.consumers.get(t.tied_to, ()) if o != name), None)
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
    op_costs: dict[tuple[str, Strategy], OpCost] | None = None,
    per_link: bool = True,
) -> Plan:
    """Cost ``choice`` on the topology of ``links`` (see the module docstring).

    ``choice`` maps every op to a :class:`OpChoice` (a bare Strategy means ZeRO 0, no
    recomputation). ``op_costs`` keeps each op's cost under a strategy for later calls on
    the same graph and topology (a caller pricing many choices of one graph); without
    ``per_link`` the plan lists no link loads (a caller that needs only its time and memory).
    """
    topology = links.topology
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
        cost = None if op_costs is None else op_costs.get(key)
        if cost is None:
            cost = op_cost(graph, op, c.strategy, topology, mode)
            if op_costs is not None:
                op_costs[key] = cost
        opt = op_option(
            cost, mode, zero=c.zero, recompute=c.recompute, microbatches=microbatches,
            activation_copies=activation_copies,
        )
        phases = list(opt.phases)
        phases += op_input_phases(graph, full, op.name, mode, g, microbatches)
        seconds = 0.0
        sent = 0.0
        for _, p in phases:
            seconds += comm.seconds(p)
            volume_s += volume.seconds(p)
            sent += p.per_rank_bytes * num_gpus
            level_bytes[p.level] += p.per_rank_bytes * num_gpus
            if per_link:
                link_bytes += p.per_rank_bytes * links.pattern(p.level, p.q, p.pattern).loads
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
            )
        )
    # one layer (or op outside the layers) at a time holds its transient buffers
    peak = max(gathered.values(), default=0.0) + max(remat.values(), default=0.0)
    memory += Memory(transient=peak)
    traffic = link_traffic(links, link_bytes) if per_link else ()
    cfg = graph.meta.get("config")
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
        volume_comm_time_s=volume_s,
        microbatches=microbatches,
        flash_attention=bool(getattr(cfg, "flash_attention", False)),
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
