"""Plans exported to the frameworks that run them: Megatron-LM, DeepSpeed and PyTorch DTensor.

``python -m taps_core export PLAN.json --format megatron|deepspeed|dtensor [--out PATH]`` reads
a plan JSON (``plan --json``; or one plan of ``compare --json``, chosen with ``--plan LABEL``)
and writes what the framework takes: Megatron-LM command-line arguments, a DeepSpeed config, or
a DTensor ``parallelize_module`` plan (JSON, or a runnable Python snippet when PATH ends in
``.py``).

The rule: a plan is exported only when the framework can run *that* plan, the same splits on
the same GPUs. Otherwise :class:`NotExpressibleError` gives one line naming the first op (or lever)
the framework has no words for, and the CLI exits with code 3. What maps to what, with ``t``
the GPUs that share one batch slice (the tensor-parallel group) and ``dp`` the batch ways:

- batch ``b`` split ``dp`` ways in total -> data parallelism (one size for every op);
- heads ``n`` on Q/K/V/attention -> column-parallel, on the output projection (a contraction)
  -> row-parallel; FFN ``f`` on up/gate -> column, on down -> row; vocabulary ``v`` on the
  embedding -> vocab-parallel (row), on the LM head -> column, on the loss -> vocab-parallel
  cross entropy;
- sequence ``s`` on norms, residual adds and the position embedding -> sequence parallelism
  (a row-parallel op with ``"partial": true`` then reduce-scatters into it);
- ZeRO stage, recomputed layers and micro-batches from the plan's levers; ``pipeline`` stages
  (when the plan has them) -> pipeline parallelism.

The plan JSON names the model but not the workload: the batch, sequence length and dtype come
from the sample config (or ``--model CONFIG.json``) unless ``--batch``/``--seq``/``--dtype``
say otherwise, as they did for ``plan``; the model's parameter count and op names are checked
against the plan. Nothing here imports torch: the DTensor snippet imports it when run.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taps_core import strict_json
from taps_core.errors import InvalidInputError, TapsError
from taps_core.models import build_graph, load_model_config
from taps_core.models.config import DTYPE_BYTES, ModelConfig
from taps_core.report import LETTER_NAMES

FORMATS = ("megatron", "deepspeed", "dtensor")
EXIT_NOT_EXPRESSIBLE = 3  # the plan is valid but the framework cannot run it as planned
FRAMEWORK = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "dtensor": "DTensor"}
PLAN_FILE_LIMIT = "topology_file_bytes"  # plan JSON files share the 32 MiB bound of topologies
GPT_FAMILIES = ("gpt2", "gpt3", "llama", "mistral")  # dense decoders with HF module names


class NotExpressibleError(TapsError):
    """The plan is valid, but the target framework cannot run it as planned (one-line reason)."""


# ---- the plan JSON, read into typed records ----------------------------------------------------


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


def _field(obj: Any, key: str, where: str, kind: type | tuple[type, ...], expected: str) -> Any:
    """``obj[key]`` checked against ``kind``; InvalidInputError names ``where.key`` otherwise."""
    if not isinstance(obj, dict) or key not in obj:
        raise InvalidInputError(f"{where}.{key}", "missing", f"present: {expected}")
    value = obj[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        raise InvalidInputError(f"{where}.{key}", value, expected)
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _count(obj: Any, key: str, where: str, *, minimum: int = 1) -> int:
    value = _field(obj, key, where, int, f"an integer >= {minimum}")
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
    model = _field(plan, "model", where, dict, "an object with name and parameters")
    topo = _field(plan, "topology", where, dict, "an object with nodes and gpus_per_node")
    mode = _field(plan, "mode", where, str, '"train" or "infer"')
    if mode not in ("train", "infer"):
        raise InvalidInputError(f"{where}.mode", mode, '"train" or "infer"')
    levers = plan.get("levers") or {}
    if not isinstance(levers, dict):
        raise InvalidInputError(f"{where}.levers", levers, "an object")
    raw_ops = _field(plan, "ops", where, list, "a list of ops")
    if not raw_ops:
        raise InvalidInputError(f"{where}.ops", raw_ops, "a non-empty list of ops")
    ops = []
    for i, raw in enumerate(raw_ops):
        at = f"{where}.ops[{i}]"
        strategy = _field(raw, "strategy", at, dict, "an object with inter and intra splits")
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
                name=_field(raw, "name", at, str, "the op's name"),
                kind=str(raw.get("kind", "")),
                layer=layer,
                inter=_splits(strategy.get("inter", {}), f"{at}.strategy.inter"),
                intra=_splits(strategy.get("intra", {}), f"{at}.strategy.intra"),
                partial=strategy.get("partial") is True,
                zero=zero,
                recompute=raw.get("recompute") is True,
                stage=stage,
            )
        )
    micro = levers.get("microbatches", 1)
    if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1:
        raise InvalidInputError(f"{where}.levers.microbatches", micro, "an integer >= 1")
    view = PlanView(
        label=str(plan.get("label", where)),
        model_name=_field(model, "name", f"{where}.model", str, "the model's name"),
        parameters=_count(model, "parameters", f"{where}.model"),
        topology=str(topo.get("name", "")),
        nodes=_count(topo, "nodes", f"{where}.topology"),
        gpus_per_node=_count(topo, "gpus_per_node", f"{where}.topology"),
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
    stages_raw = _field(raw, "stages", where, list, "a list of stages")
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
        nodes = _field(st, key, at, (list, int), "a list of node indices")
        gpus = _field(st, "gpus", at, (list, int), "a GPU count or list")
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
        microbatches=_count(raw, "microbatches", where),
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
    _check_divisible(view, graph)
    return Workload(cfg, "--model " + spec if model else f"sample config {spec}")


def _check_divisible(view: PlanView, graph: Any) -> None:
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


def _per_replica_micro(view: PlanView, wl: Workload, dp: int) -> tuple[int, int]:
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


# ---- what each op is: roles, and the one letter a framework may split it on --------------------

_LAYER = re.compile(r"^L(\d+)\.(.+)$")
# op name (without the ``L{i}.`` prefix) -> role
_ROLE_OF = {
    name: r
    for r, names in (
        ("embed", "embed"),
        ("pos", "embed_pos"),
        ("norm", "ln1 ln2 ln_f"),
        ("add", "add1 add2"),
        ("qkv", "attn.q attn.k attn.v"),
        ("core", "attn.core"),
        ("out", "attn.o"),
        ("up", "mlp.up mlp.gate fc1"),  # fc1, gelu, fc2: the 2-layer MLP
        ("act", "mlp.gelu mlp.swiglu gelu"),
        ("down", "mlp.down fc2"),
        ("head", "lm_head"),
        ("loss", "loss"),
    )
    for name in names.split()
}
# role -> (the one letter a framework splits it on, how the framework splits it)
_ROLES = {
    "embed": ("v", "the token embedding only on the vocabulary (vocab-parallel)"),
    "pos": ("s", "the position embedding only on the sequence (sequence parallelism)"),
    "norm": ("s", "a norm only on the sequence (sequence parallelism)"),
    "add": ("s", "a residual add only on the sequence (sequence parallelism)"),
    "qkv": ("n", "Q, K and V only on heads (column-parallel)"),
    "core": ("n", "attention only on heads"),
    "out": ("n", "the attention output projection only on heads (row-parallel)"),
    "up": ("f", "an MLP up/gate projection only on FFN (column-parallel)"),
    "act": ("f", "the MLP activation only on FFN"),
    "down": ("f", "an MLP down projection only on FFN (row-parallel)"),
    "head": ("v", "the LM head only on the vocabulary (column-parallel)"),
    "loss": ("v", "the loss only on the vocabulary (vocab-parallel cross entropy)"),
}
TENSOR_ROLES = frozenset({"embed", "qkv", "core", "out", "up", "act", "down", "head"})
EDGE_ROLES = frozenset({"embed", "head"})  # Megatron splits them anyway: a note, not a refusal
SEQUENCE_ROLES = frozenset({"pos", "norm", "add"})


def role(name: str) -> str | None:
    """The op's role (``qkv``, ``down``, ``norm``, ...), or None for ops no framework names."""
    m = _LAYER.match(name)
    return _ROLE_OF.get(m.group(2) if m else name)


