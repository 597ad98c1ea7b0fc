"""Every configuration a framework accepts, priced exactly, and the fastest that fits.

A *space* is what one framework can run (:data:`SPACES`):

- ``megatron``: TP dividing the GPUs of a host (and every split dim, e.g. the heads), PP
  dividing the hosts with at most one stage per layer (every layer split Megatron-LM accepts:
  the even one, or any layer counts of the first and last stage with the other stages sharing
  the rest evenly, ``--decoder-first/last-pipeline-num-layers``), DP over the rest, every
  micro-batch size dividing a replica's share of the batch, sequence parallelism (with TP),
  recomputation none, selective (the attention core; when the model keeps attention scores)
  or full, and the distributed optimizer (ZeRO 0 or 1);
- ``deepspeed``: ZeRO-DP, DeepSpeed's own engine: data parallelism over every GPU, ZeRO 0 to
  3, every micro-batch size, activation checkpointing or none.

Inference keeps one micro-batch, no pipeline and ZeRO 0 or 3 (the sharded weights gathered
as they are used).

Each configuration is priced by :func:`taps_core.plan.evaluate.evaluate`, the same model that prices
every plan, without building the whole model: a stage's ops cost the sum of their own costs
and a model's layers are identical, so a stage of ``n`` layers costs ``T(1) + (n - 1) x (T(2)
- T(1))`` for the stage built with one and with two layers (its time, its gradient sync and
each part of its memory; the transient buffers are a maximum over identical layers, the same
for any ``n``). Activations scale with the micro-batches a stage holds at once (1F1B), sends
with their bytes; the 1F1B step is :func:`taps_core.search.pipeline.one_f_one_b_busy`. The
stages' evaluations are kept for the process as bandwidth-independent shapes
(:mod:`taps_core.search.stage_shapes`) and priced on each cluster's links. The test
suite checks the result against :func:`taps_core.search.fixed_config.plan_fixed` on the whole model.
Models whose layers differ are priced whole, one configuration at a time.

Two rules skip configurations that cannot be the answer, both proven and both tested against
brute force: recomputing more is never tried once recomputing less fits at its fastest split
(it only adds work), and a micro-batch size is skipped when the same configuration with a
smaller one fits at no split (smaller sizes are priced first). Memory per device never shrinks
as the micro-batch grows: weights do not depend on it, every activation and per-micro-batch buffer
scales with its samples, and a 1F1B stage ``i`` of ``p`` holds ``min(p - i, m)`` micro-batches
of ``mbs`` samples, ``min((p - i) * mbs, B / dp)`` samples, non-decreasing in ``mbs``.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import TopologyCost
from taps_core.costs.ops import Memory, keeps_scores
from taps_core.errors import InfeasibleError, InvalidInputError
from taps_core.ir.graph import MEMORY_BOUND_KINDS, OpGraph
from taps_core.plan.records import Plan, SearchInfo
from taps_core.search.fixed_config import (
    RECOMPUTE,
    FixedConfig,
    Layout3D,
    one_stage,
    plan_fixed,
    resolve,
)
from taps_core.search.pipeline import (
    in_flight,
    layer_range,
)
from taps_core.search.stage_shapes import shape_memo, sums_seconds

SPACES = ("megatron", "deepspeed")
FIT_TOLERANCE = 1e-9  # a configuration fits when its memory is within this fraction of the limit


@dataclass(frozen=True)
class Priced:
    """One configuration's step (seconds) and peak memory per device (bytes)."""

    config: FixedConfig
    step_s: float
    memory_bytes: float


@dataclass(frozen=True)
class ConfigSearch:
    """The fastest configuration of a space that fits, as a plan, and what was priced."""

    space: str
    plan: Plan | None  # None: no configuration fits
    best: Priced | None
    priced: tuple[Priced, ...]  # the configurations priced, fastest first
    fitting: int  # how many of them fit in memory
    candidates: int  # configurations of the space that divide; the rest were bounded out
    time_s: float


def space_has_zero1(space: str) -> bool:
    """Whether the space offers ZeRO-1 in training (both do: the distributed optimizer)."""
    return space in SPACES


