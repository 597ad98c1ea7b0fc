"""Price a configuration people run today: Megatron-style TP x PP x DP with its levers.

``plan MODEL --fixed "tp=8,pp=8,dp=24,mbs=1,recompute=full,zero=1,sp=1"`` costs exactly that
configuration with the same model as every searched plan (same JSON), so a reviewer can set
the recommendation beside what the team runs. The configuration maps onto the engine's
strategy space like this, for every pipeline stage on its ``nodes / pp`` hosts:

- tensor parallelism ``tp`` inside a host: column ops split their output features (heads, FFN,
  padded vocabulary), row ops their contraction (Megatron's column/row pairs), the ops between
  them (attention, activation, vocabulary-parallel embedding and loss) the same letter;
- data parallelism over the rest: the batch split ``gpus_per_node / tp`` ways inside a host and
  over the stage's hosts (``dp`` = their product);
- sequence parallelism (``sp=1``): norms, residual adds and positions split the sequence ``tp``
  ways; row ops hand their partial sums on (reduce-scatter) and column ops gather (all-gather);
- ``mbs`` micro-batch size per data-parallel replica (``batch = dp x mbs x micro-batches``),
  ``recompute=full`` every layer, ``recompute=selective`` every layer's attention core
  (Megatron-LM's ``--recompute-granularity selective``: the scores re-created in backward, not
  kept), ``zero`` the plan-wide ZeRO stage;
- ``first`` / ``last``: the layers of the first / last pipeline stage (Megatron-LM's
  ``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``), the other
  stages sharing the rest evenly; without them the layers are split as evenly as they go.

A key that does not divide, or is unknown, is refused with one line naming it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology
from taps_core.errors import InfeasibleError, InvalidInputError
from taps_core.ir.graph import OpGraph, OpSpec
from taps_core.ir.strategies import DEFERRABLE_KINDS, LevelSplit, Strategy, interned
from taps_core.plan.evaluate import evaluate
from taps_core.plan.records import OpChoice, Plan, SearchInfo
from taps_core.search.flat import micro_graph
from taps_core.search.pipeline import assemble_stages, balanced_split, layer_range

FIXED_KEYS = ("tp", "pp", "dp", "mbs", "sp", "recompute", "zero", "first", "last")
RECOMPUTE = ("none", "selective", "full")


def tp_letter(op: OpSpec) -> str | None:
    """The letter Megatron splits for a column ('output features') or row ('contraction') op."""
    if op.tp_role == "column":
        cands = [
            ch for ch in op.output_letters if ch not in op.input_letters[0] and ch not in op.fixed
        ]
    elif op.tp_role == "row":
        cands = [ch for ch in op.input_letters[0] if ch in op.contracted and ch not in op.fixed]
    else:
        return None
    return cands[0] if cands else None



@dataclass(frozen=True)
class FixedConfig:
    """A Megatron-style configuration (see the module docstring); ``dp`` and ``mbs`` None are
    derived: dp from the GPUs, mbs from the batch (one micro-batch per replica)."""

    tp: int = 1
    pp: int = 1
    dp: int | None = None
    mbs: int | None = None
    sp: bool = False
    recompute: str = "none"
    zero: int = 0
    first: int | None = None  # layers of the first pipeline stage (None: an even split)
    last: int | None = None  # layers of the last pipeline stage

    def text(self) -> str:
        """The configuration as ``--fixed`` takes it."""
        parts = [f"tp={self.tp}", f"pp={self.pp}"]
        parts += [f"dp={self.dp}"] if self.dp is not None else []
        parts += [f"mbs={self.mbs}"] if self.mbs is not None else []
        parts += [f"sp={int(self.sp)}", f"recompute={self.recompute}", f"zero={self.zero}"]
        parts += [f"first={self.first}"] if self.first is not None else []
        parts += [f"last={self.last}"] if self.last is not None else []
        return ",".join(parts)


def parse_fixed(text: str) -> FixedConfig:
    """``"tp=8,pp=2,mbs=1,recompute=full,zero=1"`` as a :class:`FixedConfig`.

    >>> parse_fixed("tp=8, pp=2, sp=1").text()
    'tp=8,pp=2,sp=1,recompute=none,zero=0'
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError("--fixed", text, 'key=value pairs, e.g. "tp=8,pp=2"')
    values: dict[str, object] = {}
    for item in text.split(","):
        key, eq, value = (part.strip() for part in item.partition("="))
        if not eq or not key or not value:
            raise InvalidInputError("--fixed", item.strip(), "a key=value pair, e.g. tp=8")
        if key not in FIXED_KEYS:
            raise InvalidInputError("--fixed key", key, f"one of {', '.join(FIXED_KEYS)}")
        if key in values:
            raise InvalidInputError(f"--fixed {key}", value, "given once")
        values[key] = _value(key, value)
    return FixedConfig(**values)  # type: ignore[arg-type]


