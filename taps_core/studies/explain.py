"""The primer's smallest example, computed on any cluster: bytes moved versus time taken.

Plan A all-reduces a buffer over the GPUs of one host; plan B over one GPU on each of two
hosts. Per GPU, A sends more bytes (2(p-1)/p with the larger p) but over NVLink; B sends fewer
over the network. A volume cost model ranks them by bytes, the topology-aware model by time.
Both are costed the way the planner costs them: every group of the pattern runs at once
(B pairs each GPU with its peer on the other host, all rails busy), on the link model.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology
from taps_core.costs.collectives import Phase, TopologyCost, VolumeCost, all_reduce
from taps_core.errors import InvalidInputError, TapsError, check_positive
from taps_core.plan.records import Plan
from taps_core.plan.report import LETTER_NAMES, fmt_bytes, fmt_seconds, strategy_words
from taps_core.studies.shape import plan_shape, shape_change_words
from taps_core.units import fmt_sig


@dataclass(frozen=True)
class Case:
    """One way to all-reduce ``size_bytes``: its group, what each GPU sends, what it costs.

    ``time_s`` is the topology-aware time (``latency_s + bandwidth_s``); ``volume_s`` is what
    the volume model charges (bytes at one fixed rate). ``bottleneck`` is the most loaded link
    ``(src, dst, kind)`` and ``per_gpu_Bps`` the bandwidth each GPU effectively gets through it.
    """

    name: str
    description: str
    level: str
    group_size: int
    phases: tuple[Phase, ...]
    bytes_per_gpu: float
    time_s: float
    latency_s: float
    bandwidth_s: float
    volume_s: float
    bottleneck: tuple[str, str, str]
    per_gpu_Bps: float


def _case(
    links: LinkModel,
    name: str,
    description: str,
    level: str,
    q: int,
    size_bytes: float,
    volume: VolumeCost,
) -> Case:
    q_inter, q_intra = (q, 1) if level == "inter" else (1, q)
    phases = all_reduce(q_inter, q_intra, size_bytes)
    cost = TopologyCost(links)
    pattern = links.pattern(level, q, "ring")
    sent = sum(p.per_rank_bytes for p in phases)
    latency = sum(p.steps * pattern.alpha_s for p in phases)
    hot = int(np.argmax(pattern.loads / links.capacity_Bps))
    src, dst, link = links.links[hot]
    return Case(
        name=name,
        description=description,
        level=level,
        group_size=q,
        phases=phases,
        bytes_per_gpu=sent,
        time_s=sum(cost.seconds(p) for p in phases),
        latency_s=latency,
        bandwidth_s=sent * pattern.beta_s_per_B,
        volume_s=sum(volume.seconds(p) for p in phases),
        bottleneck=(src, dst, link.kind),
        per_gpu_Bps=1.0 / pattern.beta_s_per_B,
    )


def volume_vs_time(
    topology: Topology, size_bytes: float = 1e9, *, volume: VolumeCost | None = None
) -> tuple[Case, Case]:
    """Plan A (all GPUs of one host) and plan B (one GPU per host, two hosts) for one buffer.

    With an odd number of hosts, B spans all of them (groups must tile the hosts).

    Raises
    ------
    InvalidInputError
        If the cluster has one host or one GPU per host (one of the plans does not exist).

    Examples
    --------
    >>> from taps_core.cluster.presets import preset
    >>> a, b = volume_vs_time(preset("dgx-a100:2"))
    >>> round(a.bytes_per_gpu / 1e9, 2), round(b.bytes_per_gpu / 1e9, 2)
    (1.75, 1.0)
    >>> bool(b.time_s > 5 * a.time_s)
    True
    """
    check_positive("size_bytes", size_bytes)
    g, n = topology.gpus_per_node, topology.nodes
    if g < 2:
        raise InvalidInputError("gpus_per_node", g, ">= 2 for the same-host plan")
    if n < 2:
        raise InvalidInputError("nodes", n, ">= 2 for the cross-host plan")
    links = LinkModel(topology)
    volume = volume or VolumeCost()
    qb = 2 if n % 2 == 0 else n
    a = _case(
        links, "A", f"all-reduce over the {g} GPUs of one host", "intra", g, size_bytes, volume
    )
    b = _case(
        links,
        "B",
        f"all-reduce over {qb} GPUs, one on each of {qb} hosts",
        "inter",
        qb,
        size_bytes,
        volume,
    )
    return a, b


# ---- plans in words: replication, decisions, changes ------------------------------------------


def op_choice_label(op: object) -> str:
    """An op's whole choice as text: strategy, plus ZeRO stage and recomputation if any."""
    text = op.strategy.label()  # type: ignore[attr-defined]
    if getattr(op, "zero", 0):
        text += f" zero{op.zero}"  # type: ignore[attr-defined]
    if getattr(op, "recompute", False):
        text += " recompute"
    if getattr(op, "selective", False):
        text += " selective-recompute"
    return text


