"""A plan JSON read into typed records and checked against the model it names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from taps_core.errors import InvalidInputError
from taps_core.models import build_graph, load_model_config
from taps_core.models.config import ModelConfig
from taps_core.plan.report import LETTER_NAMES


@dataclass(frozen=True)
class OpSplit:
    """One op of the plan: its splits per level (letter -> ways) and its memory levers."""

    name: str
    kind: str
    layer: int | None
    inter: dict[str, int]  # ways per letter across nodes
    intra: dict[str, int]  # ways per letter inside a node
    partial: bool  # hands its partial sums on (reduce-scatter into the reader's split)
    zero: int
    recompute: bool
    stage: int | None = None
    selective: bool = False  # the layer's attention core recomputed (selective recomputation)

    def batch_ways(self) -> tuple[int, int]:
        """(across nodes, inside a node) ways of the batch split."""
        return self.inter.get("b", 1), self.intra.get("b", 1)

    def model_ways(self) -> tuple[int, int]:
        """(across nodes, inside a node) ways of every non-batch split together."""
        return (
            math.prod(w for ch, w in self.inter.items() if ch != "b"),
            math.prod(w for ch, w in self.intra.items() if ch != "b"),
        )

    def model_letters(self) -> list[str]:
        """Split letters other than the batch, in first-seen order."""
        return [ch for ch in dict.fromkeys([*self.inter, *self.intra]) if ch != "b"]

    def words(self, letter: str) -> str:
        """``FFN 2 ways across nodes`` for one split letter."""
        name = LETTER_NAMES.get(letter, letter)
        i, j = self.inter.get(letter, 1), self.intra.get(letter, 1)
        if i > 1 and j > 1:
            return f"{name} {i * j} ways ({i} across nodes x {j} inside)"
        return f"{name} {i if i > 1 else j} ways {'across' if i > 1 else 'inside'} nodes"


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its layers (inclusive) and its share of the cluster."""

    index: int
    first: int | None  # None: a stage without transformer layers
    last: int | None
    nodes: int
    gpus: int

    @property
    def layers(self) -> int:
        return 0 if self.first is None or self.last is None else self.last - self.first + 1

    def holds(self, layer: int) -> bool:
        return self.first is not None and self.last is not None and self.first <= layer <= self.last


@dataclass(frozen=True)
class Pipeline:
    """The plan's ``pipeline``: stages, micro-batches per step and the schedule."""

    stages: tuple[Stage, ...]
    microbatches: int
    micro_batch_size: int | None
    schedule: str


@dataclass(frozen=True)
class PlanView:
    """The parts of a plan JSON that the exporters read."""

    label: str
    model_name: str
    parameters: int
    topology: str
    nodes: int
    gpus_per_node: int
    mode: str
    microbatches: int
    flash_attention: bool
    ops: tuple[OpSplit, ...]
    pipeline: Pipeline | None = None

    def op(self, name: str) -> OpSplit | None:
        return next((o for o in self.ops if o.name == name), None)

    @property
    def zero_stage(self) -> int:
        """The plan-wide ZeRO stage (ops without weights report 0)."""
        return max((o.zero for o in self.ops), default=0)

    @property
    def recomputed_layers(self) -> list[int]:
        return sorted({o.layer for o in self.ops if o.recompute and o.layer is not None})

    @property
    def selective_layers(self) -> list[int]:
        """Layers whose attention core alone is recomputed (selective recomputation)."""
        return sorted({o.layer for o in self.ops if o.selective and o.layer is not None})


def field_of(obj: Any, key: str, where: str, kind: type | tuple[type, ...], expected: str) -> Any:
    """``obj[key]`` checked against ``kind``; InvalidInputError names ``where.key`` otherwise."""
    if not isinstance(obj, dict) or key not in obj:
        raise InvalidInputError(f"{where}.{key}", "missing", f"present: {expected}")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        raise InvalidInputError(f"{where}.{key}", value, expected)
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def count_of(obj: Any, key: str, where: str, *, minimum: int = 1) -> int:
    value = field_of(obj, key, where, int, f"an integer >= {minimum}")
    if value < minimum:
        raise InvalidInputError(f"{where}.{key}", value, f"an integer >= {minimum}")
    return value