@dataclass(frozen=True)
class Grid:
    """How one group of GPUs (the cluster, or one pipeline stage) divides: batch x tensor ways.

    ``dp_*`` are the batch ways per level; the rest of each level is the tensor-parallel group.
    Ranks are numbered node-major (rank = node x GPUs per node + local GPU), tensor-parallel
    ranks innermost on each level.
    """

    nodes: int
    gpus_per_node: int
    dp_inter: int
    dp_intra: int
    split: dict[str, str | None] = field(default_factory=dict)  # op -> its split letter

    @property
    def tp_inter(self) -> int:
        return self.nodes // self.dp_inter

    @property
    def tp_intra(self) -> int:
        return self.gpus_per_node // self.dp_intra

    @property
    def dp(self) -> int:
        return self.dp_inter * self.dp_intra

    @property
    def tp(self) -> int:
        return self.tp_inter * self.tp_intra

    def ranks(self) -> list[list[int]]:
        """The dp x tp matrix of ranks (row = one data-parallel replica's tensor group)."""
        out = []
        for d in range(self.dp):
            dn, dl = divmod(d, self.dp_intra)
            row = []
            for t in range(self.tp):
                tn, tl = divmod(t, self.tp_intra)
                node = dn * self.tp_inter + tn
                row.append(node * self.gpus_per_node + dl * self.tp_intra + tl)
            out.append(row)
        return out


def grid(ops: list[OpSplit] | tuple[OpSplit, ...], nodes: int, gpus_per_node: int, fw: str) -> Grid:
    """The data x tensor grid of ``ops``, or NotExpressibleError naming the op that breaks it.

    Every op must split the batch the same ways; every other split must be one letter, the
    one its role allows, over the whole tensor-parallel group (or no split: replicated).
    """
    first = ops[0]
    for op in ops:
        if op.batch_ways() != first.batch_ways():
            raise NotExpressibleError(
                f"op {op.name} splits the batch {_ways(op.batch_ways())} but op {first.name} "
                f"{_ways(first.batch_ways())}: {fw} keeps one data-parallel size for every op"
            )
    g = Grid(nodes, gpus_per_node, *first.batch_ways())
    for level, size, used in (
        ("nodes", g.tp_inter, any(o.model_ways()[0] > 1 for o in ops)),
        ("GPUs of a node", g.tp_intra, any(o.model_ways()[1] > 1 for o in ops)),
    ):
        if size > 1 and not used:
            raise NotExpressibleError(
                f"no op splits anything but the batch over the {level}, so {size} of them "
                f"repeat each other's work: {fw} has no replicated copies (plan for "
                f"{'fewer nodes' if level == 'nodes' else 'fewer GPUs per node'} instead)"
            )
    for op in ops:
        letters = op.model_letters()
        if len(letters) > 1:
            raise NotExpressibleError(
                f"op {op.name} splits {' and '.join(op.words(ch) for ch in letters)} (a 2-D "
                f"split): {fw} splits an op on one dimension of its tensor-parallel group"
            )
        ways = op.model_ways()
        if letters and ways != (g.tp_inter, g.tp_intra):
            raise NotExpressibleError(
                f"op {op.name} splits {op.words(letters[0])}, not over all {g.tp} GPUs of its "
                f"tensor-parallel group: {fw} splits an op over the whole group or not at all"
            )
        r = role(op.name)
        if r is None:
            raise NotExpressibleError(
                f"op {op.name} ({op.kind or 'unknown kind'}) has no "
                f"counterpart in {fw}'s module plans"
            )
        if letters and letters[0] != _ROLES[r][0]:
            where = op.words(letters[0])
            raise NotExpressibleError(f"op {op.name} splits {where}: {fw} splits {_ROLES[r][1]}")
        g.split[op.name] = letters[0] if letters else None
    return g


def _ways(batch: tuple[int, int]) -> str:
    i, j = batch
    return (
        f"{i * j} ways ({i} across nodes x {j} inside)"
        if i > 1 and j > 1
        else (f"{i * j} way{'s' if i * j > 1 else ''}")
    )