def layer_relative_names(ops: Sequence[Any]) -> dict[str, str]:
    """Op name without its layer's common dotted prefix (``L3.attn.q`` -> ``attn.q``).

    ``ops`` are anything with ``name`` and ``layer`` (graph ops or plan ops); ops outside a
    layer keep their name.
    """
    by_layer: dict[int, list[str]] = {}
    for op in ops:
        if op.layer is not None:
            by_layer.setdefault(op.layer, []).append(op.name)
    out = {op.name: op.name for op in ops}
    for names in by_layer.values():
        parts = [n.split(".") for n in names]
        common = 0  # dotted parts shared by every op of the layer ("L3" or "S3.B2")
        while all(len(p) > common + 1 and p[common] == parts[0][common] for p in parts):
            common += 1
        prefix = "".join(f"{p}." for p in parts[0][:common])
        for name in names:
            out[name] = name[len(prefix) :] or name
    return out


def _ways(split: Sequence[tuple[str, int]]) -> int:
    return math.prod(f for _, f in split)


def replicated_share(plan: Plan, level: str = "inter") -> float:
    """Share of the plan's compute in ops that do not use a level whole (0 if it has one member).

    On ``"inter"`` this is work every host repeats; on ``"intra"`` work every GPU of a host
    repeats. In a pipeline each stage is judged on its own hosts (a one-host stage repeats
    nothing across hosts).
    """
    stage_hosts = (
        {st.index: len(st.hosts) for st in plan.pipeline.stages} if plan.pipeline else {}
    )
    total = sum(op.compute_s for op in plan.ops)
    if total <= 0:
        return 0.0
    rep = 0.0
    for op in plan.ops:
        if level == "inter":
            size = stage_hosts.get(op.stage, plan.nodes) if op.stage is not None else plan.nodes
            used = _ways(op.strategy.inter)
        else:
            size, used = plan.gpus_per_node, _ways(op.strategy.intra)
        if size > 1 and used < size:
            rep += op.compute_s
    return rep / total


def replication_warning(plan: Plan, *, threshold: float = 0.1) -> str | None:
    """A sentence when hosts repeat each other's work on ``threshold`` or more of compute."""
    share = replicated_share(plan, "inter")
    if share < threshold:
        return None
    return (
        f"Every one of the {plan.nodes} hosts repeats the same work on {100 * share:.0f}% of "
        f"the compute (those ops are not split across hosts): with this network, computing "
        f"twice is cheaper than sending the data between hosts. Compute per step is "
        f"{fmt_seconds(plan.compute_time_s)}."
    )


def _level_words(split: Sequence[tuple[str, int]]) -> str:
    """``batch 2 ways, FFN 4 ways`` or ``nothing (replicated)`` for one level's split."""
    return ", ".join(f"{LETTER_NAMES.get(ch, ch)} {f} ways" for ch, f in split) or "replicated"


def _dominant_words(plan: Plan, names: set[str]) -> str:
    weight: Counter[str] = Counter()
    for op in plan.ops:
        if op.name in names:
            weight[strategy_words(op.strategy)] += op.compute_s + op.comm_time_s
    return weight.most_common(1)[0][0] if weight else "replicated"