def _value(key: str, value: str) -> object:
    if key == "recompute":
        if value not in RECOMPUTE:
            raise InvalidInputError("--fixed recompute", value, f"one of {', '.join(RECOMPUTE)}")
        return value
    if key == "sp":
        if value not in ("0", "1", "true", "false"):
            raise InvalidInputError("--fixed sp", value, "0 or 1")
        return value in ("1", "true")
    try:
        number = int(value)
    except ValueError:
        raise InvalidInputError(f"--fixed {key}", value, "an integer") from None
    if key == "zero" and not 0 <= number <= 3:
        raise InvalidInputError("--fixed zero", number, "0, 1, 2 or 3")
    if key != "zero" and number < 1:
        raise InvalidInputError(f"--fixed {key}", number, "an integer >= 1")
    return number


@dataclass(frozen=True)
class Layout3D:
    """A configuration checked against one model and cluster: every size known."""

    tp: int
    pp: int
    dp: int
    dp_intra: int  # batch ways inside a host
    hosts_per_stage: int
    micro_batch_size: int  # samples per replica per micro-batch
    microbatches: int
    sp: bool
    recompute: bool
    zero: int
    split: tuple[int, ...]  # layers per pipeline stage, first to last
    selective: bool = False  # every layer's attention core recomputed (scores not kept)


def one_stage(lay: Layout3D) -> Layout3D:
    """``lay`` as each of its stages sees it: the layer split is the pipeline's, so
    configurations that differ only there share their stages' costs (a memo key)."""
    return replace(lay, split=()) if lay.split else lay


def stage_split(config: FixedConfig, layers: int) -> tuple[int, ...]:
    """Layers per stage of ``config`` on a model of ``layers`` layers, as Megatron-LM lays
    them out: ``first`` and ``last`` where given, the other stages sharing the rest evenly
    (each at least one layer); neither given, the split of
    :func:`~taps_core.search.pipeline.balanced_split`."""
    p = config.pp
    if config.first is None and config.last is None:
        return balanced_split(layers, p) if p > 1 else (layers,)
    key = "--fixed first" if config.first is not None else "--fixed last"
    if p == 1:
        raise InvalidInputError(key, config.first or config.last, "absent with pp=1")
    given = (config.first or 0) + (config.last or 0)
    others = p - (config.first is not None) - (config.last is not None)
    rest = layers - given
    if (others == 0 and rest != 0) or (others > 0 and (rest < others or rest % others)):
        want = (f"first + last = {layers}, the model's layers" if others == 0 else
                f"a count leaving the other {others} stage(s) an even share of the {layers} "
                f"layers, at least one each ({rest} left)")
        raise InvalidInputError(key, config.first if config.first is not None else config.last,
                                want)
    even = rest // others if others else 0
    inner = [even] * (p - 2)
    first = config.first if config.first is not None else even
    last = config.last if config.last is not None else even
    return (first, *inner, last)


