"""Calibration: fit alpha (s) and beta (s/byte) per level and write an engine topology JSON.

Two groups are timed: the ranks of node 0 (same-node level, over loopback) and one rank per
node (cross-node level, over the shaped veths). Each level's medians are fitted to the ring
formulas of :mod:`validation.formulas` by :func:`validation.fit.fit_level`, pooled over the
collective kinds (all timed kinds by default, or ``fit_kinds``). The topology is built by
``taps_core.build_cluster`` with PCIe inside a node (bandwidth 1/beta_intra, latency
alpha_intra/2 per link, i.e. alpha per GPU-switch-GPU step) and one NIC per node (bandwidth
1/beta_inter, latency alpha_inter/2 per link).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from validation.benchmark import run_benchmark
from validation.fit import LevelFit, Sample, fit_level
from validation.launcher import DEFAULT_TIMEOUT_S

KiB = 2**10
MiB = 2**20
DEFAULT_SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB]
CALIBRATION_KINDS = ["all_reduce", "all_gather", "all_to_all"]
LEVELS = ("intra", "inter")
MEASUREMENTS_FORMAT = "taps-validation-calibration/1"
CPU_RANK_MEMORY_BYTES = 4 * 2**30
CPU_RANK_FLOPS = 5e9
CPU_RANK_MEMORY_BPS = 5e9


def calibration_scenarios(nodes: int, ranks_per_node: int) -> list[dict[str, Any]]:
    """Same-node group (node 0's ranks) and cross-node group (first rank of every node)."""
    if nodes < 2 or ranks_per_node < 2:
        raise ValueError("calibration needs >= 2 nodes and >= 2 ranks per node "
                         f"(got {nodes} x {ranks_per_node})")
    return [
        {"name": "same-node", "level": "intra", "groups": [list(range(ranks_per_node))]},
        {"name": "cross-node", "level": "inter",
         "groups": [[k * ranks_per_node for k in range(nodes)]]},
    ]


def fit_levels(rows: list[dict[str, Any]], kinds: list[str] | None = None) -> dict[str, LevelFit]:
    """One :class:`LevelFit` per level present in ``rows`` (optionally only some kinds)."""
    fits = {}
    for level in LEVELS:
        samples = [Sample(r["kind"], r["p"], r["size_bytes"], r["median_s"]) for r in rows
                   if r.get("level") == level and (kinds is None or r["kind"] in kinds)]
        if samples:
            fits[level] = fit_level(samples)
    return fits


def run_calibration(
    *,
    nodes: int,
    ranks_per_node: int,
    rate_mbit: float,
    sizes: list[int] | None = None,
    kinds: list[str] | None = None,
    fit_kinds: list[str] | None = None,
    repeats: int = 5,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    impl: str = "gloo",
    intra_rate_mbit: float | None = None,
    single_shot: bool = False,
) -> dict[str, Any]:
    """Time the calibration groups on the cluster that is up and fit both levels.

    ``kinds`` are timed; ``fit_kinds`` (default: all of ``kinds``) are pooled into the fit.
    ``impl``: gloo's own collectives or the point-to-point ones the plan executor uses;
    ``intra_rate_mbit`` only records the cluster's loopback shaping in the metadata;
    ``single_shot`` times every sample as one call right after a barrier, the way the plan
    executor runs its collectives, so alpha includes that start-up cost (by default small
    messages are looped back-to-back, which measures the pipelined latency).
    Returns the raw-measurements document (format :data:`MEASUREMENTS_FORMAT`): ``meta``,
    ``fits`` (pooled, used for the topology), ``fits_per_kind`` (diagnostic), ``rows``
    (medians) and ``records`` (every rank's every repeat).
    """
    sizes = sizes or DEFAULT_SIZES
    if len(set(sizes)) < 2:
        raise ValueError(f"calibration needs >= 2 different sizes to fit alpha and beta: {sizes}")
    kinds = kinds or CALIBRATION_KINDS
    fit_kinds = fit_kinds or kinds
    if not set(fit_kinds) <= set(kinds):
        raise ValueError(f"fit kinds {fit_kinds} must be among the timed kinds {kinds}")
    started = time.time()
    bench = run_benchmark(nodes=nodes, ranks_per_node=ranks_per_node,
                          scenarios=calibration_scenarios(nodes, ranks_per_node),
                          kinds=kinds, sizes=sizes, repeats=repeats, timeout_s=timeout_s,
                          impl=impl, single_shot=single_shot)
    rows = bench["rows"]
    fits = fit_levels(rows, fit_kinds)
    per_kind: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        try:
            per_kind[kind] = {lv: f.to_dict() for lv, f in fit_levels(rows, [kind]).items()}
        except ValueError as err:
            per_kind[kind] = {"error": str(err)}
    return {
        "format": MEASUREMENTS_FORMAT,
        "meta": {**_meta(nodes, ranks_per_node, rate_mbit, sizes, kinds, repeats, started),
                 "fit_kinds": fit_kinds, "impl": impl, "intra_rate_mbit": intra_rate_mbit,
                 "single_shot": single_shot},
        "fits": {lv: f.to_dict() for lv, f in fits.items()},
        "fits_per_kind": per_kind,
        "rows": rows,
        "records": bench["records"],
    }


def _meta(nodes: int, ranks_per_node: int, rate_mbit: float, sizes: list[int],
          kinds: list[str], repeats: int, started: float) -> dict[str, Any]:
    """Run description: cluster shape, shaped rate (Mbit/s and bytes/s), versions, duration."""
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover - run_benchmark needs torch already
        torch_version = None
    return {
        "nodes": nodes,
        "ranks_per_node": ranks_per_node,
        "rate_mbit": rate_mbit,
        "shaped_Bps": rate_mbit * 1e6 / 8,
        "sizes_bytes": sizes,
        "kinds": kinds,
        "repeats": repeats,
        "backend": "gloo",
        "torch": torch_version,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "started_unix_s": started,
        "duration_s": time.time() - started,
        "loadavg_1min_end": os.getloadavg()[0],
    }


def build_topology(nodes: int, ranks_per_node: int, fits: dict[str, dict[str, float]]) -> Any:
    """The engine :class:`~taps_core.cluster.topology.Topology` for the fitted levels."""
    from taps_core.cluster.topology import GpuSpec, build_cluster

    intra, inter = fits["intra"], fits["inter"]
    return build_cluster(
        nodes,
        ranks_per_node,
        name="emulated",
        gpu=GpuSpec("cpu-rank", CPU_RANK_MEMORY_BYTES, CPU_RANK_FLOPS, CPU_RANK_MEMORY_BPS),
        intra="pcie",
        pcie_bandwidth_Bps=intra["bandwidth_Bps"],
        intra_latency_s=intra["alpha_s"] / 2,
        nics_per_node=1,
        nic_bandwidth_Bps=inter["bandwidth_Bps"],
        inter_latency_s=inter["alpha_s"] / 2,
        efficiency={"nvlink": 1.0, "pcie": 1.0, "network": 1.0},
    )


def measurements_path(topology_path: Path) -> Path:
    """Where the raw measurements go: ``topo.json`` -> ``topo.measurements.json``."""
    return topology_path.with_name(topology_path.stem + ".measurements.json")


def write_outputs(topology_path: Path, calibration: dict[str, Any]) -> tuple[Path, Path]:
    """Write the topology JSON and the raw measurements next to it; return both paths."""
    from taps_core.cluster.io import dumps

    meta = calibration["meta"]
    topo = build_topology(meta["nodes"], meta["ranks_per_node"], calibration["fits"])
    topology_path.parent.mkdir(parents=True, exist_ok=True)
    topology_path.write_text(dumps(topo) + "\n")
    raw = measurements_path(topology_path)
    raw.write_text(json.dumps({**calibration, "topology_file": topology_path.name}, indent=1)
                   + "\n")
    return topology_path, raw
