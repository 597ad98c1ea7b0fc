"""Plan reports: the stable JSON documented in the README, plain-text tables, plan in words."""

from __future__ import annotations

import csv
import io
from collections import Counter
from typing import Any

from taps_core.ir.strategies import Strategy
from taps_core.plan.claims import search_status
from taps_core.plan.records import NotFitting, OpPlan, Plan
from taps_core.units import fmt_bytes, fmt_seconds

LETTER_NAMES = {
    "b": "batch",
    "s": "sequence",
    "m": "hidden",
    "n": "heads",
    "f": "FFN",
    "v": "vocab",
    "e": "experts",
    "c": "expert tokens",
    "k": "channels",
    "l": "classes",
    "t": "key sequence",
}


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The stable plan JSON (units in field names: seconds, bytes, bytes/s)."""
    return {
        "label": plan.label,
        "model": {"name": plan.model_name, "parameters": plan.parameters},
        "topology": {
            "name": plan.topology_name,
            "nodes": plan.nodes,
            "gpus_per_node": plan.gpus_per_node,
        },
        "mode": plan.mode,
        "cost_model": plan.cost_model,
        "workload": plan.workload,
        "totals": {
            "comm_time_s": plan.comm_time_s,
            "compute_time_s": plan.compute_time_s,
            "total_time_s": plan.total_time_s,
            "comm_bytes": plan.comm_bytes,
            "intra_node_bytes": plan.intra_node_bytes,
            "inter_node_bytes": plan.inter_node_bytes,
            "memory_per_device_bytes": plan.memory.total,
            "memory_limit_bytes": plan.memory_limit_bytes,
            "memory_breakdown_bytes": {
                "parameters": plan.memory.parameters,
                "gradients": plan.memory.gradients,
                "optimizer": plan.memory.optimizer,
                "activations": plan.memory.activations,
                "kv_cache": plan.memory.kv_cache,
                "transient": plan.memory.transient,
            },
            "volume_comm_time_s": plan.volume_comm_time_s,
            "bubble_time_s": plan.bubble_time_s,
        },
        "pipeline": pipeline_to_json(plan),
        "levers": {
            "microbatches": plan.microbatches,
            "flash_attention": plan.flash_attention,
            "recomputed_layers": plan.recomputed_layers,
            "selective_recompute_layers": plan.selective_layers,
            "zero_stages": sorted({op.zero for op in plan.ops}),
        },
        "ops": [
            {
                "name": op.name,
                "kind": op.kind,
                "layer": op.layer,
                "strategy": strategy_to_json(op.strategy),
                "sharding": sharding_class(op),
                "zero_stage": op.zero,
                "recompute": op.recompute,
                "selective_recompute": op.selective,
                "stage": op.stage,
                "compute_time_s": op.compute_s,
                "comm_time_s": op.comm_time_s,
                "comm_bytes": op.comm_bytes,
            }
            for op in plan.ops
        ],
        "links": [
            {
                "src": k.src,
                "dst": k.dst,
                "kind": k.kind,
                "bandwidth_Bps": k.bandwidth_Bps,
                "bytes": k.bytes,
                "busy_time_s": k.busy_time_s,
            }
            for k in plan.links
        ],
        "search": {
            "algorithm": plan.search.algorithm,
            "time_s": plan.search.time_s,
            "num_strategies": plan.search.num_strategies,
            "status": plan.search.status,
            "lower_bound_s": plan.search.lower_bound_s,
            "note": plan.search.note,
            "claim": search_status(plan),
        },
        "summary": describe(plan),
    }


def pipeline_to_json(plan: Plan) -> dict[str, Any] | None:
    """The pipeline of a plan (None without stages): stages with their layers, hosts and
    per-micro-batch times, the 1F1B schedule's figures and the point-to-point bytes."""
    pi = plan.pipeline
    if pi is None:
        return None
    return {
        "schedule": pi.schedule,
        "microbatches": pi.microbatches,
        "micro_batch_size": pi.micro_batch_size,
        "step_time_s": pi.step_time_s,
        "bubble_time_s": pi.bubble_time_s,
        "bubble_fraction": pi.bubble_fraction,
        "p2p_bytes": pi.p2p_bytes,
        "tied_sync_bytes": pi.tied_sync_bytes,
        "stages": [
            {
                "index": st.index,
                "layers": list(st.layers) if st.layers is not None else None,
                "hosts": list(st.hosts),
                "nodes": list(st.hosts),
                "gpus": st.gpus,
                "microbatch_time_s": st.microbatch_s,
                "send_time_s": st.send_s,
                "sync_time_s": st.sync_s,
                "memory_per_device_bytes": st.plan.memory.total,
                "summary": describe(st.plan),
            }
            for st in pi.stages
        ],
    }


