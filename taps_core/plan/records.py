"""The plan records: one choice per op, its costs, per-link traffic, memory, search and stages."""


from __future__ import annotations

from dataclasses import dataclass, field

from taps_core.costs.collectives import Phase
from taps_core.costs.ops import Memory
from taps_core.ir.strategies import Strategy


@dataclass(frozen=True)
class OpChoice:
    """What the plan does with one op: its sharding, ZeRO stage and its layer's recomputation
    (``recompute``: the whole layer re-runs in backward; ``selective``: only the attention
    core does, its scores not kept)."""

    strategy: Strategy
    zero: int = 0
    recompute: bool = False
    selective: bool = False


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
    selective: bool = False  # the layer's attention core re-runs in backward (scores not kept)


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
    tied_flows: tuple[tuple[int, int, float], ...] = ()  # its (src GPU, dst GPU, bytes per step)

    @property
    def layer_split(self) -> tuple[int, ...]:
        """Layers per stage, first stage first (0 for a stage without layers)."""
        return tuple(
            st.layers[1] - st.layers[0] + 1 if st.layers is not None else 0 for st in self.stages
        )

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
    search: SearchInfo = field(
        default_factory=lambda: SearchInfo(algorithm="manual", time_s=0.0, num_strategies=0)
    )
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
        return {op.name: OpChoice(op.strategy, op.zero, op.recompute, op.selective)
                for op in self.ops}

    @property
    def recomputed_layers(self) -> int:
        """Layers whose forward is recomputed in backward."""
        return len({op.layer for op in self.ops if op.recompute and op.layer is not None})

    @property
    def selective_layers(self) -> int:
        """Layers whose attention core alone is recomputed in backward (selective)."""
        return len({op.layer for op in self.ops if op.selective and op.layer is not None})


@dataclass(frozen=True)
class NotFitting:
    """A baseline that has no plan under the constraints, and why (one line)."""

    label: str
    reason: str