def _splits(obj: Any, where: str) -> dict[str, int]:
    if not isinstance(obj, dict):
        raise InvalidInputError(where, obj, 'an object of letter: ways, e.g. {"b": 2}')
    out = {}
    for letter, ways in obj.items():
        if not (isinstance(letter, str) and len(letter) == 1 and letter.isalpha()):
            raise InvalidInputError(f"{where} key", letter, "a one-letter dimension name")
        if isinstance(ways, bool) or not isinstance(ways, int) or ways < 1:
            raise InvalidInputError(f"{where}.{letter}", ways, "an integer >= 1")
        if ways > 1:
            out[letter] = ways
    return out


def select_plan(data: Any, label: str | None = None) -> tuple[dict[str, Any], str]:
    """The plan dict in ``data`` (a plan JSON, or ``compare`` JSON and a label) and its path."""
    if not isinstance(data, dict):
        raise InvalidInputError("plan JSON", type(data).__name__, "an object (plan --json)")
    if "plans" in data:
        plans = data["plans"]
        if not isinstance(plans, dict) or not plans:
            raise InvalidInputError("plans", plans, "an object of label: plan (compare --json)")
        label = label or ("taps" if "taps" in plans else next(iter(plans)))
        if label not in plans:
            raise InvalidInputError("--plan", label, f"one of {sorted(plans)}")
        plan = plans[label]
        if isinstance(plan, dict) and plan.get("fits") is False:
            raise InvalidInputError(
                f"plans.{label}",
                "a plan that does not fit",
                f"a fitting plan ({plan.get('reason', 'no reason given')})",
            )
        return plan, f"plans.{label}"
    if label is not None and data.get("label") not in (None, label):
        raise InvalidInputError("--plan", label, f"the file's own label {data.get('label')!r}")
    return data, "plan"


def read_plan(data: Any, label: str | None = None) -> PlanView:
    """Parse a plan JSON dict (or one plan of a ``compare`` JSON) into a :class:`PlanView`."""
    plan, where = select_plan(data, label)
    if not isinstance(plan, dict) or "ops" not in plan:
        raise InvalidInputError(
            f"{where}.ops",
            "missing",
            "a plan JSON (python -m taps_core plan MODEL --topology T --json plan.json)",
        )
    model = field_of(plan, "model", where, dict, "an object with name and parameters")
    topo = field_of(plan, "topology", where, dict, "an object with nodes and gpus_per_node")
    mode = field_of(plan, "mode", where, str, '"train" or "infer"')
    if mode not in ("train", "infer"):
        raise InvalidInputError(f"{where}.mode", mode, '"train" or "infer"')
    levers = plan.get("levers") or {}
    if not isinstance(levers, dict):
        raise InvalidInputError(f"{where}.levers", levers, "an object")
    raw_ops = field_of(plan, "ops", where, list, "a list of ops")
    if not raw_ops:
        raise InvalidInputError(f"{where}.ops", raw_ops, "a non-empty list of ops")
    ops = []
    for i, raw in enumerate(raw_ops):
        at = f"{where}.ops[{i}]"
        strategy = field_of(raw, "strategy", at, dict, "an object with inter and intra splits")
        layer = raw.get("layer")
        if layer is not None and (isinstance(layer, bool) or not isinstance(layer, int)):
            raise InvalidInputError(f"{at}.layer", layer, "an integer or null")
        stage = raw.get("stage")
        if stage is not None and (isinstance(stage, bool) or not isinstance(stage, int)):
            raise InvalidInputError(f"{at}.stage", stage, "an integer or null")
        zero = raw.get("zero_stage", 0)
        if zero not in (0, 1, 2, 3) or isinstance(zero, bool):
            raise InvalidInputError(f"{at}.zero_stage", zero, "0, 1, 2 or 3")
        ops.append(
            OpSplit(
                name=field_of(raw, "name", at, str, "the op's name"),
                kind=str(raw.get("kind", "")),
                layer=layer,
                inter=_splits(strategy.get("inter", {}), f"{at}.strategy.inter"),
                intra=_splits(strategy.get("intra", {}), f"{at}.strategy.intra"),
                partial=strategy.get("partial") is True,
                zero=zero,
                recompute=raw.get("recompute") is True,
                stage=stage,
                selective=raw.get("selective_recompute") is True,
            )
        )
    micro = levers.get("microbatches", 1)
    if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1:
        raise InvalidInputError(f"{where}.levers.microbatches", micro, "an integer >= 1")
    view = PlanView(
        label=str(plan.get("label", where)),
        model_name=field_of(model, "name", f"{where}.model", str, "the model's name"),
        parameters=count_of(model, "parameters", f"{where}.model"),
        topology=str(topo.get("name", "")),
        nodes=count_of(topo, "nodes", f"{where}.topology"),
        gpus_per_node=count_of(topo, "gpus_per_node", f"{where}.topology"),
        mode=mode,
        microbatches=micro,
        flash_attention=levers.get("flash_attention") is True,
        ops=tuple(ops),
        pipeline=_read_pipeline(plan.get("pipeline"), f"{where}.pipeline"),
    )
    _check_levels(view, where)
    return view


