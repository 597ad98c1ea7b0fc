"""What the benchmarks run: the full grid behind docs/RESULTS.md and the ``--quick`` slice."""

from __future__ import annotations

from dataclasses import dataclass, replace

from taps_core.ir.graph import OpGraph
from taps_core.models import build_graph, load_model_config
from taps_core.models.config import ModelConfig

QUALITY_MODELS = ("gpt2", "bert-large", "gpt3-175b", "llama3-70b", "mixtral-8x7b", "resnet50")
NODE_COUNTS = (1, 2, 4, 8, 16)
QUALITY_CLUSTERS = (
    *(f"dgx-a100:{n}" for n in NODE_COUNTS),
    *(f"dgx-h100:{n}" for n in NODE_COUNTS),
    "ethernet:2",
    "ethernet:4",
)
MODES = ("train", "infer")


@dataclass(frozen=True)
class BenchConfig:
    """Everything that decides what a run measures (recorded in results.json)."""

    name: str
    # 1. plan quality
    quality_models: tuple[str, ...] = QUALITY_MODELS
    quality_clusters: tuple[str, ...] = QUALITY_CLUSTERS
    modes: tuple[str, ...] = MODES
    quality_budget_s: float = 4 * 3600.0  # scenarios after this much compare time are skipped
    material_comm_s: float = 1e-3  # a reduction counts as material when the volume plan's
    material_comm_share: float = 0.01  # comm is >= 1 ms and >= 1% of its step time
    realistic_inter_share: float = 0.5  # ... and realistic when TAPS spreads >= half of its
    # compute over the nodes (not leaving them to repeat one node's work)
    # 2. search speed: a GPT with the gpt3-175b shapes, training, batch max(32, nodes)
    speed_model: str = "gpt3-175b"
    speed_mode: str = "train"
    speed_layers: tuple[int, ...] = (1, 2, 4, 8, 16, 96)
    speed_nodes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)  # dgx-a100:N, 8 GPUs each
    ilp_time_limit_s: float = 60.0
    ilp_max_vars: int = 2_500_000  # larger ILPs are not attempted (time limit would hit)
    plain_max_vars: int = 20_000_000  # plain elimination (no layer memo) up to this size
    # headline (a): the full planner on the largest cluster at Megatron-LM's GPT-3 batch (1536),
    # against the step Narayanan et al. 2021 measured there (TP 8 x PP 16 x DP 8, 31.5 s)
    headline_a: tuple[str, int, int, str, int | None] | None = (
        "gpt3-175b", 96, 128, "dgx-a100:128", 1536
    )
    headline_a_budget_s: float = 900.0  # the planner's time budget for headline (a)
    headline_a_measured_s: float | None = 31.5
    # headline (b): DP vs ILP on a small GPT of speed_model (layers, nodes of dgx-a100)
    headline_b: tuple[int, int] = (4, 2)
    headline_b_target: float = 50.0
    # 3. bandwidth sweeps (model, nodes) on clusters built like dgx-a100; training if it fits
    sweeps: tuple[tuple[str, int], ...] = (("gpt3-175b", 4), ("llama3-70b", 4))
    sweep_low_Bps: float = 1e9
    sweep_high_Bps: float = 400e9
    sweep_points: int = 17
    # bisection steps locating each plan change (3: to 5% of a 1.45x grid step; each is a
    # search, a minute at llama3-70b's memory-bound low-bandwidth points)
    sweep_refine_steps: int = 3
    # searches spent locating plan changes, over one sweep (changes left when they are spent
    # are reported at the bracket reached, "not narrowed down")
    sweep_locate_searches: int = 6
    # 4. pipelining: (model, cluster, global batch), each planned with and without stages
    pipeline_scenarios: tuple[tuple[str, str, int], ...] = (
        ("gpt2", "dgx-a100:4", 32),
        ("llama3-8b", "ethernet:4", 32),
        ("llama3-70b", "dgx-a100:8", 64),
        ("gpt3-175b", "dgx-a100:16", 128),
        ("gpt3-175b", "ethernet:16", 128),
    )
    pipeline_budget_s: float = 240.0


FULL = BenchConfig(name="full")

QUICK = BenchConfig(
    name="quick",
    quality_models=("gpt2", "mlp-2layer"),
    quality_clusters=("dgx-a100:1", "dgx-a100:2"),
    quality_budget_s=60.0,
    speed_model="gpt2",
    speed_layers=(1, 2),
    speed_nodes=(1, 2),
    ilp_time_limit_s=20.0,
    ilp_max_vars=400_000,
    headline_a=("gpt2", 12, 2, "dgx-a100:2", None),
    headline_a_measured_s=None,
    headline_b=(2, 1),
    sweeps=(("gpt2", 2),),
    sweep_points=4,
    sweep_refine_steps=2,
    pipeline_scenarios=(("gpt2", "dgx-a100:2", 16),),
    pipeline_budget_s=60.0,
)


def scaled_batch(cfg: ModelConfig, nodes: int) -> int:
    """The sample batch, raised to a multiple of the node count (at least one per node)."""
    batch = max(cfg.batch_size, nodes)
    return -(-batch // nodes) * nodes


def workload(model: str, nodes: int, layers: int | None = None) -> tuple[OpGraph, int, int]:
    """(graph, batch used, sample batch) of a sample model on ``nodes`` nodes."""
    cfg = load_model_config(model)
    batch = scaled_batch(cfg, nodes)
    changes: dict[str, int] = {"batch_size": batch}
    if layers is not None:
        changes["num_hidden_layers"] = layers
    return build_graph(replace(cfg, **changes)), batch, cfg.batch_size