def compare_to_json(plans: dict[str, Plan | NotFitting]) -> dict[str, Any]:
    """``{"plans": {label: plan JSON | {"fits": false, "reason": ...}}}``."""
    return {
        "plans": {
            label: (
                {"fits": False, "reason": p.reason}
                if isinstance(p, NotFitting)
                else {"fits": True, **plan_to_json(p)}
            )
            for label, p in plans.items()
        }
    }


def strategy_to_json(s: Strategy) -> dict[str, object]:
    """Splits per level; ``partial`` when the op hands on its partial sums (reduce-scatter)."""
    out: dict[str, object] = {"inter": dict(s.inter), "intra": dict(s.intra)}
    if s.defer:
        out["partial"] = True
    return out


SHARDING_CLASSES = ("replicated", "data parallel", "column", "row", "2-D", "expert", "sequence")


def sharding_class(op: OpPlan) -> str:
    """Colour class of an op's strategy (one of :data:`SHARDING_CLASSES`) for graph legends.

    Batch-like letters (batch, expert tokens) make data parallelism; one other split letter is
    ``row`` when the op contracts over it (partial sums) and ``column`` otherwise.
    """
    s = op.strategy
    letters = {ch for ch, _ in (*s.inter, *s.intra)}
    if not letters:
        return "replicated"
    if "e" in letters:
        return "expert"
    model = letters - {"b", "c"}
    if not model:
        return "data parallel"
    if model == {"s"}:
        return "sequence"
    if len(model) >= 2:
        return "2-D"
    inputs, output = op.einsum.split("->")
    contracted = set(inputs.replace(",", "")) - set(output)
    return "row" if model <= contracted else "column"


def strategy_words(s: Strategy) -> str:
    """``heads 8 ways inside nodes, batch 4 ways across nodes`` (or ``replicated``)."""
    parts = [f"{LETTER_NAMES.get(ch, ch)} {f} ways inside nodes" for ch, f in s.intra]
    parts += [f"{LETTER_NAMES.get(ch, ch)} {f} ways across nodes" for ch, f in s.inter]
    return ", ".join(parts) or "replicated"


def describe(plan: Plan) -> str:
    """The plan in words: the strategies that carry most of the compute, then the levers."""
    weight: Counter[str] = Counter()
    for op in plan.ops:
        weight[strategy_words(op.strategy)] += op.compute_s
    total = sum(weight.values()) or 1.0
    top = [f"{words} ({100 * w / total:.0f}% of compute)" for words, w in weight.most_common(2)]
    return "; ".join(top + levers_words(plan))


def levers_words(plan: Plan) -> list[str]:
    """The memory levers a plan pulls, in words (empty when it pulls none)."""
    out = []
    layers = len({op.layer for op in plan.ops if op.layer is not None})
    if plan.recomputed_layers:
        out.append(f"recomputes {plan.recomputed_layers} of {layers} layers")
    if plan.selective_layers:
        out.append(f"recomputes the attention core of {plan.selective_layers} of {layers} layers "
                   "(selective)")
    stages = Counter(op.zero for op in plan.ops if op.zero)
    if stages:
        stage = max(stages, key=lambda z: (stages[z], z))
        out.append(f"ZeRO-{stage} sharded optimizer state" + (
            ", gradients and parameters" if stage == 3 else (
                " and gradients" if stage == 2 else "")))
    if plan.pipeline is not None:
        pi = plan.pipeline
        split = pi.layer_split  # uneven splits named (a first or last stage lighter)
        layers = f"layers {'/'.join(map(str, split))}, " if len(set(split)) > 1 else ""
        out.insert(0, f"{len(pi.stages)} pipeline stages x {pi.microbatches} micro-batches "
                      f"({layers}bubble {100 * pi.bubble_fraction:.0f}%)")
    elif plan.microbatches > 1:
        out.append(f"{plan.microbatches} micro-batches")
    return out


