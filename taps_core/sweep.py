"""Inter-node bandwidth sweep: how each plan's communication time, and TAPS's choice, move
as the network between hosts gets faster or slower.

Every point rescales the cluster's network links (NIC to switch) so that one host's NICs add
up to the requested bandwidth, keeping their relative speeds (a degraded NIC stays degraded),
then plans on the rescaled cluster. Runs of points where TAPS picks the same strategies are
*regimes*; the bandwidths where it switches are where topology awareness pays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from taps_core.errors import InvalidInputError, TapsError, check_positive
from taps_core.graph import OpGraph
from taps_core.plan import Plan
from taps_core.planner import BASELINES, NotFitting, compare, search
from taps_core.report import describe
from taps_core.topology import Topology, validate

MAX_POINTS = 40


@dataclass(frozen=True)
class SweepPoint:
    """Plans at one inter-node bandwidth (bytes/s per host, summed over its NICs).

    ``comm_time_s`` / ``total_time_s`` map a plan label to seconds per step, or None when the
    plan does not fit (``reasons`` says why). ``taps_strategies`` is TAPS's strategy label per
    op, in graph order (empty when TAPS does not fit).
    """

    node_bandwidth_Bps: float
    comm_time_s: dict[str, float | None]
    total_time_s: dict[str, float | None]
    reasons: dict[str, str]
    taps_summary: str
    taps_strategies: tuple[str, ...]


@dataclass(frozen=True)
class Regime:
    """Consecutive sweep points where TAPS keeps one plan; ``changed_ops`` counts the ops whose
    strategy differs from the previous regime's plan (0 for the first)."""

    first: int
    last: int
    low_Bps: float
    high_Bps: float
    summary: str
    changed_ops: int


@dataclass(frozen=True)
class Sweep:
    """A whole sweep: points in increasing bandwidth, TAPS's regimes, and the switch points."""

    labels: tuple[str, ...]
    points: tuple[SweepPoint, ...]
    regimes: tuple[Regime, ...]

    @property
    def changes(self) -> tuple[int, ...]:
        """Indices of points where TAPS's plan differs from the point before."""
        return tuple(r.first for r in self.regimes[1:])


def node_inter_bandwidth(topology: Topology) -> float:
    """Mean over hosts of the summed bandwidth (bytes/s) of a host's network links."""
    hosts = {d.name: d.host for d in topology.devices}
    per_host: dict[int, float] = {}
    for link in topology.links:
        if link.kind != "network":
            continue
        host = hosts[link.src] if hosts[link.src] is not None else hosts[link.dst]
        if host is not None:
            per_host[host] = per_host.get(host, 0.0) + link.bandwidth_Bps
    if not per_host:
        raise InvalidInputError(
            "topology", topology.name, "a cluster with network links between hosts (nodes >= 2)"
        )
    return float(np.mean(list(per_host.values())))


def scale_inter_bandwidth(topology: Topology, node_bandwidth_Bps: float) -> Topology:
    """A copy whose network links are scaled so a host's NICs add up to ``node_bandwidth_Bps``.

    Examples
    --------
    >>> from taps_core.presets import preset
    >>> t = scale_inter_bandwidth(preset("dgx-a100:2"), 100e9)  # 8 NICs x 12.5 GB/s
    >>> round(node_inter_bandwidth(t) / 1e9, 6)
    100.0
    """
    check_positive("node_bandwidth_Bps", node_bandwidth_Bps)
    factor = node_bandwidth_Bps / node_inter_bandwidth(topology)
    links = tuple(
        replace(k, bandwidth_Bps=k.bandwidth_Bps * factor) if k.kind == "network" else k
        for k in topology.links
    )
    return validate(replace(topology, links=links))


def log_bandwidths(low_Bps: float, high_Bps: float, points: int) -> tuple[float, ...]:
    """``points`` bandwidths evenly spaced in log between ``low_Bps`` and ``high_Bps``."""
    check_positive("low_Bps", low_Bps)
    check_positive("high_Bps", high_Bps)
    if high_Bps < low_Bps:
        raise InvalidInputError("high_Bps", high_Bps, f">= low_Bps ({low_Bps:g})")
    if isinstance(points, bool) or not isinstance(points, int) or not 1 <= points <= MAX_POINTS:
        raise InvalidInputError("points", points, f"an integer between 1 and {MAX_POINTS}")
    if points == 1:
        return (float(low_Bps),)
    return tuple(float(x) for x in np.geomspace(low_Bps, high_Bps, points))


