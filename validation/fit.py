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
    of one repeat is the slowest participating rank's; rows keep scenario, kind and size.
    """
    per_repeat: dict[tuple, dict[int, float]] = defaultdict(dict)
    meta: dict[tuple, dict[str, Any]] = {}
    for rec in records:
        key = (rec["scenario"], rec["kind"], rec["size_bytes"])
        times = per_repeat[key]
        times[rec["repeat"]] = max(times.get(rec["repeat"], 0.0), rec["seconds"])
        meta[key] = {"p": rec["p"], "groups": rec["groups"]}
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


def fit_level(samples: list[Sample]) -> LevelFit:
    """Least-squares alpha and beta over ``samples``, minimising relative error.

    Each sample gives ``steps * alpha + bytes_per_rank * beta = seconds`` (ring formulas);
    rows are divided by ``seconds`` so small and large messages weigh alike. A negative alpha
    is clamped to 0 (beta refitted alone). Raises ValueError without a positive beta.
    """
    rows = [(ring_steps(s.kind, s.p) / s.seconds,
             ring_bytes_per_rank(s.kind, s.p, s.size_bytes) / s.seconds)
            for s in samples if s.seconds > 0 and s.p > 1]
    if len(rows) < 2:
        raise ValueError(f"need >= 2 timed samples with p > 1 to fit, got {len(rows)}")
    saa = sum(a * a for a, _ in rows)
    sab = sum(a * b for a, b in rows)
    sbb = sum(b * b for _, b in rows)
    sa = sum(a for a, _ in rows)
    sb = sum(b for _, b in rows)
    det = saa * sbb - sab * sab
    alpha, beta = -1.0, 0.0
    if det > 0:
        alpha = (sa * sbb - sb * sab) / det
        beta = (saa * sb - sab * sa) / det
    if alpha < 0 or det <= 0:
        alpha, beta = 0.0, sb / sbb
    if beta <= 0:
        raise ValueError("fit gave no positive beta: timings do not grow with message size")
    params = LevelParams(alpha, beta)
    rel = [a * alpha + b * beta - 1.0 for a, b in rows]
    return LevelFit(params, len(rows), math.sqrt(sum(e * e for e in rel) / len(rel)),
                    max(abs(e) for e in rel))