def links_csv(plan: Plan) -> str:
    """Per-link traffic as CSV text."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["src", "dst", "kind", "bandwidth_Bps", "bytes", "busy_time_s"])
    for k in sorted(plan.links, key=lambda k: -k.bytes):
        w.writerow([k.src, k.dst, k.kind, k.bandwidth_Bps, k.bytes, k.busy_time_s])
    return buf.getvalue()


def plan_table(plan: Plan, *, max_ops: int = 40) -> str:
    """Compact human-readable table of a plan."""
    fixed = plan.search.algorithm == "fixed"
    how = "a given configuration" if fixed else f"searched with the {plan.cost_model} cost model"
    search_line = (
        f"  configuration: {plan.search.note} (priced in {fmt_seconds(plan.search.time_s)}, "
        "not searched)"
        if fixed
        else f"  search: {plan.search.algorithm}, {fmt_seconds(plan.search.time_s)}, "
        f"{plan.search.num_strategies} strategies, {search_status(plan)}"
    )
    lines = [
        f"{plan.label}: {plan.model_name} ({plan.parameters / 1e9:.3g}B params) on "
        f"{plan.topology_name} ({plan.nodes}x{plan.gpus_per_node} GPUs), {plan.mode}, {how}",
        f"  step time {fmt_seconds(plan.total_time_s)} = compute {fmt_seconds(plan.compute_time_s)}"
        f" + communication {fmt_seconds(plan.comm_time_s)}"
        + (f" + pipeline bubble {fmt_seconds(plan.bubble_time_s)}" if plan.pipeline else ""),
        f"  bytes sent: intra-node {fmt_bytes(plan.intra_node_bytes)}, inter-node "
        f"{fmt_bytes(plan.inter_node_bytes)}; memory/device {plan.memory.total / 2**30:.1f} GiB "
        f"of {plan.memory_limit_bytes / 2**30:.0f} GiB",
        search_line,
        f"  plan: {describe(plan)}",
        "",
        f"  {'op':<22} {'kind':<12} {'strategy':<38} {'levers':<9} {'compute':>10} "
        f"{'comm':>10}",
    ]
    shown = _collapse_layers(plan)
    for op, count in shown[:max_ops]:
        name = op.name if count == 1 else f"{op.name} (x{count})"
        levers = (f"Z{op.zero}" if op.zero else "") + (" RC" if op.recompute else "") + (
            " SRC" if op.selective else "")
        lines.append(
            f"  {name:<22} {op.kind:<12} {op.strategy.label():<38} {levers.strip():<9} "
            f"{fmt_seconds(op.compute_s):>10} {fmt_seconds(op.comm_time_s):>10}"
        )
    if len(shown) > max_ops:
        lines.append(f"  ... {len(shown) - max_ops} more")
    return "\n".join(lines)


def _collapse_layers(plan: Plan) -> list[tuple[OpPlan, int]]:
    """Ops with identical layer-relative name and strategy across layers, shown once x count."""
    seen: dict[tuple[str, str], list[Any]] = {}
    order: list[tuple[str, str]] = []
    for op in plan.ops:
        base = op.name.split(".", 1)[1] if op.layer is not None and "." in op.name else op.name
        key = (
            base if op.layer is not None else op.name,
            f"{op.strategy.label()} {op.zero} {op.recompute} {op.selective}",
        )
        if key not in seen:
            seen[key] = [op, 0]
            order.append(key)
        seen[key][1] += 1
    return [(seen[k][0], seen[k][1]) for k in order]