def divisors(n: int) -> list[int]:
    """The positive divisors of ``n`` in increasing order."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def configurations(graph: OpGraph, topology: Topology, mode: str, space: str) -> list[FixedConfig]:
    """Every configuration of ``space`` on this cluster whose sizes divide (the model's own dims
    are checked when it is priced)."""
    if space not in SPACES:
        raise InvalidInputError("space", space, f"one of {SPACES}")
    cfg = graph.meta.get("config")
    batch = getattr(cfg, "batch_size", None)
    if batch is None:
        raise InvalidInputError("model", graph.name, "a model built from a config (with a batch)")
    g, nodes, layers = topology.gpus_per_node, topology.nodes, graph.num_layers
    train = mode == "train"
    if space == "deepspeed":
        tps, pps, sps, zeros = [1], [1], [False], [0, 1, 2, 3] if train else [0, 3]
    else:
        tps = divisors(g)
        pps = [p for p in divisors(nodes) if p <= max(1, layers)] if train else [1]
        sps, zeros = [False, True], [0, 1] if train else [0, 3]
    recomputes = ["none", "full"] if train else ["none"]
    if train and space != "deepspeed" and keeps_scores(graph):
        # Megatron-LM's selective recomputation; DeepSpeed checkpoints whole layers only
        recomputes.insert(1, "selective")
    out = []
    for tp in tps:
        for pp in pps:
            dp = nodes // pp * (g // tp)
            if batch % dp:
                continue
            per_replica = batch // dp
            for mbs in divisors(per_replica) if train else [per_replica]:
                for sp in sps if tp > 1 else [False]:
                    for rc in recomputes:
                        for zero in zeros:
                            out.append(FixedConfig(tp, pp, dp, mbs, sp, rc, zero))
    return out


@dataclass(frozen=True)
class _Figures:
    """A stage's step time and gradient sync (seconds) and its memory (bytes per device), with
    its activations for one micro-batch in flight."""

    time_s: float
    sync_s: float
    memory: Memory


def _extrapolated(one: _Figures, two: _Figures, n: int) -> _Figures:
    """The figures of ``n`` identical layers from those of one and two (see the module
    docstring): every sum grows by one layer's share per layer, the transient maximum stays."""
    a, b = one.memory, two.memory

    def grow(x: float, y: float) -> float:
        return x + (n - 1) * (y - x)

    memory = Memory(
        grow(a.parameters, b.parameters), grow(a.gradients, b.gradients),
        grow(a.optimizer, b.optimizer), grow(a.activations, b.activations),
        grow(a.kv_cache, b.kv_cache), max(a.transient, b.transient),
    )
    return _Figures(grow(one.time_s, two.time_s), grow(one.sync_s, two.sync_s), memory)


def _plus(base: _Figures, minus: _Figures, plus: _Figures) -> _Figures:
    """``base - minus + plus``: a stage's figures with one more layer."""
    a, b, c = base.memory, minus.memory, plus.memory

    def add(x: float, y: float, z: float) -> float:
        return x - y + z

    memory = Memory(
        add(a.parameters, b.parameters, c.parameters), add(a.gradients, b.gradients, c.gradients),
        add(a.optimizer, b.optimizer, c.optimizer),
        add(a.activations, b.activations, c.activations),
        add(a.kv_cache, b.kv_cache, c.kv_cache), max(a.transient, c.transient),
    )
    return _Figures(
        add(base.time_s, minus.time_s, plus.time_s), add(base.sync_s, minus.sync_s, plus.sync_s),
        memory,
    )


def compute_bound_flops(graph: OpGraph) -> float:
    """Forward FLOPs of the ops that run at the GPU's compute rate (memory-bound ops excluded)."""
    return sum(graph.flops(op) for op in graph.ops if op.kind not in MEMORY_BOUND_KINDS)


def compute_floor_s(graph: OpGraph, topology: Topology, mode: str) -> float:
    """A lower bound on any plan's step (seconds): each pass over every FLOP of the
    compute-bound ops at peak x efficiency, spread evenly over every GPU."""
    passes = 3.0 if mode == "train" else 1.0
    rate = topology.gpu.peak_flops * topology.compute_efficiency * topology.num_gpus
    return passes * compute_bound_flops(graph) / rate


def uniform_layers(graph: OpGraph) -> bool:
    """Whether every layer has the same ops (kinds, einsums and dims) in the same order."""
    sigs: dict[int, list[tuple[object, ...]]] = {}
    for op in graph.ops:
        if op.layer is not None:
            dims = tuple(sorted(graph.dim_sizes(op).items()))
            sigs.setdefault(op.layer, []).append((op.kind, op.einsum, dims, op.tp_role))
    return len({tuple(s) for s in sigs.values()}) <= 1