def _read_pipeline(raw: Any, where: str) -> Pipeline | None:
    """The optional ``pipeline`` object (None when absent or null)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidInputError(where, raw, "null or an object with stages and microbatches")
    stages_raw = field_of(raw, "stages", where, list, "a list of stages")
    if not stages_raw:
        raise InvalidInputError(f"{where}.stages", stages_raw, "a non-empty list")
    stages = []
    for i, st in enumerate(stages_raw):
        at = f"{where}.stages[{i}]"
        if not isinstance(st, dict):
            raise InvalidInputError(at, st, "an object with layers, nodes and gpus")
        layers = st.get("layers")
        if layers is None:
            layers = [None, None]
        elif (
            not isinstance(layers, list)
            or len(layers) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in layers)
            or layers[0] > layers[1]
        ):
            raise InvalidInputError(f"{at}.layers", layers, "[first, last] with first <= last")
        key = "nodes" if "nodes" in st or "hosts" not in st else "hosts"
        nodes = field_of(st, key, at, (list, int), "a list of node indices")
        gpus = field_of(st, "gpus", at, (list, int), "a GPU count or list")
        n_nodes = len(nodes) if isinstance(nodes, list) else nodes
        n_gpus = len(gpus) if isinstance(gpus, list) else gpus
        if n_nodes < 1 or n_gpus < 1 or n_gpus % n_nodes:
            raise InvalidInputError(
                f"{at}.gpus", gpus, f"a positive multiple of its {n_nodes} node(s)"
            )
        index = st.get("index", i)
        if index != i:
            raise InvalidInputError(f"{at}.index", index, f"{i} (stages in order)")
        stages.append(Stage(i, layers[0], layers[1], n_nodes, n_gpus))
    mbs = raw.get("micro_batch_size")
    if mbs is not None and (isinstance(mbs, bool) or not isinstance(mbs, int) or mbs < 1):
        raise InvalidInputError(f"{where}.micro_batch_size", mbs, "an integer >= 1 or null")
    return Pipeline(
        stages=tuple(stages),
        microbatches=count_of(raw, "microbatches", where),
        micro_batch_size=mbs,
        schedule=str(raw.get("schedule") or "1F1B"),
    )


def _check_levels(view: PlanView, where: str) -> None:
    """Every op's splits must fit its level (the planner guarantees it; a hand edit may not)."""
    for i, op in enumerate(view.ops):
        nodes, gpn = view.nodes, view.gpus_per_node
        if view.pipeline is not None:
            if op.stage is None or not 0 <= op.stage < len(view.pipeline.stages):
                raise InvalidInputError(
                    f"{where}.ops[{i}].stage",
                    op.stage,
                    f"a stage index in [0, {len(view.pipeline.stages) - 1}]",
                )
            st = view.pipeline.stages[op.stage]
            nodes, gpn = st.nodes, st.gpus // st.nodes
        for level, splits, size in (("inter", op.inter, nodes), ("intra", op.intra, gpn)):
            ways = math.prod(splits.values())
            if size % ways:
                raise InvalidInputError(
                    f"{where}.ops[{i}].strategy.{level}",
                    splits,
                    f"splits whose product divides the level's {size} GPUs",
                )


# ---- the workload: architecture, batch, sequence, dtype ----------------------------------------


@dataclass(frozen=True)
class Workload:
    """The model config behind the plan (architecture and workload) and where it came from."""

    config: ModelConfig
    source: str

    @property
    def family(self) -> str:
        return self.config.model_type


