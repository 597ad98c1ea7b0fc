"""Measured against predicted communication of whole plans.

For each plan the executor records every collective phase it runs (op, label, kind, level,
group size, bytes per rank, seconds after a world barrier). Three numbers per plan:

- ``predicted_s``: the engine's own ``Plan.comm_time_s`` on the calibrated topology;
- ``executed_predicted_s``: the engine's cost model (``TopologyCost`` on the same topology)
  applied to the phases the executor really ran -- it isolates the time model from the
  accounting (which collectives a plan needs);
- ``measured_s``: per timed step, the sum over phases of the phase time (last end minus last
  start over the ranks, see :mod:`validation.comm`); the median over steps.

:func:`accounting` matches the executed phases against the engine's phases of the plan, so the
report can say exactly which collectives the engine counts differently.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any

from validation.formulas import ring_steps

BYTES_TOLERANCE = 0.01  # relative: phases whose byte counts agree this closely match


def _cost_model(topology):
    from taps_core.cluster.links import LinkModel
    from taps_core.costs.collectives import TopologyCost

    return TopologyCost(LinkModel(topology))


def phase_seconds(cost, kind: str, level: str, q: int, per_rank_bytes: float) -> float | None:
    """Engine seconds of one phase (None for a group spanning both levels: not a phase)."""
    from taps_core.costs.collectives import Phase

    if level not in ("intra", "inter") or q < 2:
        return None
    return cost.seconds(Phase(kind, level, q, per_rank_bytes, ring_steps(kind, q)))


def engine_phases(plan, topology) -> list[dict[str, Any]]:
    """Every phase of every op of an engine plan with its predicted seconds."""
    cost = _cost_model(topology)
    out = []
    for op in plan.ops:
        for label, ph in op.phases:
            out.append({"op": op.name, "label": label, "kind": ph.collective, "level": ph.level,
                        "q": ph.q, "per_rank_bytes": ph.per_rank_bytes,
                        "predicted_s": cost.seconds(ph)})
    return out


def phase_time(rank_runs: list[dict[str, Any]], step: int, j: int) -> float:
    """Seconds of phase ``j`` of timed step ``step``: last end minus last start over ranks
    (all ranks read one machine's monotonic clock)."""
    recs = [run["steps"][step]["records"][j] for run in rank_runs]
    if any(rec["kind"] != recs[0]["kind"] or rec["op"] != recs[0]["op"] for rec in recs):
        raise ValueError(f"ranks disagree on phase {j} of step {step}")
    return max(rec["t1"] for rec in recs) - max(rec["t0"] for rec in recs)


def executed_phases(rank_runs: list[dict[str, Any]], topology) -> list[dict[str, Any]]:
    """Executed phases with the median over timed steps of :func:`phase_time`."""
    cost = _cost_model(topology)
    first = rank_runs[0]["steps"]
    if not first:
        raise ValueError("no timed steps were recorded")
    n = len(first[0]["records"])
    out = []
    for j in range(n):
        rec = first[0]["records"][j]
        per_step = [phase_time(rank_runs, i, j) for i in range(len(first))]
        out.append({
            "op": rec["op"], "label": rec["label"], "kind": rec["kind"], "level": rec["level"],
            "q": rec["q"], "per_rank_bytes": rec["per_rank_bytes"],
            "measured_s": statistics.median(per_step),
            "predicted_s": phase_seconds(cost, rec["kind"], rec["level"], rec["q"],
                                         rec["per_rank_bytes"]),
        })
    return out


def step_totals(rank_runs: list[dict[str, Any]]) -> list[float]:
    """Communication seconds of each timed step (sum of :func:`phase_time` over phases)."""
    steps = rank_runs[0]["steps"]
    out = []
    for i in range(len(steps)):
        n = len(steps[i]["records"])
        if any(len(run["steps"][i]["records"]) != n for run in rank_runs):
            raise ValueError("ranks recorded different numbers of collectives")
        out.append(sum(phase_time(rank_runs, i, j) for j in range(n)))
    return out


def _key(row: dict[str, Any]) -> tuple:
    return (row["op"], row["label"], row["kind"], row["level"], row["q"])


def accounting(engine: list[dict[str, Any]], executed: list[dict[str, Any]]) -> dict[str, Any]:
    """Match executed phases to engine phases by (op, label, kind, level, q) and bytes.

    Returns ``matched`` (count), ``engine_only`` and ``executed_only`` (lists of phases; a
    phase in both with different bytes appears in each list).
    """
    pool: dict[tuple, list[dict[str, Any]]] = {}
    for row in engine:
        pool.setdefault(_key(row), []).append(row)
    matched = 0
    executed_only = []
    for row in executed:
        cands = pool.get(_key(row), [])
        hit = next((c for c in cands if math.isclose(c["per_rank_bytes"], row["per_rank_bytes"],
                                                     rel_tol=BYTES_TOLERANCE)), None)
        if hit is None:
            executed_only.append(row)
        else:
            cands.remove(hit)
            matched += 1
    engine_only = [row for rows in pool.values() for row in rows]
    return {"matched": matched, "engine_only": engine_only, "executed_only": executed_only}


def summarize_differences(acc: dict[str, Any]) -> list[str]:
    """One line per kind of difference between the engine's phases and the executed ones."""
    def label_class(label: str) -> str:
        for prefix in ("reshard grad", "reshard", "realign grad", "realign", "grad_sync",
                       "grad", "stats backward", "stats", "loss max", "fwd"):
            if label.startswith(prefix):
                return prefix
        return label

    lines = []
    for side, rows in (("engine only", acc["engine_only"]), ("executed only",
                                                            acc["executed_only"])):
        counts: Counter = Counter()
        nbytes: Counter = Counter()
        for r in rows:
            k = (label_class(r["label"]), r["kind"], r["level"])
            counts[k] += 1
            nbytes[k] += r["per_rank_bytes"]
        for (label, kind, level), c in sorted(counts.items()):
            lines.append(f"{side}: {c} x {label} {kind} ({level}), "
                         f"{nbytes[(label, kind, level)] / 1e6:.3f} MB per rank in total")
    return lines


def plan_summary(label: str, plan, topology, rank_runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Measured vs predicted communication of one plan (see the module docstring)."""
    eng = engine_phases(plan, topology)
    exe = executed_phases(rank_runs, topology)
    totals = step_totals(rank_runs)
    walls = [max(run["steps"][i]["wall_s"] for run in rank_runs) for i in range(len(totals))]
    med = statistics.median(totals)
    acc = accounting(eng, exe)
    unmodelled = [r for r in exe if r["predicted_s"] is None]
    return {
        "label": label,
        "predicted_s": plan.comm_time_s,
        "executed_predicted_s": sum(r["predicted_s"] or 0.0 for r in exe),
        "measured_s": med,
        "measured_min_s": min(totals),
        "measured_max_s": max(totals),
        "spread": (max(totals) - min(totals)) / med if med > 0 else 0.0,
        "steps": len(totals),
        "step_wall_s": statistics.median(walls),
        "inter_node_bytes": plan.inter_node_bytes,
        "intra_node_bytes": plan.intra_node_bytes,
        "phases_engine": len(eng),
        "phases_executed": len(exe),
        "phases_matched": acc["matched"],
        "unmodelled_phases": len(unmodelled),
        "differences": summarize_differences(acc),
        "error_pct": 100.0 * (plan.comm_time_s - med) / med if med > 0 else float("nan"),
        "strategies": {op.name: op.strategy.label() for op in plan.ops},
        "phases": exe,
    }


def order(values: dict[str, float]) -> list[str]:
    """Labels sorted by value (fastest first)."""
    return sorted(values, key=lambda k: values[k])


def format_plans(model: str, rows: dict[str, dict[str, Any]],
                 checks: dict[str, dict[str, Any]] | None = None) -> str:
    """Plain-text table: plan, measured and predicted communication (ms), error, order."""
    lines = [f"{model}: communication per training step (median of timed steps)",
             f"{'plan':<14} {'measured':>10} {'spread%':>8} {'predicted':>10} {'err%':>7} "
             f"{'exec-pred':>10} {'phases':>7} {'correct':>8}"]
    for label, r in rows.items():
        ok = "" if checks is None else ("yes" if checks[label]["ok"] else "NO")
        lines.append(
            f"{label:<14} {r['measured_s'] * 1e3:>8.1f}ms {100 * r['spread']:>8.1f} "
            f"{r['predicted_s'] * 1e3:>8.1f}ms {r['error_pct']:>7.1f} "
            f"{r['executed_predicted_s'] * 1e3:>8.1f}ms {r['phases_executed']:>7d} {ok:>8}")
    measured = order({k: r["measured_s"] for k, r in rows.items()})
    predicted = order({k: r["predicted_s"] for k, r in rows.items()})
    same = "same" if measured == predicted else "DIFFERENT"
    lines.append(f"order measured {' < '.join(measured)}; predicted {' < '.join(predicted)} "
                 f"({same})")
    return "\n".join(lines)