@dataclass(frozen=True)
class Decision:
    """One choice that shapes a plan, and what it saves against the best plan without it.

    ``saved_s`` is the runner-up's step time minus the plan's (None: nothing fits without it).
    """

    what: str
    share: float
    saved_s: float | None
    runner_up: str
    words: str


def _choices(plan: Plan) -> list[tuple[str, str | None, float, set[str]]]:
    """(level, letter or None for 'replicated', compute share, op names) of a plan's choices."""
    total = sum(op.compute_s for op in plan.ops) or 1.0
    stage_hosts = (
        {st.index: len(st.hosts) for st in plan.pipeline.stages} if plan.pipeline else {}
    )
    found: dict[tuple[str, str | None], tuple[float, set[str]]] = {}
    for op in plan.ops:
        hosts = stage_hosts.get(op.stage, plan.nodes) if op.stage is not None else plan.nodes
        for level, split, size in (
            ("inter", op.strategy.inter, hosts),
            ("intra", op.strategy.intra, plan.gpus_per_node),
        ):
            if size <= 1:
                continue
            keys = [ch for ch, _ in split] if _ways(split) == size else [None]
            for key in keys:
                w, names = found.get((level, key), (0.0, set()))
                names.add(op.name)
                found[(level, key)] = (w + op.compute_s / total, names)
    return [(lv, ch, w, names) for (lv, ch), (w, names) in found.items()]


def decisions(
    plan: Plan,
    graph: Any,
    topology: Any,
    *,
    mode: str,
    memory_limit_bytes: float | None = None,
    limit: int = 4,
    min_share: float = 0.05,
) -> list[Decision]:
    """The few choices that matter most in ``plan``, each priced against its runner-up.

    A choice is a letter split over a level (``batch across hosts``) or leaving a level
    replicated. Its runner-up is the best plan in which the ops making that choice may not
    make it, every other lever held: the plan's micro-batch count and ZeRO stage (one build
    and one Lagrangian search each, :func:`runner_up`); the saving is the step time difference.
    Choices carrying less than ``min_share`` of the compute are skipped.
    """
    if plan.pipeline is not None:
        return [_pipeline_decision(plan, graph, topology, mode, memory_limit_bytes)]
    out = []
    for level, letter, share, names in _choices(plan):
        if share < min_share:
            continue
        where = "across hosts" if level == "inter" else "inside hosts"
        if letter is None:
            what = f"leaving ops replicated {where}"

            def allow(g: Any, op: Any, s: Any, lv=level, ns=names) -> bool:
                size = topology.nodes if lv == "inter" else topology.gpus_per_node
                return op.name not in ns or _ways(s.level(lv)) == size
        else:
            what = f"splitting {LETTER_NAMES.get(letter, letter)} {where}"

            def allow(g: Any, op: Any, s: Any, lv=level, ch=letter, ns=names) -> bool:
                return op.name not in ns or all(c != ch for c, _ in s.level(lv))

        other = runner_up(plan, graph, topology, mode, memory_limit_bytes, allow)
        if other is None:
            saved, runner = None, "nothing fits"
            tail = "without it no plan fits"
        else:
            saved = other.total_time_s - plan.total_time_s
            runner = _dominant_words(other, names)
            tail = (
                f"saves {_saving_words(plan, other)} per step "
                f"({100 * max(saved, 0.0) / max(other.total_time_s, 1e-30):.0f}%) over the "
                "runner-up with the same micro-batches and ZeRO stage, which would "
                + (
                    "leave these ops replicated"
                    if runner == "replicated"
                    else f"use {runner} for these ops"
                )
            )
        words = f"**{what}** ({100 * share:.0f}% of compute): {tail}."
        out.append(Decision(what, share, saved, runner, words))
    out.sort(key=lambda d: -(math.inf if d.saved_s is None else d.saved_s))
    return out[:limit]