def _groups(view: PlanView) -> list[tuple[Stage | None, list[OpSplit], int, int]]:
    """(stage, its ops, nodes, GPUs per node) per pipeline stage, or once for the whole plan."""
    if view.pipeline is None:
        return [(None, list(view.ops), view.nodes, view.gpus_per_node)]
    out = []
    for st in view.pipeline.stages:
        ops = [o for o in view.ops if o.stage == st.index]
        if not ops:
            raise InvalidInputError(
                f"pipeline.stages[{st.index}]", "no ops", "a stage that holds ops (ops[].stage)"
            )
        out.append((st, ops, st.nodes, st.gpus // st.nodes))
    return out


def _uniform_grids(view: PlanView, fw: str) -> tuple[list[Grid], Grid]:
    """Grids per stage, all of the same shape (``fw`` has one TP/DP size), and the first."""
    grids = [grid(ops, n, g, fw) for _, ops, n, g in _groups(view)]
    for i, g in enumerate(grids[1:], start=1):
        if (g.tp, g.dp) != (grids[0].tp, grids[0].dp):
            raise NotExpressibleError(
                f"pipeline stage {i} runs tensor-parallel {g.tp} x data-parallel {g.dp}, stage 0 "
                f"{grids[0].tp} x {grids[0].dp}: {fw} uses one size of each for every stage"
            )
    return grids, grids[0]


def _sequence_parallel(view: PlanView, grids: list[Grid], fw: str) -> bool:
    """True when every norm, add and position embedding is sequence-split; refuse a mix."""
    letter = {name: ch for g in grids for name, ch in g.split.items()}
    seq = [o for o in view.ops if role(o.name) in SEQUENCE_ROLES]
    split = [o for o in seq if letter.get(o.name) == "s"]
    if split and len(split) != len(seq):
        whole = next(o for o in seq if letter.get(o.name) != "s")
        raise NotExpressibleError(
            f"op {split[0].name} is sequence-split but op {whole.name} is not: {fw}'s sequence "
            "parallelism covers every norm and residual add or none"
        )
    return bool(split)


def _family(wl: Workload, fw: str, families: tuple[str, ...] = GPT_FAMILIES) -> None:
    if wl.family not in families:
        raise NotExpressibleError(
            f"model family {wl.family}: this export covers {', '.join(families)} for {fw}"
        )


# ---- the result ----------------------------------------------------------------------------------


@dataclass
class Export:
    """One export: the artifact's text, its data, and notes for the person running it."""

    format: str
    text: str  # what goes to the file or stdout
    data: Any  # the same as JSON-able data (arguments list, config dict, DTensor plan)
    notes: list[str] = field(default_factory=list)
    python: str | None = None  # DTensor only: the runnable snippet


def _workload_note(wl: Workload) -> str:
    c = wl.config
    return (
        f"workload: batch {c.batch_size}, sequence {c.seq_length}, {c.dtype} (the plan's "
        f"recorded workload where it has one, else the {wl.source}; --batch/--seq/--dtype "
        "override it)"
    )


def _recompute_per_stage(view: PlanView) -> tuple[list[int], list[int]]:
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


def to_megatron(view: PlanView, wl: Workload) -> Export:
    """Megatron-LM arguments for the plan, or NotExpressibleError with the first reason."""
    fw = FRAMEWORK["megatron"]
    _family(wl, fw)
    grids, g = _uniform_grids(view, fw)
    if g.tp_inter > 1 and g.dp_intra > 1:
        raise NotExpressibleError(
            f"the plan splits tensors across nodes ({g.tp_inter} ways) and the batch inside them "
            f"({g.dp_intra} ways): {fw} places tensor-parallel ranks innermost, inside a node"
        )
    whole = [
        o.name
        for gg in grids
        for o in view.ops
        if g.tp > 1 and role(o.name) in TENSOR_ROLES and gg.split.get(o.name, "") is None
    ]
    layer_op = next((n for n in whole if role(n) not in EDGE_ROLES), None)
    if layer_op is not None:
        raise NotExpressibleError(
            f"op {layer_op} is replicated over the {g.tp} GPUs of a tensor-parallel group: "
            f"{fw} splits every layer's heads and FFN over the group"
        )
    sp = _sequence_parallel(view, grids, fw)
    pp = len(view.pipeline.stages) if view.pipeline else 1
    c = wl.config
    notes = [
        _workload_note(wl),
        f"data-parallel size {g.dp} (implied: {g.dp * g.tp * pp} GPUs / (TP {g.tp} x PP {pp}))",
    ]
    if whole:
        notes.append(
            f"the plan keeps {' and '.join(whole)} whole on every GPU; {fw} always splits the "
            "embedding and LM head over the vocabulary (a little less memory, one more "
            "all-reduce)"
        )
    args: list[str] = [
        "--tensor-model-parallel-size",
        str(g.tp),
        "--pipeline-model-parallel-size",
        str(pp),
    ]
    if sp:
        args.append("--sequence-parallel")
    args += _megatron_pipeline(view, fw)
    k, micro = _per_replica_micro(view, wl, g.dp)
    args += ["--micro-batch-size", str(micro)]
    if view.mode == "train":
        args += ["--global-batch-size", str(c.batch_size)]
        args += _megatron_levers(view, fw, notes, g.dp)
        if k > 1 and view.pipeline is None:
            notes.append(
                f"{k} micro-batches per step: Megatron accumulates global / (micro x dp) "
                f"= {k} of them"
            )
    elif view.zero_stage:
        raise NotExpressibleError(
            f"ZeRO stage {view.zero_stage} in inference (weights sharded over "
            f"data-parallel ranks, gathered before use): {fw} has no such mode"
        )
    else:
        notes.append(
            "inference plan: use these with Megatron-LM's inference tools "
            "(e.g. tools/run_text_generation_server.py)"
        )
    args += _megatron_model(c, view)
    return Export(
        "megatron",
        " ".join(args),
        {
            "args": args,
            "tensor_parallel": g.tp,
            "pipeline_parallel": pp,
            "data_parallel": g.dp,
            "sequence_parallel": sp,
        },
        notes,
    )


def _megatron_pipeline(view: PlanView, fw: str) -> list[str]:
    """Uneven first/last stage arguments; refuse stage layouts Megatron cannot take."""
    if view.pipeline is None:
        return []
    p = view.pipeline
    if p.schedule.upper() != "1F1B":
        raise NotExpressibleError(
            f"pipeline schedule {p.schedule}: this export writes {fw}'s default 1F1B schedule only"
        )
    expect = 0
    for st in p.stages:
        if st.first is None or st.last is None:
            raise NotExpressibleError(
                f"pipeline stage {st.index} holds no transformer layer: every {fw} stage does"
            )
        if st.first != expect:
            raise InvalidInputError(
                f"pipeline.stages[{st.index}].layers",
                [st.first, st.last],
                f"layers starting at {expect} (stages in layer order)",
            )
        expect = st.last + 1
    embed, head = view.op("embed"), view.op("lm_head")
    last = len(p.stages) - 1
    if (embed and embed.stage != 0) or (head and head.stage != last):
        raise NotExpressibleError(
            f"the embedding or LM head is not on the first / last stage: {fw} puts them there"
        )
    sizes = [st.layers for st in p.stages]
    if len(set(sizes)) == 1 or len(sizes) == 1:
        return []
    middle = sizes[1:-1]
    if len(set(middle)) > 1:
        raise NotExpressibleError(
            f"pipeline stages hold {sizes} layers: {fw} splits layers evenly "
            "apart from the first and last stage"
        )
    args = []
    if not middle or sizes[0] != middle[0]:
        args += ["--decoder-first-pipeline-num-layers", str(sizes[0])]
    if not middle or sizes[-1] != middle[0]:
        args += ["--decoder-last-pipeline-num-layers", str(sizes[-1])]
    return args


def _megatron_levers(view: PlanView, fw: str, notes: list[str], dp: int) -> list[str]:
    """ZeRO stage and recomputation as Megatron training arguments."""
    args: list[str] = []
    z = view.zero_stage if dp > 1 else 0  # sharding over one data-parallel rank is a no-op
    if z in (1, 2):
        args.append("--use-distributed-optimizer")
        notes.append(
            f"ZeRO-{z}: Megatron's distributed optimizer shards the optimizer state "
            "over data-parallel ranks and reduce-scatters the gradients"
        )
    elif z == 3:
        if view.pipeline is not None:
            raise NotExpressibleError(
                f"ZeRO-3 with pipeline stages: {fw}'s FSDP2 mode "
                "(--use-torch-fsdp2) does not work with pipeline parallelism"
            )
        args.append("--use-torch-fsdp2")
        notes.append("ZeRO-3 as Megatron's --use-torch-fsdp2 (marked experimental upstream)")
    done, total = _recompute_per_stage(view)
    if any(done):
        if done == total:
            args += [
                "--recompute-granularity",
                "full",
                "--recompute-method",
                "uniform",
                "--recompute-num-layers",
                "1",
            ]
        elif len(set(done)) == 1:
            args += [
                "--recompute-granularity",
                "full",
                "--recompute-method",
                "block",
                "--recompute-num-layers",
                str(done[0]),
            ]
            notes.append(
                f"the plan recomputes layers {_ranges(view.recomputed_layers)}; "
                f"--recompute-method block recomputes the first {done[0]} of each "
                "stage: the same number of identical layers"
            )
        else:
            raise NotExpressibleError(
                f"pipeline stages recompute {done} layers: {fw}'s "
                "--recompute-num-layers is one number for every stage"
            )
    return args


def _megatron_model(c: ModelConfig, view: PlanView) -> list[str]:
    """Model shape and dtype arguments."""
    args = [
        "--num-layers",
        str(c.num_hidden_layers),
        "--hidden-size",
        str(c.hidden_size),
        "--num-attention-heads",
        str(c.num_attention_heads),
        "--ffn-hidden-size",
        str(c.ffn_size),
        "--seq-length",
        str(c.seq_length),
        "--max-position-embeddings",
        str(max(c.max_position_embeddings, c.seq_length)),
        "--vocab-size",
        str(c.vocab_size),
    ]
    if c.model_type in ("llama", "mistral"):
        args += [
            "--swiglu",
            "--normalization",
            "RMSNorm",
            "--position-embedding-type",
            "rope",
            "--disable-bias-linear",
        ]
        if c.kv_heads != c.num_attention_heads:
            args += ["--group-query-attention", "--num-query-groups", str(c.kv_heads)]
    if not c.tie_word_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if view.flash_attention:
        args.append("--use-flash-attn")
    if DTYPE_BYTES[c.dtype] == 2:
        args.append("--bf16" if "b" in c.dtype else "--fp16")
    return args


def _ranges(xs: list[int]) -> str:
    """``0-3, 7`` for sorted integers."""
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(f"{start}-{x}" if x > start else str(x))
            start = None
    return ", ".join(out)


# ---- DeepSpeed -----------------------------------------------------------------------------------


def to_deepspeed(view: PlanView, wl: Workload) -> Export:
    """A DeepSpeed config for the plan, or NotExpressibleError with the first reason."""
    fw = FRAMEWORK["deepspeed"]
    tensor_op = next((o for o in view.ops if o.model_letters()), None)
    c = wl.config
    notes = [_workload_note(wl)]
    if view.mode == "infer":
        return _deepspeed_inference(view, wl, notes)
    if tensor_op is not None:
        raise NotExpressibleError(
            f"op {tensor_op.name} splits {tensor_op.words(tensor_op.model_letters()[0])}: "
            f"tensor splits need Megatron-DeepSpeed ({fw}'s config has no tensor parallelism; "
            "--format megatron writes the arguments)"
        )
    _, g = _uniform_grids(view, fw)
    z = view.zero_stage
    if view.pipeline is not None:
        if z >= 2:
            raise NotExpressibleError(
                f"ZeRO-{z} with pipeline stages: {fw}'s pipeline engine takes "
                "ZeRO stage 0 or 1 only"
            )
        if len({st.layers for st in view.pipeline.stages}) > 1:
            raise NotExpressibleError(
                f"pipeline stages hold {[st.layers for st in view.pipeline.stages]} layers: "
                f"{fw}'s PipelineModule partitions layers evenly (partition_method)"
            )
        notes.append(
            f"pipeline: build the model as deepspeed.pipe.PipelineModule(layers, "
            f"num_stages={len(view.pipeline.stages)}, partition_method='type:<block "
            "class name>') ; gradient_accumulation_steps is its micro-batch count"
        )
    k, micro = _per_replica_micro(view, wl, g.dp)
    cfg: dict[str, Any] = {
        "train_batch_size": c.batch_size,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": k,
        "zero_optimization": {"stage": z},
    }
    cfg.update(_deepspeed_dtype(c))
    if view.recomputed_layers:
        cfg["activation_checkpointing"] = {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
        }
        notes.append(
            f"recompute layers {_ranges(view.recomputed_layers)}: wrap those blocks' "
            "forward in deepspeed.checkpointing.checkpoint (the config section only "
            "configures it)"
        )
    notes.append(
        f"data-parallel size {g.dp}: train_batch_size = micro x accumulation x {g.dp} GPUs"
    )
    return Export("deepspeed", json.dumps(cfg, indent=2), cfg, notes)


def _deepspeed_dtype(c: ModelConfig) -> dict[str, Any]:
    if DTYPE_BYTES[c.dtype] == 4:
        return {}
    if "b" in c.dtype:
        return {"bf16": {"enabled": True}}
    return {"fp16": {"enabled": True, "loss_scale": 0}}


def _deepspeed_inference(view: PlanView, wl: Workload, notes: list[str]) -> Export:
    """``deepspeed.init_inference`` kwargs (AutoTP) or a ZeRO-Inference config."""
    fw = "DeepSpeed-Inference"
    if view.pipeline is not None:
        raise NotExpressibleError(f"pipeline stages: {fw} has no pipeline parallelism")
    _, g = _uniform_grids(view, fw)
    c = wl.config
    dtype = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16"}.get(
        c.dtype, "fp32"
    )
    if view.zero_stage:
        if g.tp > 1:
            raise NotExpressibleError(
                f"tensor splits with ZeRO-{view.zero_stage} in inference: "
                f"{fw}'s ZeRO-Inference shards weights without tensor splits"
            )
        _, micro = _per_replica_micro(view, wl, g.dp)
        cfg: dict[str, Any] = {
            "train_micro_batch_size_per_gpu": micro,
            "zero_optimization": {"stage": 3},
            **_deepspeed_dtype(c),
        }
        notes.append(
            "ZeRO-Inference: deepspeed.initialize(model=model, config=this)[0].module "
            "then eval(); weights are gathered before use as planned"
        )
        return Export("deepspeed", json.dumps(cfg, indent=2), cfg, notes)
    if g.tp > 1:
        _family(wl, fw)
        if _sequence_parallel(view, [g], fw):
            raise NotExpressibleError(
                f"sequence-split norms: {fw}'s automatic tensor parallelism "
                "keeps activations whole between layers"
            )
        for op in view.ops:
            if role(op.name) in TENSOR_ROLES - {"embed", "head"} and g.split[op.name] is None:
                raise NotExpressibleError(
                    f"op {op.name} is replicated over the {g.tp} GPUs of a "
                    f"tensor-parallel group: {fw}'s AutoTP splits every layer"
                )
    cfg = {
        "tensor_parallel": {"tp_size": g.tp},
        "dtype": dtype,
        "replace_with_kernel_inject": False,
    }
    notes.append(
        f"deepspeed.init_inference(model, config=this) on {g.tp * g.dp} GPUs: "
        f"{g.dp} replicas of {g.tp}-way automatic tensor parallelism"
    )
    return Export("deepspeed", json.dumps(cfg, indent=2), cfg, notes)


# ---- PyTorch DTensor -----------------------------------------------------------------------------

_R, _S, _LAST = "Replicate()", "Shard(1)", "Shard(-1)"  # layouts of a (b, s, features) tensor


@dataclass(frozen=True)
class _Names:
    """Hugging Face module names of one family ({i} = layer index)."""

    embed: str
    pos: str | None
    norm_f: str
    head: str
    block: str
    ln1: str
    ln2: str
    attn: str
    qkv: tuple[str, ...]
    o: str
    mlp: str
    up: tuple[str, ...]
    down: str
    attn_kwarg: str | None = None  # the attention module takes its input as this keyword


HF_NAMES = {
    "gpt2": _Names(
        "transformer.wte",
        "transformer.wpe",
        "transformer.ln_f",
        "lm_head",
        "transformer.h.{i}",
        "ln_1",
        "ln_2",
        "attn",
        ("attn.c_attn",),
        "attn.c_proj",
        "mlp",
        ("mlp.c_fc",),
        "mlp.c_proj",
    ),
    "llama": _Names(
        "model.embed_tokens",
        None,
        "model.norm",
        "lm_head",
        "model.layers.{i}",
        "input_layernorm",
        "post_attention_layernorm",
        "self_attn",
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "self_attn.o_proj",
        "mlp",
        ("mlp.gate_proj", "mlp.up_proj"),
        "mlp.down_proj",
        attn_kwarg="hidden_states",
    ),
}
HF_NAMES["gpt3"] = HF_NAMES["gpt2"]  # GPT-3 is GPT-2's architecture at scale
HF_NAMES["mistral"] = HF_NAMES["llama"]


def _style(name: str, **kwargs: Any) -> dict[str, Any]:
    """One parallel style as data: ``{"style": "ColwiseParallel", "input_layouts": ...}``."""
    return {"style": name, **{k: v for k, v in kwargs.items() if v is not None}}


def _prepare(
    inp: str | None,
    want_in: str | None,
    out: str | None = None,
    want_out: str | None = None,
    kwarg: str | None = None,
) -> dict[str, Any] | None:
    """PrepareModuleInput / Output / InputOutput converting layouts (None when none differ)."""
    conv_in = inp is not None and inp != want_in
    conv_out = out is not None and out != want_out
    if not conv_in and not conv_out:
        return None
    args: dict[str, Any] = {}
    if conv_in:
        if kwarg:
            args |= {
                "input_kwarg_layouts": {kwarg: inp},
                "desired_input_kwarg_layouts": {kwarg: want_in},
            }
        else:
            args |= {"input_layouts": [inp], "desired_input_layouts": [want_in]}
    if conv_out:
        args |= {"output_layouts": [out], "desired_output_layouts": [want_out]}
    if conv_in and conv_out:
        return _style("PrepareModuleInputOutput", **args, use_local_input=True)
    if conv_in:
        return _style("PrepareModuleInput", **args, use_local_output=True)
    return _style("PrepareModuleOutput", **args)


def to_dtensor(view: PlanView, wl: Workload) -> Export:
    """A DTensor plan: a dp x tp DeviceMesh and a parallel style per Hugging Face module name."""
    fw = "PyTorch DTensor (parallelize_module)"
    notes = [_workload_note(wl)]
    groups = _groups(view)
    stage, ops, nodes, gpn = groups[0]
    if stage is not None:
        notes.append(
            f"pipelining is not expressed by parallelize_module: this is stage 0's "
            f"tensor plan (layers {stage.first}-{stage.last} of "
            f"{len(view.pipeline.stages)} stages; split the model with "
            "torch.distributed.pipelining)"
        )
    g = grid(ops, nodes, gpn, fw)
    if wl.family == "mlp":
        plan = _dtensor_mlp(g)
    else:
        _family(wl, fw, (*GPT_FAMILIES,))
        plan = _dtensor_decoder(ops, g, HF_NAMES[wl.family], wl, fw, view.mode)
    k, micro = _per_replica_micro(view, wl, g.dp)
    names = {o.name for o in ops}
    tied = wl.family != "mlp" and wl.config.tie_word_embeddings and {"embed", "lm_head"} <= names
    if tied and g.split.get("embed") != g.split.get("lm_head"):  # inference only (else refused)
        tied = False
        notes.append(
            "embedding and LM head are split differently: their tied weight becomes two "
            "parameters with the same values (fine for inference)"
        )
    data: dict[str, Any] = {
        "format": "dtensor",
        "source": {
            "label": view.label,
            "model": view.model_name,
            "topology": view.topology,
            "mode": view.mode,
        },
        "mesh": {"dim_names": ["dp", "tp"], "shape": [g.dp, g.tp], "ranks": g.ranks()},
        "tp_plan": plan.styles,
        "loss_parallel": plan.loss_parallel,
        "tied": [["lm_head.weight", HF_NAMES[wl.family].embed + ".weight"]] if tied else [],
        "data_parallel": _dtensor_dp(view, g.dp),
        "micro_batches": k,
        "micro_batch_size_per_replica": micro,
        "recompute_layers": view.recomputed_layers,
        "notes": [],
    }
    if wl.family in ("gpt2", "gpt3"):
        notes.append(
            "GPT-2 module names with nn.Linear projections and c_attn's outputs laid "
            "out per head [heads, (q, k, v), head_dim] (HF's Conv1D stores [q | k | v]:"
            " convert it before a column split)"
        )
    if g.tp == 1:
        notes.append("no tensor splits: the plan is data parallel only (empty tp_plan)")
    data["notes"] = notes
    return Export("dtensor", json.dumps(data, indent=1), data, notes, python=dtensor_python(data))


@dataclass
class _TPPlan:
    styles: dict[str, dict[str, Any]] = field(default_factory=dict)
    loss_parallel: bool = False

    def put(self, name: str, style: dict[str, Any] | None) -> None:
        if style is not None:
            self.styles[name] = style


def _dtensor_mlp(g: Grid) -> _TPPlan:
    """fc1 column-parallel and fc2 row-parallel (or both whole) on a replicated input."""
    plan = _TPPlan()
    up, down = g.split.get("fc1"), g.split.get("fc2")
    if (up is None) != (down is None):
        raise NotExpressibleError(
            "ops fc1 and fc2 are not split alike: this export takes the MLP "
            "column then row parallel, or whole"
        )
    if up is not None:
        plan.put("fc1", _style("ColwiseParallel"))
        plan.put("fc2", _style("RowwiseParallel"))
    return plan


def _layout(g: Grid, name: str) -> str:
    """Residual-stream layout an op leaves: sequence-split or whole."""
    return _S if g.split.get(name) == "s" else _R


def _dtensor_decoder(
    ops: list[OpSplit], g: Grid, nm: _Names, wl: Workload, fw: str, view_mode: str
) -> _TPPlan:
    """Per-module styles for a GPT-2 / Llama module tree (see the module docstring)."""
    plan = _TPPlan()
    names = {o.name for o in ops}
    layers = sorted({o.layer for o in ops if o.layer is not None})
    split = g.split.get
    # the residual stream after the embeddings: the position add (GPT-2) or block 0's adds
    first_add = "embed_pos" if "embed_pos" in names else f"L{layers[0]}.add1" if layers else None
    stream = _layout(g, first_add) if first_add else _R
    if "embed" in names:
        if split("embed") == "v":
            plan.put(nm.embed, _style("RowwiseParallel", input_layouts=_R, output_layouts=stream))
        else:
            plan.put(nm.embed, _prepare(None, None, _R, stream))
        if nm.pos is not None and stream == _S:  # (s, m) position rows follow the sequence split
            plan.put(
                nm.pos,
                _style(
                    "PrepareModuleOutput", output_layouts=[_R], desired_output_layouts=["Shard(0)"]
                ),
            )
    for i in layers:
        blk = nm.block.format(i=i)
        here = _layout(g, f"L{i}.add1")
        for op in (f"L{i}.add2", f"L{i}.ln1", f"L{i}.ln2"):
            if op in names and _layout(g, op) != here:
                raise NotExpressibleError(
                    f"op {op} is {'sequence-split' if _layout(g, op) == _S else 'whole'} while "
                    f"the residual stream of layer {i} is not: {fw} needs one layout per block "
                    "between its norms and residual adds"
                )
        plan.put(blk, _prepare(stream, here))
        stream = here
        if here == _S:
            plan.put(f"{blk}.{nm.ln1}", _style("SequenceParallel"))
            plan.put(f"{blk}.{nm.ln2}", _style("SequenceParallel"))
        _dtensor_sublayer(
            plan,
            g,
            f"{blk}.{nm.attn}",
            [f"{blk}.{x}" for x in nm.qkv],
            f"{blk}.{nm.o}",
            [f"L{i}.attn.{x}" for x in ("q", "k", "v", "core")],
            f"L{i}.attn.o",
            here,
            nm.attn_kwarg,
            names,
            fw,
        )
        up_ops = [f"L{i}.mlp.{x}" for x in ("up", "gate", "gelu", "swiglu")]
        _dtensor_sublayer(
            plan,
            g,
            f"{blk}.{nm.mlp}",
            [f"{blk}.{x}" for x in nm.up],
            f"{blk}.{nm.down}",
            up_ops,
            f"L{i}.mlp.down",
            here,
            None,
            names,
            fw,
        )
    if "ln_f" in names:
        final = _layout(g, "ln_f")
        if final == _S and stream == _R:
            raise NotExpressibleError(
                f"op ln_f is sequence-split after a whole residual stream: {fw}'s "
                "SequenceParallel expects its input already split"
            )
        plan.put(nm.norm_f, _style("SequenceParallel") if final == _S else _prepare(stream, _R))
        stream = final
    if "lm_head" in names:
        plan.loss_parallel = split("loss") == "v"
        if split("lm_head") == "v":
            plan.put(
                nm.head,
                _style(
                    "ColwiseParallel",
                    input_layouts=stream,
                    output_layouts=_LAST if plan.loss_parallel else _R,
                    use_local_output=False if plan.loss_parallel else None,
                ),
            )
        elif plan.loss_parallel:
            raise NotExpressibleError(
                f"op loss is vocab-split but lm_head is whole: {fw}'s "
                "loss_parallel takes the logits from a column-parallel LM head"
            )
        else:
            plan.put(nm.head, _prepare(stream, _R))
        if (
            wl.config.tie_word_embeddings
            and "embed" in names
            and split("embed") != split("lm_head")
            and view_mode == "train"
        ):
            raise NotExpressibleError(
                f"op {'embed' if split('embed') else 'lm_head'} is vocab-split and the other "
                f"is not: {wl.family} ties their weight, and one DTensor parameter has one layout"
            )
    return plan


def _dtensor_sublayer(
    plan: _TPPlan,
    g: Grid,
    parent: str,
    cols: list[str],
    row: str,
    col_ops: list[str],
    row_op: str,
    stream: str,
    kwarg: str | None,
    names: set[str],
    fw: str,
) -> None:
    """Attention or MLP: column projections (+ core/activation), then the row projection.

    Three shapes: split then row-parallel (Megatron), split then gathered before a whole
    output projection, or all whole. ``stream`` is the residual layout around the sublayer.
    """
    present = [o for o in col_ops if o in names]
    kinds = {g.split.get(o) for o in present}
    if len(kinds) > 1:
        raise NotExpressibleError(
            f"ops {', '.join(present)} are not split alike: {fw} splits a "
            "sublayer's projections and its core together or not at all"
        )
    col_split = bool(present) and kinds != {None}
    row_split = g.split.get(row_op) is not None
    if row_split and not col_split:
        raise NotExpressibleError(
            f"op {row_op} is row-split after whole projections: the partial "
            f"sums need split inputs, which {fw} would have to slice first"
        )
    if col_split:  # gather the sequence-split stream once for all column projections
        plan.put(parent, _prepare(stream, _R, kwarg=kwarg))
        for name in cols:
            plan.put(name, _style("ColwiseParallel"))
        if row_split:
            plan.put(row, _style("RowwiseParallel", output_layouts=stream))
        else:  # heads / FFN gathered before a whole output projection
            plan.put(row, _prepare(_LAST, _R, _R, stream))
    elif stream == _S and kwarg is not None:
        raise NotExpressibleError(
            f"{parent} is whole inside a sequence-split block: its Hugging Face "
            "module returns a tuple, which PrepareModuleOutput cannot re-split"
        )
    else:
        plan.put(parent, _prepare(stream, _R, _R, stream, kwarg=kwarg))


def _dtensor_dp(view: PlanView, dp: int) -> dict[str, Any]:
    """How to run the data-parallel side over mesh["dp"] at the plan's ZeRO stage."""
    z = view.zero_stage
    how = {
        0: "replicate the module over mesh['dp'] (DDP): gradients all-reduced",
        1: "DDP over mesh['dp'] with torch.distributed.optim.ZeroRedundancyOptimizer "
        "(optimizer state sharded)",
        2: "torch.distributed.fsdp.fully_shard(model, mesh=mesh['dp'], "
        "reshard_after_forward=False): gradients and optimizer state sharded",
        3: "torch.distributed.fsdp.fully_shard(model, mesh=mesh['dp']): weights gathered "
        "before forward and backward",
    }[z]
    return {"size": dp, "zero_stage": z, "how": how if dp > 1 else "no data parallelism"}


def dtensor_python(data: dict[str, Any]) -> str:
    """The DTensor export as a runnable Python module (imports torch when run)."""
    used = sorted({s["style"] for s in data["tp_plan"].values()})
    src = data["source"]
    lines = [
        f'"""DTensor plan exported by TAPS Planner: plan {src["label"]!r} of {src["model"]} '
        f"on {src['topology']} ({src['mode']}).",
        "",
        f"Mesh dp {data['mesh']['shape'][0]} x tp {data['mesh']['shape'][1]}; data parallel: "
        f"{data['data_parallel']['how']}.",
        *(f"Note: {n}" for n in data["notes"]),
        '"""',
        "",
        "import contextlib",
        "",
        "import torch",
        "from torch.distributed.device_mesh import DeviceMesh",
        "from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: F401",
        "from torch.distributed.tensor.parallel import loss_parallel, parallelize_module",
    ]
    if used:
        lines.append(f"from torch.distributed.tensor.parallel import {', '.join(used)}")
    lines += [
        "",
        "# rows: data-parallel replicas; columns: the tensor-parallel ranks of each",
        f"MESH_RANKS = {data['mesh']['ranks']!r}",
        "# the logits stay vocabulary-sharded: compute the loss under loss_parallel()",
        f"LOSS_PARALLEL = {data['loss_parallel']!r}",
        f"RECOMPUTE_LAYERS = {data['recompute_layers']!r}",
        "",
        "",
        'def build_mesh(device_type: str = "cuda") -> DeviceMesh:',
        '    """The dp x tp mesh (after torch.distributed.init_process_group)."""',
        '    return DeviceMesh(device_type, torch.tensor(MESH_RANKS), mesh_dim_names=("dp", "tp"))',
        "",
        "",
        "def tp_plan() -> dict:",
        '    """Parallel style per module name."""',
        "    plan = {}",
        *_python_plan_lines(data["tp_plan"]),
        "    return plan",
        "",
        "",
        "def parallelize(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:",
        '    """Apply the tensor-parallel plan over mesh["tp"] (the data-parallel side is '
        'separate)."""',
        '    parallelize_module(model, mesh["tp"], tp_plan())',
    ]
    for dst, srcname in data["tied"]:
        mod, attr = dst.rsplit(".", 1)
        lines.append(f"    model.{mod}.{attr} = model.{srcname}  # re-tie: one parameter")
    lines += [
        "    return model",
        "",
        "",
        "def loss_and_backward(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:",
        '    """Mean cross entropy of (b, s, vocab) logits and its backward; the loss value."""',
        "    with loss_parallel() if LOSS_PARALLEL else contextlib.nullcontext():",
        "        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())",
        "        loss.backward()",
        "    return loss.full_tensor() if isinstance(loss, DTensor) else loss",
        "",
    ]
    return "\n".join(lines)


def _python_style(style: dict[str, Any]) -> str:
    """``ColwiseParallel(input_layouts=Shard(1))`` from a style dict."""

    def val(v: Any) -> str:
        if isinstance(v, list):
            return "(" + "".join(f"{val(x)}, " for x in v) + ")"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k!r}: {val(x)}" for k, x in v.items()) + "}"
        return str(v)

    args = ", ".join(f"{k}={val(v)}" for k, v in style.items() if k != "style")
    return f"{style['style']}({args})"


