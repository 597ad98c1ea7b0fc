"""Reduce raw timings to medians and fit alpha (s) and beta (s/byte) by least squares."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from validation.formulas import LevelParams, ring_bytes_per_rank, ring_steps


@dataclass(frozen=True)
class Sample:
    """Median time (s) of one collective ``kind`` of ``size_bytes`` on a group of ``p`` ranks."""

    kind: str
    p: int
    size_bytes: int
    seconds: float


@dataclass(frozen=True)
class LevelFit:
    """Fit result of one level: parameters, points used and relative fit error."""

    params: LevelParams
    points: int
    rms_rel_error: float
    max_rel_error: float

    def to_dict(self) -> dict[str, float]:
        """JSON form (seconds, seconds per byte, bytes per second)."""
        return {
            "alpha_s": self.params.alpha_s,
            "beta_s_per_byte": self.params.beta_s_per_byte,
            "bandwidth_Bps": self.params.bandwidth_Bps,
            "points": self.points,
            "rms_rel_error": self.rms_rel_error,
            "max_rel_error": self.max_rel_error,
        }


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median, min, max and spread over repeats of per-repeat times.

    ``records`` come from :func:`validation.rank_jobs.bench_collectives` of all ranks. The time
    of one repeat is, with ``t0``/``t1`` stamps on every record (one machine's monotonic
    clock), the last end minus the last start over the participating ranks per call: a rank
    that left the barrier early does not count its wait for the others. Without stamps it is
    the slowest participating rank's time. Rows keep scenario, kind and size.
    """
    per_repeat: dict[tuple, dict[int, float]] = defaultdict(dict)
    stamps: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    meta: dict[tuple, dict[str, Any]] = {}
    for rec in records:
        key = (rec["scenario"], rec["kind"], rec["size_bytes"])
        times = per_repeat[key]
        times[rec["repeat"]] = max(times.get(rec["repeat"], 0.0), rec["seconds"])
        meta[key] = {"p": rec["p"], "groups": rec["groups"]}
        stamps[(*key, rec["repeat"])].append(rec)
    for (*key, rep), recs in stamps.items():
        if all(r.get("t0") is not None and r.get("t1") is not None for r in recs):
            inner = max(r.get("inner", 1) for r in recs)
            span = max(r["t1"] for r in recs) - max(r["t0"] for r in recs)
            per_repeat[tuple(key)][rep] = span / inner
    rows = []
    for key, times in per_repeat.items():
        values = sorted(times.values())
        med = statistics.median(values)
        rows.append({
            "scenario": key[0], "kind": key[1], "size_bytes": key[2], **meta[key],
            "median_s": med, "min_s": values[0], "max_s": values[-1],
            "spread": (values[-1] - values[0]) / med if med > 0 else 0.0,
            "repeats": len(values),
        })
    rows.sort(key=lambda r: (r["scenario"], r["kind"], r["size_bytes"]))
    return rows


LARGE_BYTES = 2**20


def _joint(rows: list[tuple[float, float]]) -> tuple[float, float]:
    """Relative least squares of ``a * alpha + b * beta = 1`` over ``(a, b)`` rows.

    A negative alpha (or a singular system) is clamped to alpha = 0 with beta refitted alone.
    """
    saa = sum(a * a for a, _ in rows)
    sab = sum(a * b for a, b in rows)
    sbb = sum(b * b for _, b in rows)
    sa = sum(a for a, _ in rows)
    sb = sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    if det > 1e-12 * saa * sbb:
        alpha = (sa * sbb - sb * sab) / det
        beta = (saa * sb - sab * sa) / det
        if alpha >= 0:
            return alpha, beta
    return 0.0, sb / sbb


def fit_level(samples: list[Sample], large_bytes: int = LARGE_BYTES) -> LevelFit:
    """Least-squares alpha (s per step) and beta (s per byte) over ``samples``.

    Each sample gives ``steps * alpha + bytes_per_rank * beta = seconds`` (ring formulas); rows
    are divided by ``seconds`` so that the fit minimises relative error. With at least two
    samples of ``size_bytes >= large_bytes`` and one smaller, the fit runs in two stages:
    beta (with a free intercept) from the large messages, where bandwidth dominates, then
    alpha from the small ones with beta fixed, where latency dominates. Otherwise alpha and
    beta are fitted jointly. Alpha is never negative. Raises ValueError without a positive beta.
    """
    usable = [s for s in samples if s.seconds > 0 and s.p > 1]
    if len(usable) < 2:
        raise ValueError(f"need >= 2 timed samples with p > 1 to fit, got {len(usable)}")

    def row(s: Sample) -> tuple[float, float]:
        return (ring_steps(s.kind, s.p) / s.seconds,
                ring_bytes_per_rank(s.kind, s.p, s.size_bytes) / s.seconds)

    large = [row(s) for s in usable if s.size_bytes >= large_bytes]
    small = [row(s) for s in usable if s.size_bytes < large_bytes]
    if len(large) >= 2 and small:
        _, beta = _joint(large)
        # alpha minimising sum((a * alpha + b * beta - 1)^2) over the small messages
        alpha = max(0.0, sum(a * (1.0 - b * beta) for a, b in small)
                    / sum(a * a for a, _ in small))
    else:
        alpha, beta = _joint(large + small)
    if beta <= 0:
        raise ValueError("fit gave no positive beta: timings do not grow with message size")
    rel = [a * alpha + b * beta - 1.0 for a, b in large + small]
    return LevelFit(LevelParams(alpha, beta), len(rel),
                    math.sqrt(sum(e * e for e in rel) / len(rel)), max(abs(e) for e in rel))