def runner_up(
    plan: Plan,
    graph: Any,
    topology: Any,
    mode: str,
    memory_limit_bytes: float | None,
    allow: Any,
) -> Plan | None:
    """The best plan within ``allow`` at ``plan``'s micro-batch count and ZeRO stage (None when
    none fits): one problem built and searched to its Lagrangian bound and best fitting plan
    (no front search, no clock: exact enough to price a choice, the same on every machine).
    A model without a config to cut into micro-batches is searched whole instead."""
    from taps_core.cluster.links import LinkModel
    from taps_core.costs.collectives import TopologyCost
    from taps_core.plan.evaluate import evaluate
    from taps_core.search.flat import choices_of, micro_graph, search_fixed
    from taps_core.search.planner import search

    k = plan.microbatches
    limit = topology.gpu.memory_bytes if memory_limit_bytes is None else memory_limit_bytes
    try:
        if k > 1 and not hasattr(graph.meta.get("config"), "with_workload"):
            return search(graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes,
                          allow=allow, exact_fronts=False, time_budget_s=None)
        micro = graph if k == 1 else micro_graph(graph, k)
        zero = max((op.zero for op in plan.ops), default=0)
        links = LinkModel(topology)
        problem, sol, info = search_fixed(
            micro, topology, mode=mode, comm=TopologyCost(links), limit=limit, microbatches=k,
            zero_stages=(zero,), allow=allow, exact_fronts=False,
        )
        return evaluate(micro, links, mode, choices_of(problem, sol), label="runner-up",
                        cost_model="topology", search=info, memory_limit_bytes=limit,
                        microbatches=k)
    except TapsError:
        return None


def _saving_words(plan: Plan, other: Plan) -> str:
    """What ``plan`` saves over the runner-up ``other``: one figure when ``other`` is proven
    optimal (or its bound is within 5% of the saving), else the proven range ("up to" the
    saving over the runner-up found when the bound proves no saving at all)."""
    hi = max(other.total_time_s - plan.total_time_s, 0.0)
    bound = other.search.lower_bound_s
    if other.search.status == "optimal" or bound is None:
        return fmt_seconds(hi)
    lo = max(bound - plan.total_time_s, 0.0)
    if hi - lo <= 0.05 * hi:
        return fmt_seconds(hi)
    if lo > 0:
        return f"{fmt_seconds(lo)} to {fmt_seconds(hi)}"
    return f"up to {fmt_seconds(hi)}"  # the runner-up found; a faster one is not ruled out


def _pipeline_decision(
    plan: Plan, graph: Any, topology: Any, mode: str, memory_limit_bytes: float | None
) -> Decision:
    """Pipelining itself, priced against the best plan without stages (the same search).

    The choices inside a pipelined plan's stages are made on each stage's own graph and hosts;
    they are described per stage, not re-priced here.
    """
    from taps_core.search.configs import supports
    from taps_core.search.planner import expert_plan, search

    pi = plan.pipeline
    assert pi is not None
    what = f"{len(pi.stages)} pipeline stages with {plan.microbatches} micro-batches"
    if supports(graph):  # priced, not searched: the fastest configuration without stages
        kind = "Megatron-LM / DeepSpeed configuration without stages"
        runner_up = f"the fastest {kind}"
        flat = expert_plan(graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes,
                           max_stages=1)
    else:
        kind = "plan without stages"
        runner_up = f"the best {kind}"
        try:
            flat = search(
                graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes, pipeline=False
            )
        except TapsError:
            flat = None
    if flat is None:
        words = f"**{what}**: no {kind} fits in memory."
        return Decision(what, 1.0, None, "nothing fits", words)
    saved = flat.total_time_s - plan.total_time_s
    words = (
        f"**{what}** (bubble {fmt_seconds(pi.bubble_time_s)} per step): saves "
        f"{fmt_seconds(max(saved, 0.0))} per step "
        f"({100 * max(saved, 0.0) / max(flat.total_time_s, 1e-30):.0f}%) over {runner_up}, "
        f"which would {describe_flat(flat)}."
    )
    return Decision(what, 1.0, saved, describe_flat(flat), words)