class _Pricer:
    """Prices configurations of one model on one cluster: stage shapes from the process's
    :func:`~taps_core.search.stage_shapes.shape_memo` (bandwidth-independent), priced on this
    cluster's links and kept for this search with its stage-to-stage sends."""

    def __init__(self, graph: OpGraph, topology: Topology, mode: str, links: LinkModel) -> None:
        self.graph, self.topology, self.mode, self.links = graph, topology, mode, links
        self.layers = graph.num_layers
        self.shapes = shape_memo(graph.meta["config"], mode, topology.gpu,
                                 topology.gpus_per_node, topology.compute_efficiency)
        self._stages: dict[tuple[object, ...], _Figures] = {}
        self._sends: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[float, float]] = {}

    def micro(self, samples: int, layers: int) -> OpGraph:
        """The model with ``layers`` layers at a micro-batch of ``samples``."""
        return self.shapes.micro(samples, layers)

    def stage(self, lay: Layout3D, head: bool, tail: bool, layers: int) -> _Figures:
        """Figures of a stage of ``layers`` layers (one micro-batch in flight) on the first
        hosts of this cluster."""
        key = (one_stage(lay), head, tail, layers)
        if key not in self._stages:
            shape = self.shapes.shape(lay, head, tail, layers, self.links)
            comm = TopologyCost(self.links.first_hosts(lay.hosts_per_stage))
            self._stages[key] = _Figures(
                shape.compute_s + sums_seconds(shape.comm, comm),
                sums_seconds(shape.sync, comm),
                shape.memory,
            )
        return self._stages[key]

    def figures(self, lay: Layout3D, head: bool, tail: bool, n: int) -> _Figures:
        """A stage of ``n`` layers: its one-layer version plus ``n - 1`` times what a second
        layer adds, measured on the stage without head and tail (the same layer for every
        stage: it reads a layer and is read by the stage's end)."""
        one = self.stage(lay, head, tail, 1)
        if n == 1:
            return one
        if head and tail:  # no pipeline: the model itself
            return _extrapolated(one, self.stage(lay, True, True, 2), n)
        bare = self.stage(lay, False, False, 1)
        two = self.stage(lay, False, False, 2)
        return _extrapolated(one, _plus(one, bare, two), n)

    def compute_floor_s(self, lay: Layout3D) -> float:
        """A lower bound on the configuration's step (seconds): every pass of every FLOP at the
        GPUs' peak x efficiency, spread over all GPUs, stretched by the 1F1B bubble
        ``(m + p - 1) / m`` (memory-bound ops and communication only add to it)."""
        samples = lay.micro_batch_size * lay.dp
        one, two = (self.flops(samples, k) for k in (1, 2))
        work = lay.microbatches * (one + (self.layers - 1) * (two - one))
        passes = (4.0 if lay.recompute else 3.0) if self.mode == "train" else 1.0
        gpu = self.topology.gpu
        rate = gpu.peak_flops * self.topology.compute_efficiency * self.topology.num_gpus
        bubble = (lay.microbatches + lay.pp - 1) / lay.microbatches
        return bubble * passes * work / rate

    def flops(self, samples: int, layers: int) -> float:
        """Forward FLOPs of the compute-bound ops of one micro-batch of the model with
        ``layers`` layers."""
        return compute_bound_flops(self.micro(samples, layers))

    def send_s(self, src: tuple[int, ...], dst: tuple[int, ...], nbytes: float) -> float:
        """Seconds of a stage-to-stage send of ``nbytes`` (as
        :func:`taps_core.search.sends.send_seconds`; the route's loads grow with the bytes)."""
        if (src, dst) not in self._sends:
            g = self.topology.gpus_per_node
            a = [h * g + j for h in src for j in range(g)]
            b = [h * g + j for h in dst for j in range(g)]
            loads, latency = self.links._route(
                np.array(a), np.array(b), np.full(len(a), 1.0 / len(a))
            )
            self._sends[(src, dst)] = (
                float((loads / self.links.capacity_Bps).max(initial=0.0)), latency
            )
        per_byte, latency = self._sends[(src, dst)]
        return nbytes * per_byte + latency

    def price(self, config: FixedConfig) -> Priced:
        """The configuration's step and memory (raises InvalidInputError when it does not
        divide the model)."""
        lay = resolve(config, self.graph, self.topology, self.mode)
        if lay.pp == 1:
            f = self.figures(lay, True, True, self.layers)
            return Priced(config, f.time_s, f.memory.total)
        steps, memory = self.priced_splits(lay, np.array([lay.split]))
        return Priced(config, float(steps[0]), float(memory[0]))

    def priced_splits(self, lay: Layout3D, splits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The 1F1B step (seconds) and the fullest stage's memory (bytes per device) of the
        pipelined ``lay`` at each row of ``splits`` ([n, pp] layers per stage), all at once:
        each stage's figures (:meth:`figure_rows`) and sends, the tied exchange on the first
        and last stage, the micro-batches each stage holds in flight."""
        p, m = lay.pp, lay.microbatches
        kinds = ["f"] + ["m"] * (p - 2) + ["l"]
        rows = {k: self.figure_rows(lay, k, int(splits.max())) for k in set(kinds)}
        # [4, n, p]: own time, sync, memory, activations of every stage of every split
        figs = np.stack([rows[k][:, splits[:, i] - 1] for i, k in enumerate(kinds)], axis=2)
        sends, tied = self.stage_sends(lay)
        per_mb = figs[0] / m + np.array(sends)
        sync = figs[1] + np.where(np.isin(np.arange(p), (0, p - 1)), tied, 0.0)
        steps = (m - 1) * per_mb.max(axis=1) + per_mb.sum(axis=1) + sync.max(axis=1)
        held = np.array([in_flight(i, p, m) - 1 for i in range(p)])
        return steps, (figs[2] + held * figs[3]).max(axis=1)

    def stage_sends(self, lay: Layout3D) -> tuple[list[float], float]:
        """Each stage's seconds of boundary sends per micro-batch (forward out, gradient back)
        and the tied embedding's exchange between the first and last stage per step."""
        p = lay.pp
        one = self.micro(lay.micro_batch_size * lay.dp, 1)
        boundary = float(one.tensors[[op for op in one.ops if op.layer == 0][-1].output].nbytes)
        hosts = lay.hosts_per_stage
        span = [tuple(range(i * hosts, (i + 1) * hosts)) for i in range(p)]
        sends = [0.0] * p
        for i in range(p - 1):
            sends[i] += self.send_s(span[i], span[i + 1], boundary)
            sends[i + 1] += self.send_s(span[i + 1], span[i], boundary)
        held = self.shapes.tied_bytes(lay, self.links)
        tied = 0.0
        if held is not None:
            gpus = hosts * self.topology.gpus_per_node
            tied = max(
                self.send_s(span[0], span[-1], held * gpus),
                self.send_s(span[-1], span[0], held * gpus),
            )
        return sends, tied

    def best_split(self, config: FixedConfig, limit_bytes: float) -> tuple[Priced, bool]:
        """``config`` (no ``first``/``last`` given) at the fastest layer split Megatron-LM
        accepts that fits ``limit_bytes``: its even split, or any counts of the first and last
        stage with the others sharing the rest evenly (every split priced at once,
        :meth:`priced_splits`). Ties keep the even split. Also returns whether the fastest
        split regardless of memory fits (then recomputing more cannot help). The least memory
        when none fits."""
        even = self.price(config)
        lay = resolve(config, self.graph, self.topology, self.mode)
        splits = uneven_splits(self.layers, lay.pp) if lay.pp > 1 else np.zeros((0, 1), int)
        if not len(splits):
            return even, True
        steps, memory = self.priced_splits(lay, splits)
        fit = memory <= limit_bytes * (1 + FIT_TOLERANCE)
        even_fits = even.memory_bytes <= limit_bytes * (1 + FIT_TOLERANCE)
        fastest = int(np.argmin(steps))
        free_fits = bool(even_fits if even.step_s <= steps[fastest] else fit[fastest])

        def at(i: int) -> Priced:
            return self.price(replace(config, first=int(splits[i, 0]), last=int(splits[i, -1])))

        if fit.any():
            i = int(np.argmin(np.where(fit, steps, np.inf)))
            better = not even_fits or steps[i] < even.step_s * (1 - 1e-12)
            return (at(i) if better else even), free_fits
        return min((even, at(int(np.argmin(memory)))), key=lambda pr: pr.memory_bytes), False

    def figure_rows(self, lay: Layout3D, kind: str, most: int) -> np.ndarray:
        """Rows [time without sync, sync, memory, activations] of a first ("f"), middle ("m")
        or last ("l") stage of 1 .. ``most`` layers (seconds, bytes per device): what
        :meth:`figures` gives for each count, in arrays (the same operations, so the same
        floats)."""
        head, tail = kind == "f", kind == "l"
        one = self.stage(lay, head, tail, 1)
        plus = _plus(one, self.stage(lay, False, False, 1), self.stage(lay, False, False, 2))
        extra = np.arange(most, dtype=float)  # layers beyond the first

        def grow(x: float, y: float) -> np.ndarray:
            return x + extra * (y - x)

        a, b = one.memory, plus.memory
        transient = np.where(extra == 0, a.transient, max(a.transient, b.transient))
        memory = (grow(a.parameters, b.parameters) + grow(a.gradients, b.gradients)
                  + grow(a.optimizer, b.optimizer) + grow(a.activations, b.activations)
                  + grow(a.kv_cache, b.kv_cache) + transient)
        sync = grow(one.sync_s, plus.sync_s)
        return np.array([grow(one.time_s, plus.time_s) - sync, sync, memory,
                         grow(a.activations, b.activations)])


@lru_cache(maxsize=256)
def uneven_splits(layers: int, p: int) -> np.ndarray:
    """Every split of ``layers`` over ``p`` >= 2 stages that Megatron-LM's
    ``--decoder-first/last-pipeline-num-layers`` express, but the one with every stage alike:
    rows [first, middle x (p - 2), last] of layers per stage (each >= 1), a read-only array."""
    out = []
    for mid in range(1, layers) if p > 2 else [0]:
        rest = layers - mid * (p - 2)
        for first in range(1, rest):
            last = rest - first
            if not (first == last == mid or (p == 2 and first == last)):
                out.append((first, *[mid] * (p - 2), last))
    splits = np.array(out, dtype=int).reshape(len(out), p)
    splits.flags.writeable = False  # shared by the memo
    return splits


def price_whole(
    graph: OpGraph, topology: Topology, mode: str, links: LinkModel, config: FixedConfig
) -> Priced:
    """A configuration priced on the whole model (models whose layers differ)."""
    plan = plan_fixed(graph, topology, config, mode=mode, memory_limit_bytes=math.inf,
                      links=links)
    return Priced(config, plan.total_time_s, plan.memory.total)


def search_configurations(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str = "train",
    space: str = "megatron",
    memory_limit_bytes: float | None = None,
    links: LinkModel | None = None,
    label: str | None = None,
    max_stages: int | None = None,
) -> ConfigSearch:
    """Price every configuration of ``space`` (see the module docstring), with at most
    ``max_stages`` pipeline stages (None: any), and return the fastest that fits
    ``memory_limit_bytes`` per device (default: the GPU's memory) as a plan; exhaustive, so
    that plan is optimal within the space."""
    start = time.perf_counter()
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    if not limit > 0:
        raise InvalidInputError("memory_limit", limit, "> 0")
    links = links or LinkModel(topology)
    if layer_range(graph) is None:
        raise InvalidInputError("model", graph.name, "a model with layers")
    fast = uniform_layers(graph)
    pricer = _Pricer(graph, topology, mode, links)
    candidates = []
    for config in configurations(graph, topology, mode, space):
        if max_stages is not None and config.pp > max_stages:
            continue
        if config.zero == 0 and mode == "train" and space_has_zero1(space):
            continue  # dominated: ZeRO-1 runs the same collectives in less memory
        try:
            lay = resolve(config, graph, topology, mode)
        except InvalidInputError:
            continue
        candidates.append((pricer.compute_floor_s(lay), config))
    # smaller micro-batches first among equal floors: they rule out their larger siblings
    candidates.sort(key=lambda fc: (fc[0], fc[1].mbs, fc[1].text()))
    priced: list[Priced] = []
    fits: dict[FixedConfig, bool] = {}  # per configuration priced (at its split)
    # per configuration with mbs=0: the least micro-batch size priced that fits at no split
    too_big: dict[FixedConfig, int] = {}
    free_fits: dict[FixedConfig, bool] = {}  # its fastest split regardless of memory fits
    best_s = math.inf
    for floor_s, config in candidates:
        if floor_s >= best_s:
            break  # every configuration left is slower than the best that fits
        if any(free_fits.get(replace(config, recompute=less))
               for less in RECOMPUTE[: RECOMPUTE.index(config.recompute)]):
            continue  # dominated: recomputing more only adds work to a plan that fits already
        family = replace(config, mbs=0)
        if config.mbs >= too_big.get(family, math.inf):
            continue  # a smaller micro-batch fits at no split: neither does this one
        try:
            if fast and config.pp > 1:
                pr, free_fits[config] = pricer.best_split(config, limit)
            else:
                pr = (pricer.price(config) if fast
                      else price_whole(graph, topology, mode, links, config))
        except InvalidInputError:
            continue  # a size that does not divide this model (e.g. the heads by tp)
        priced.append(pr)
        fits[pr.config] = pr.memory_bytes <= limit * (1 + FIT_TOLERANCE)
        if not fits[pr.config]:  # best_split returns a fitting split when there is one
            too_big[family] = min(config.mbs, too_big.get(family, config.mbs))
        free_fits.setdefault(config, fits[pr.config])
        if fits[pr.config]:
            best_s = min(best_s, pr.step_s)
    priced.sort(key=lambda pr: (pr.step_s, pr.memory_bytes, pr.config.text()))
    fitting = [pr for pr in priced if fits[pr.config]]
    best = fitting[0] if fitting else None
    plan = None
    if best is not None:
        plan = plan_fixed(graph, topology, best.config, mode=mode, memory_limit_bytes=limit,
                          label=label or space, links=links)
        elapsed = time.perf_counter() - start
        note = (
            f"the fastest of {len(candidates)} {space} configurations (exhaustive: "
            f"{len(priced)} priced, the rest bounded by compute): {best.config.text()}"
        )
        info = SearchInfo(
            algorithm=f"{space}-exhaustive",
            time_s=elapsed,
            num_strategies=len(candidates),
            status="optimal",
            lower_bound_s=plan.total_time_s,
            note=note,
        )
        plan = replace(plan, search=info)
    return ConfigSearch(space, plan, best, tuple(priced), len(fitting), len(candidates),
                        time.perf_counter() - start)


def best_configuration(
    graph: OpGraph,
    topology: Topology,
    *,
    mode: str = "train",
    space: str = "megatron",
    memory_limit_bytes: float | None = None,
    links: LinkModel | None = None,
    label: str | None = None,
    max_stages: int | None = None,
) -> Plan:
    """The plan of :func:`search_configurations`; raises InfeasibleError when none fits."""
    return found_plan(search_configurations(
        graph, topology, mode=mode, space=space, memory_limit_bytes=memory_limit_bytes,
        links=links, label=label, max_stages=max_stages,
    ))


# the configuration (``--fixed`` text) an exhaustive search names at the end of its note
CONFIG_IN_NOTE = re.compile(
    r"tp=\d+,pp=\d+,dp=\d+,mbs=\d+,sp=\d,recompute=\w+,zero=\d(?:,first=\d+)?(?:,last=\d+)?"
)


def configuration_in(note: str) -> str | None:
    """The framework configuration a search note names (:func:`search_configurations` writes
    it; plans seeded by it repeat that note), or None."""
    found = CONFIG_IN_NOTE.search(note)
    return found.group(0) if found else None


def found_plan(found: ConfigSearch) -> Plan:
    """The plan of a framework's exhaustive search; raises InfeasibleError when none fits."""
    if found.plan is None:
        least = min((pr.memory_bytes for pr in found.priced), default=math.inf)
        raise InfeasibleError(
            f"memory: no {found.space} configuration fits (the leanest of {len(found.priced)} "
            f"needs {least / 2**30:.3g} GiB per device); use more GPUs or a smaller batch"
        )
    return found.plan


def supports(graph: OpGraph) -> bool:
    """Whether the model is a stack of identical layers built from a config with a batch (what
    the exhaustive configuration search prices in closed form)."""
    cfg = graph.meta.get("config")
    return (
        getattr(cfg, "batch_size", None) is not None
        and hasattr(cfg, "num_hidden_layers")
        and getattr(cfg, "model_type", "") != "resnet"
        and layer_range(graph) is not None
        and uniform_layers(graph)
    )