def resolve(config: FixedConfig, graph: OpGraph, topology: Topology, mode: str) -> Layout3D:
    """Check ``config`` against the model and cluster, naming the key that does not fit."""
    g, nodes = topology.gpus_per_node, topology.nodes
    if g % config.tp:
        raise InvalidInputError(
            "--fixed tp", config.tp, f"a divisor of the {g} GPUs of a host (TP stays inside a host)"
        )
    if nodes % config.pp:
        raise InvalidInputError("--fixed pp", config.pp, f"a divisor of the {nodes} hosts")
    layers = graph.num_layers
    if config.pp > 1 and (mode != "train" or layers < config.pp):
        raise InvalidInputError(
            "--fixed pp", config.pp, f"1 here: pipelines are for training a model of >= pp layers "
            f"(this one: {layers} layers, mode {mode})"
        )
    hosts = nodes // config.pp
    dp_intra = g // config.tp
    dp = hosts * dp_intra
    if config.dp is not None and config.dp != dp:
        raise InvalidInputError(
            "--fixed dp", config.dp, f"{dp} = {topology.num_gpus} GPUs / (tp {config.tp} x pp "
            f"{config.pp})"
        )
    cfg = graph.meta.get("config")
    batch = getattr(cfg, "batch_size", None)
    if batch is None:
        raise InvalidInputError("model", graph.name, "a model built from a config (with a batch)")
    if batch % dp:
        raise InvalidInputError("batch_size", batch, f"a multiple of dp = {dp}")
    per_replica = batch // dp
    mbs = per_replica if config.mbs is None else config.mbs
    if per_replica % mbs:
        raise InvalidInputError(
            "--fixed mbs", mbs, f"a divisor of the {per_replica} samples per data-parallel replica"
        )
    if mode != "train" and mbs != per_replica:
        raise InvalidInputError("--fixed mbs", mbs, f"{per_replica} in inference (no accumulation)")
    if config.recompute != "none" and mode != "train":
        raise InvalidInputError("--fixed recompute", config.recompute, "none in inference")
    if mode != "train" and config.zero not in (0, 3):
        raise InvalidInputError("--fixed zero", config.zero, "0 or 3 in inference")
    return Layout3D(
        config.tp, config.pp, dp, dp_intra, hosts, mbs, per_replica // mbs, config.sp,
        config.recompute == "full", config.zero, stage_split(config, layers),
        config.recompute == "selective",
    )


def tensor_letters(graph: OpGraph) -> frozenset[str]:
    """Letters tensor parallelism may split anywhere in ``graph``: the column and row ops'
    letters, and the vocabulary (vocab-parallel even on a stage without the head)."""
    found = {tp_letter(o) for o in graph.ops} - {None}
    return frozenset(found.union(*(o.padded for o in graph.ops)))  # type: ignore[arg-type]


def tensor_letter(op: OpSpec, letters: frozenset[str]) -> str | None:
    """The letter tensor parallelism splits on ``op``: a column op's output features, a row
    op's contraction, and for the ops between them the one letter of ``letters`` (the
    graph's :func:`tensor_letters`) they carry."""

    own = tp_letter(op)
    if own is not None or op.tp_role is not None:
        return own
    carried = [ch for ch in op.letters if ch in letters and ch not in op.fixed]
    if op.kind in ("norm", "elementwise") and "m" in op.letters:
        return None  # the hidden-sized activations between blocks stay whole (or SP)
    return carried[0] if len(carried) == 1 else None


def _split(op: OpSpec, parts: list[tuple[str, int]]) -> LevelSplit:
    """A level split in the op's letter order, without factors of 1."""
    kept = [(ch, f) for ch, f in parts if f > 1]
    return tuple(sorted(kept, key=lambda cf: op.letters.index(cf[0])))