def _python_plan_lines(styles: dict[str, dict[str, Any]]) -> list[str]:
    """Plan entries, identical layers folded into one loop per run of layers."""
    per_layer: dict[int, dict[str, str]] = {}
    lines: list[str] = []
    for name, style in styles.items():
        m = re.match(r"^(.*?\.)(\d+)((?:\..*)?)$", name)
        if m:
            per_layer.setdefault(int(m.group(2)), {})[m.group(1) + "{i}" + m.group(3)] = (
                _python_style(style)
            )
        else:
            lines.append(f"    plan[{name!r}] = {_python_style(style)}")
    runs: list[tuple[int, int, dict[str, str]]] = []
    for i in sorted(per_layer):
        if runs and runs[-1][1] == i - 1 and runs[-1][2] == per_layer[i]:
            runs[-1] = (runs[-1][0], i, runs[-1][2])
        else:
            runs.append((i, i, per_layer[i]))
    for a, b, entries in runs:
        lines.append(f"    for i in range({a}, {b + 1}):")
        lines += [f"        plan[f{k!r}] = {v}" for k, v in entries.items()]
    return lines


# ---- entry points --------------------------------------------------------------------------------

_EXPORTERS = {"megatron": to_megatron, "deepspeed": to_deepspeed, "dtensor": to_dtensor}