def resolve_workload(
    view: PlanView,
    *,
    model: str | None = None,
    batch: int | None = None,
    seq: int | None = None,
    dtype: str | None = None,
) -> Workload:
    """Load the plan's model (or ``model``) and check it is the one the plan was made for."""
    spec = model or view.model_name
    try:
        cfg = load_model_config(spec)
    except InvalidInputError:
        raise InvalidInputError(
            "--model" if model else "model.name",
            spec,
            "a sample model name or a config.json path (pass --model CONFIG.json: the config "
            "the plan was made from)",
        ) from None
    cfg = cfg.with_workload(batch_size=batch, seq_length=seq, dtype=dtype)
    graph = build_graph(cfg)
    if int(graph.num_parameters) != view.parameters:
        raise InvalidInputError(
            "model.parameters",
            view.parameters,
            f"{int(graph.num_parameters)}, the parameter count of {spec} (pass --model with the "
            "config the plan was made from)",
        )
    names = {op.name for op in graph.ops}
    stray = next((o.name for o in view.ops if o.name not in names), None)
    if stray is not None:
        raise InvalidInputError(
            "ops[].name",
            stray,
            f"an op of {spec} (pass --model with the config the plan was made from)",
        )
    check_divisible(view, graph)
    return Workload(cfg, "--model " + spec if model else f"sample config {spec}")


def check_divisible(view: PlanView, graph: Any) -> None:
    """Every split letter belongs to the op and divides its size (the vocabulary is padded)."""
    specs = {op.name: op for op in graph.ops}
    for i, o in enumerate(view.ops):
        spec = specs[o.name]
        sizes = graph.dim_sizes(spec)
        for ch in dict.fromkeys([*o.inter, *o.intra]):
            ways = o.inter.get(ch, 1) * o.intra.get(ch, 1)
            if ch not in sizes:
                raise InvalidInputError(
                    f"ops[{i}].strategy",
                    f"{o.name} splits {ch!r}",
                    f"splits of the letters of {spec.einsum}",
                )
            if ch != "b" and sizes[ch] % ways and ch not in spec.padded:
                raise InvalidInputError(
                    f"ops[{i}].strategy",
                    f"{o.name} splits {LETTER_NAMES.get(ch, ch)} ({sizes[ch]}) {ways} ways",
                    "splits that divide the dimension (pass the --model/--seq the plan used)",
                )


def per_replica_micro(view: PlanView, wl: Workload, dp: int) -> tuple[int, int]:
    """(micro-batches per step, samples per micro-batch per data-parallel replica)."""
    batch = wl.config.batch_size
    k = view.pipeline.microbatches if view.pipeline else view.microbatches
    if batch % (k * dp):
        raise InvalidInputError(
            "batch",
            batch,
            f"a multiple of {k * dp} ({k} micro-batches x {dp} data-parallel "
            "replicas): pass the --batch the plan was made with",
        )
    micro = batch // (k * dp)
    given = view.pipeline.micro_batch_size if view.pipeline else None
    if given is not None and given not in (micro, micro * dp):
        raise InvalidInputError(
            "pipeline.micro_batch_size",
            given,
            f"{micro * dp} (batch {batch} / {k} micro-batches) or {micro} "
            "per replica: pass the --batch the plan was made with",
        )
    return k, micro




def workload_note(wl: Workload) -> str:
    c = wl.config
    return (
        f"workload: batch {c.batch_size}, sequence {c.seq_length}, {c.dtype} (the plan's "
        f"recorded workload where it has one, else the {wl.source}; --batch/--seq/--dtype "
        "override it)"
    )


def recompute_per_stage(view: PlanView) -> tuple[list[int], list[int]]:
    """(recomputed layers, layers) per pipeline stage (one entry without a pipeline)."""
    done = set(view.recomputed_layers)
    if view.pipeline is None:
        layers = sorted({o.layer for o in view.ops if o.layer is not None})
        return [len(done)], [len(layers)]
    return (
        [sum(st.holds(x) for x in done) for st in view.pipeline.stages],
        [st.layers for st in view.pipeline.stages],
    )


# ---- Megatron-LM ---------------------------------------------------------------------------------