def op_strategy(graph: OpGraph, op: OpSpec, lay: Layout3D, letters: frozenset[str]) -> Strategy:
    """The strategy of one op under a checked configuration (see the module docstring;
    ``letters``: :func:`tensor_letters` of the graph)."""
    sizes = graph.dim_sizes(op)
    batch = graph.batch_letter
    data = batch if batch in op.letters else ("c" if "c" in op.letters else None)
    tensor = tensor_letter(op, letters) if lay.tp > 1 else None
    seq = lay.sp and lay.tp > 1 and tensor is None and "s" in op.output_letters
    intra: list[tuple[str, int]] = []
    if tensor is not None:
        if sizes[tensor] % lay.tp and tensor not in op.padded:
            raise InvalidInputError(
                "--fixed tp", lay.tp, f"a divisor of {op.name}'s {tensor} dim ({sizes[tensor]})"
            )
        intra.append((tensor, lay.tp))
    elif seq:
        if sizes["s"] % lay.tp:
            raise InvalidInputError(
                "--fixed tp", lay.tp, f"a divisor of the sequence ({sizes['s']}) under sp=1"
            )
        intra.append(("s", lay.tp))
    inter: list[tuple[str, int]] = []
    if data is not None:
        intra.append((data, lay.dp_intra))
        inter.append((data, lay.hosts_per_stage))
        if sizes[data] % (lay.dp_intra * lay.hosts_per_stage):
            raise InvalidInputError(
                "--fixed mbs", lay.micro_batch_size,
                f"a micro-batch whose {data} dim of {op.name} ({sizes[data]}) splits over "
                f"dp = {lay.dp_intra * lay.hosts_per_stage}",
            )
    s = interned(_split(op, inter), _split(op, intra), False)
    contracted = op.contracted - op.fixed
    partial = s.partial(contracted)
    hands_on = lay.sp and partial[1] > 1 and partial[0] == 1 and op.kind in DEFERRABLE_KINDS
    if hands_on and graph.consumers.get(op.output):
        s = interned(s.inter, s.intra, True)
    return s


def fixed_choices(graph: OpGraph, lay: Layout3D) -> dict[str, OpChoice]:
    """Every op's choice (strategy, ZeRO stage, recomputation) under the configuration."""
    letters = tensor_letters(graph)  # once: asked of every op in between
    return {
        op.name: OpChoice(
            op_strategy(graph, op, lay, letters), lay.zero,
            lay.recompute and op.layer is not None, lay.selective and op.layer is not None,
        )
        for op in graph.ops
    }


def plan_fixed(
    graph: OpGraph,
    topology: Topology,
    config: FixedConfig,
    *,
    mode: str = "train",
    memory_limit_bytes: float | None = None,
    label: str = "fixed",
    links: LinkModel | None = None,
) -> Plan:
    """The plan of exactly ``config`` (see the module docstring), costed like every plan; its
    search note names the configuration and whether it fits in memory."""
    start = time.perf_counter()
    lay = resolve(config, graph, topology, mode)
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    micro = graph if lay.microbatches == 1 else micro_graph(graph, lay.microbatches)
    info = SearchInfo(
        algorithm="fixed", time_s=0.0, num_strategies=0, status="fixed", note=config.text()
    )
    if lay.pp == 1:
        plan = evaluate(
            micro, links or LinkModel(topology), mode, fixed_choices(micro, lay), label=label,
            cost_model="topology", search=info, memory_limit_bytes=limit,
            microbatches=lay.microbatches,
        )
    else:
        plan = _pipelined(micro, topology, links, mode, limit, lay, info)
    fits = plan.memory.total <= limit * (1 + 1e-9)
    note = config.text() + (
        "" if fits else f"; needs {plan.memory.total / 2**30:.3g} GiB per device, over the "
        f"{limit / 2**30:.3g} GiB limit"
    )
    info = replace(info, time_s=time.perf_counter() - start, note=note)
    return replace(plan, label=label, search=info)


def _pipelined(
    micro: OpGraph,
    topology: Topology,
    links: LinkModel | None,
    mode: str,
    limit: float,
    lay: Layout3D,
    info: SearchInfo,
) -> Plan:
    """The configuration's 1F1B pipeline, stages costed by :func:`taps_core.search.pipeline`."""

    span = layer_range(micro)
    if span is None:
        raise InvalidInputError("--fixed pp", lay.pp, "1 for a model without layers")
    split = lay.split

    def stage_plan(sg: OpGraph, sub: LinkModel, copies: int) -> Plan:
        one = replace(lay, hosts_per_stage=sub.topology.nodes)
        return evaluate(
            sg, sub, mode, fixed_choices(sg, one), label="stage",
            cost_model="topology", search=info, memory_limit_bytes=limit,
            microbatches=lay.microbatches, activation_copies=copies,
        )

    plan = assemble_stages(
        micro, topology, links or LinkModel(topology), mode, "topology", limit, lay.pp,
        lay.microbatches, split, span[0], stage_plan,
    )
    if plan is None:  # pragma: no cover - fixed stages always produce a plan
        raise InfeasibleError(f"the configuration pp={lay.pp} could not be laid out")
    return plan