def _plans_at(
    graph: OpGraph,
    topology: Topology,
    labels: tuple[str, ...],
    mode: str,
    memory_limit_bytes: float | None,
) -> dict[str, Plan | NotFitting]:
    if labels == ("taps",):
        try:
            return {
                "taps": search(graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes)
            }
        except TapsError as err:
            return {"taps": NotFitting("taps", str(err))}
    plans = compare(graph, topology, mode=mode, memory_limit_bytes=memory_limit_bytes)
    return {label: plans[label] for label in labels}


def sweep_inter_bandwidth(
    graph: OpGraph,
    topology: Topology,
    bandwidths_Bps: Sequence[float],
    *,
    mode: str = "train",
    memory_limit_bytes: float | None = None,
    labels: Sequence[str] = BASELINES,
) -> Sweep:
    """Plan ``graph`` at every inter-node bandwidth (bytes/s per host) and find TAPS's regimes.

    Parameters
    ----------
    graph, topology
        The model and the cluster (at least two hosts); only network links are rescaled.
    bandwidths_Bps : sequence of float
        Per-host inter-node bandwidths; sorted ascending before use.
    mode, memory_limit_bytes
        As for :func:`taps_core.planner.search`.
    labels : sequence of str
        Plans to cost, among :data:`taps_core.planner.BASELINES`; ``"taps"`` is always included.

    Returns
    -------
    Sweep

    Raises
    ------
    InvalidInputError
        On a single-host topology, an unknown label or no bandwidths.
    """
    unknown = [lb for lb in labels if lb not in BASELINES]
    if unknown:
        raise InvalidInputError("labels", unknown, f"a subset of {BASELINES}")
    chosen = ("taps", *(lb for lb in BASELINES if lb in labels and lb != "taps"))
    if not bandwidths_Bps:
        raise InvalidInputError("bandwidths_Bps", list(bandwidths_Bps), "at least one bandwidth")
    for bw in bandwidths_Bps:
        check_positive("bandwidths_Bps[]", bw)
    node_inter_bandwidth(topology)  # raises on a single host
    points: list[SweepPoint] = []
    for bw in sorted(float(b) for b in bandwidths_Bps):
        plans = _plans_at(
            graph, scale_inter_bandwidth(topology, bw), chosen, mode, memory_limit_bytes
        )
        taps = plans["taps"]
        points.append(
            SweepPoint(
                node_bandwidth_Bps=bw,
                comm_time_s={
                    lb: p.comm_time_s if isinstance(p, Plan) else None for lb, p in plans.items()
                },
                total_time_s={
                    lb: p.total_time_s if isinstance(p, Plan) else None for lb, p in plans.items()
                },
                reasons={lb: p.reason for lb, p in plans.items() if isinstance(p, NotFitting)},
                taps_summary=describe(taps) if isinstance(taps, Plan) else "does not fit",
                taps_strategies=tuple(op.strategy.label() for op in taps.ops)
                if isinstance(taps, Plan)
                else (),
            )
        )
    return Sweep(chosen, tuple(points), _regimes(points))


def _regimes(points: list[SweepPoint]) -> tuple[Regime, ...]:
    """Group consecutive points with identical TAPS strategies."""
    out: list[Regime] = []
    start = 0
    for i in range(1, len(points) + 1):
        if i < len(points) and points[i].taps_strategies == points[start].taps_strategies:
            continue
        prev = points[out[-1].first].taps_strategies if out else None
        cur = points[start].taps_strategies
        changed = (
            0
            if prev is None
            else (sum(a != b for a, b in zip(prev, cur)) + abs(len(prev) - len(cur)))
        )
        out.append(
            Regime(
                start,
                i - 1,
                points[start].node_bandwidth_Bps,
                points[i - 1].node_bandwidth_Bps,
                points[start].taps_summary,
                changed,
            )
        )
        start = i
    return tuple(out)