def describe_flat(plan: Plan) -> str:
    """'split batch across hosts, ...' words of a plan's heaviest choice per level."""
    names = {op.name for op in plan.ops}
    return "use " + _dominant_words(plan, names) + " for most of the compute"


def slow_baseline_warning(taps: Plan, other: Plan, graph: Any, name: str) -> str | None:
    """Say why a baseline is slow when most of its extra step time is not communication."""
    extra = other.total_time_s - taps.total_time_s
    extra_compute = other.compute_time_s - taps.compute_time_s
    if extra <= 0.2 * taps.total_time_s or extra_compute < 0.5 * extra:
        return None
    ratio = other.total_time_s / max(taps.total_time_s, 1e-30)
    parts = []
    for level, where in (("intra", "inside hosts"), ("inter", "across hosts")):
        share = replicated_share(other, level)
        if share >= 0.1:
            parts.append(f"{100 * share:.0f}% of its compute is not split {where}")
    reasons = _indivisible(other, graph)
    part = (
        "all"
        if extra_compute >= extra
        else f"{100 * extra_compute / extra:.0f}%"
    )
    text = (
        f"The {name} step is {ratio:.1f}x TAPS's, and {part} of "
        f"the difference is compute, not communication"
    )
    if parts:
        text += ": " + "; ".join(parts)
    if reasons:
        text += f" ({reasons})"
    return text + "."


def _indivisible(plan: Plan, graph: Any) -> str:
    """'heads (12) do not divide by 8' for model letters of replicated ops, when that is why."""
    g = plan.gpus_per_node
    seen: dict[str, int] = {}
    for op in plan.ops:
        if _ways(op.strategy.intra) == g or g <= 1:
            continue
        try:
            sizes = graph.dim_sizes(graph.op_by_name[op.name])
        except (AttributeError, KeyError):
            return ""
        for ch in ("n", "f", "v"):
            if ch in sizes and sizes[ch] % g:
                seen.setdefault(ch, sizes[ch])
    return "; ".join(
        f"{LETTER_NAMES.get(ch, ch)} ({n}) do not divide by {g}" for ch, n in seen.items()
    )


def _diff(new: Plan, old: Plan, max_ops: int) -> tuple[str, list[str]]:
    """(what changes from ``old`` to ``new`` per level, why-clauses about ``new``)."""
    rel = layer_relative_names(new.ops)
    changed = [(a, b) for a, b in zip(new.ops, old.ops) if op_choice_label(a) != op_choice_label(b)]
    names = list(dict.fromkeys(rel[a.name] for a, _ in changed))
    # share of the ops' own compute (a pipeline's step counts its slowest stage only, so the
    # step's compute time is no denominator for ops summed over every stage)
    share = sum(a.compute_s for a, _ in changed) / max(sum(op.compute_s for op in new.ops), 1e-30)
    moves = []
    for level, where in (("inter", "across hosts"), ("intra", "inside hosts")):
        weight: Counter[tuple[str, str]] = Counter()
        for a, b in changed:
            pair = (_level_words(b.strategy.level(level)), _level_words(a.strategy.level(level)))
            weight[pair] += a.compute_s + b.compute_s + a.comm_time_s + b.comm_time_s
        (was, now), _ = weight.most_common(1)[0] if weight else (("", ""), 0)
        if was != now:
            moves.append(f"{where}, {was} becomes {now}")
    more = f" and {len(names) - max_ops} more" if len(names) > max_ops else ""
    what = (
        f"{len(changed)} op(s) change ({', '.join(names[:max_ops])}{more}; "
        f"{100 * share:.0f}% of compute): "
        + ("; ".join(moves) if moves else "their layouts change")
        + "."
    ) if changed else _same_choices_words(new, old)
    why = []
    d_inter = new.inter_node_bytes - old.inter_node_bytes
    d_compute = new.compute_time_s - old.compute_time_s
    d_intra = new.intra_node_bytes - old.intra_node_bytes
    if d_inter:
        more = "less" if d_inter < 0 else "more"
        why.append(f"sends {fmt_bytes(abs(d_inter))} {more} across hosts per step")
    if d_intra > 0:
        why.append(f"moves {fmt_bytes(d_intra)} more inside hosts")
    if d_compute > 1e-12:
        rep = replicated_share(new) - replicated_share(old)
        why.append(
            f"pays {fmt_seconds(d_compute)} more compute"
            + (f" (hosts now repeat {100 * rep:.0f}% more of the compute)" if rep > 0.01 else "")
        )
    return what, why