def export_plan(
    data: Any,
    fmt: str,
    *,
    label: str | None = None,
    model: str | None = None,
    batch: int | None = None,
    seq: int | None = None,
    dtype: str | None = None,
) -> Export:
    """Export a plan JSON dict to ``fmt`` (one of :data:`FORMATS`).

    Raises InvalidInputError for bad input (the field and the fix in one line) and
    NotExpressibleError when the framework cannot run the plan as planned.
    """
    if fmt not in _EXPORTERS:
        raise InvalidInputError("--format", fmt, f"one of {', '.join(FORMATS)}")
    view = read_plan(data, label)
    recorded = select_plan(data, label)[0].get("workload")
    if isinstance(recorded, dict):  # the plan JSON records its workload: use it by default
        batch = batch if batch is not None else _int_or_none(recorded.get("batch_size"))
        seq = seq if seq is not None else _int_or_none(recorded.get("seq_length"))
        if dtype is None and isinstance(recorded.get("dtype"), str):
            dtype = recorded["dtype"]
    wl = resolve_workload(view, model=model, batch=batch, seq=seq, dtype=dtype)
    return _EXPORTERS[fmt](view, wl)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def add_export_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``export`` on the CLI's subparsers (errors follow the parser class's rule)."""
    q = subparsers.add_parser(
        "export",
        help="export a plan JSON to Megatron-LM arguments, a DeepSpeed config or a DTensor plan",
    )
    q.add_argument("plan_file", metavar="PLAN.json", help="plan --json (or compare --json)")
    q.add_argument("--format", required=True, choices=FORMATS)
    q.add_argument(
        "--out",
        metavar="PATH",
        help="write here (default stdout); for dtensor a "
        "PATH ending in .py gets the Python snippet, others the JSON",
    )
    q.add_argument("--plan", metavar="LABEL", help="which plan of a compare JSON (default taps)")
    q.add_argument(
        "--model",
        metavar="CONFIG",
        help="the model config the plan was made from (default: the sample named in the plan)",
    )
    q.add_argument("--batch", type=int, help="global batch size the plan used (samples)")
    q.add_argument("--seq", type=int, help="sequence length the plan used (tokens)")
    q.add_argument("--dtype", choices=sorted(DTYPE_BYTES))
    return q


def run_export(args: argparse.Namespace) -> int:
    """The ``export`` command: 0 exported, 3 not expressible (one line on stderr).

    Bad input raises InvalidInputError, which the CLI prints in one line with exit code 2.
    """
    if args.out is not None:
        strict_json.check_output_path(args.out, field="--out")
    data = strict_json.load_file(args.plan_file, field="PLAN.json", limit=PLAN_FILE_LIMIT)
    try:
        result = export_plan(
            data,
            args.format,
            label=args.plan,
            model=args.model,
            batch=args.batch,
            seq=args.seq,
            dtype=args.dtype,
        )
    except NotExpressibleError as err:
        print(f"not expressible in {FRAMEWORK[args.format]}: {err}", file=sys.stderr)
        return EXIT_NOT_EXPRESSIBLE
    text = result.text
    if args.out is not None and result.python is not None and args.out.endswith(".py"):
        text = result.python
    if args.out is None:
        print(text)
    else:
        try:
            Path(args.out).write_text(text + "\n")
        except OSError as err:
            raise InvalidInputError(
                "--out", args.out, f"a writable path ({err.strerror})"
            ) from None
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