def change_words(
    below: Plan,
    above: Plan,
    low_Bps: float,
    high_Bps: float,
    *,
    above_at_low: Plan | None = None,
    max_ops: int = 3,
) -> str:
    """Why TAPS's plan at ``low_Bps`` (``below``) differs from the one at ``high_Bps``."""
    what, why = _diff(below, above, max_ops)
    text = (
        f"Below {fmt_sig(math.sqrt(low_Bps * high_Bps) / 1e9)} GB/s per host (between "
        f"{low_Bps / 1e9:.3g} and {high_Bps / 1e9:.3g}) {what}"
    )
    if why:
        text += " The slower-network plan " + ", ".join(why) + "."
    if above_at_low is not None:
        text += (
            f" Because at {low_Bps / 1e9:.3g} GB/s the faster-network plan would take "
            f"{fmt_seconds(above_at_low.total_time_s)} per step (communication "
            f"{fmt_seconds(above_at_low.comm_time_s)}), against {fmt_seconds(below.total_time_s)}."
        )
    return text


def _same_choices_words(new: Plan, old: Plan) -> str:
    """What differs between two plans whose ops all keep their choices: the layers' split
    over the pipeline stages (or, failing that, where each op runs)."""
    a, b = new.pipeline, old.pipeline
    if a is not None and b is not None and a.layer_split != b.layer_split:
        split = "/".join(map(str, b.layer_split)), "/".join(map(str, a.layer_split))
        return (f"every op keeps its choice; layers move between the pipeline stages "
                f"(layers per stage {split[0]} become {split[1]}).")
    return "every op keeps its choice; the ops are placed differently."


def plan_key(plan: Plan) -> tuple[str, ...]:
    """What tells two plans apart: every op's choice with its pipeline stage, the layer split
    and the micro-batch count (two plans with equal keys are the same plan)."""
    ops = tuple(
        op_choice_label(op) if op.stage is None else f"S{op.stage} {op_choice_label(op)}"
        for op in plan.ops
    )
    pi = plan.pipeline
    split = "/".join(map(str, pi.layer_split)) if pi is not None else "no stages"
    return (*ops, f"layers {split}",
            f"microbatches {pi.microbatches if pi is not None else plan.microbatches}")


def edit_words(plan: Plan, unedited: Plan, *, unedited_here: Plan | None = None) -> str:
    """How and why ``plan`` differs from the plan of the cluster before the user's edits.

    ``unedited_here`` is the unedited cluster's plan costed on the edited cluster.
    """
    if plan_key(plan) == plan_key(unedited):
        return (
            f"TAPS keeps the plan of the unedited {unedited.topology_name}: step "
            f"{fmt_seconds(plan.total_time_s)} here against {fmt_seconds(unedited.total_time_s)} "
            "there."
        )
    what, why = _diff(plan, unedited, 3)
    shape = shape_change_words(plan_shape(plan), plan_shape(unedited)).rstrip(".")
    text = f"Against the unedited {unedited.topology_name}" + (
        f": {shape[0].upper()}{shape[1:]}. Per op, {what}" if shape else f", {what}"
    )
    if why:
        text += " This plan " + ", ".join(why) + "."
    if unedited_here is not None:
        text += (
            f" Because on this cluster the unedited cluster's plan would take "
            f"{fmt_seconds(unedited_here.total_time_s)} per step (communication "
            f"{fmt_seconds(unedited_here.comm_time_s)}), against {fmt_seconds(plan.total_time_s)}."
        )
    return text
