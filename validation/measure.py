"""Measured vs predicted collective times on the emulated cluster.

Scenarios (for N nodes x R ranks per node):

- ``same-node``: node 0's R ranks alone (level intra);
- ``same-node-concurrent``: every node's R ranks at once (the 2 CPU cores are shared);
- ``cross-node``: one rank per node (level inter);
- ``cross-node-concurrent``: R cross-node groups at once, sharing every node's link;
- ``world``: all N*R ranks in one flat ring, crossing the network N times per ring (mixed).

Predictions come from calibrated alpha/beta: ``predicted_s`` is the link-level model of
:func:`validation.formulas.link_level_time_s` (bytes per link, shared links add up);
``predicted_ring_s`` is the per-group ring formula at the slowest level the group crosses
(it ignores link sharing); ``predicted_shaped_s`` is the link-level model with the network at
the shaped rate's TCP payload share (:data:`TCP_PAYLOAD_FRACTION`) and zero network latency,
i.e. what the tc settings alone promise; ``engine_s`` is ``taps_core``'s own prediction on the
calibrated topology where the engine can express the scenario (see
:mod:`validation.engine_predict`), else None.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from validation.benchmark import run_benchmark
from validation.formulas import KINDS, LevelParams, link_level_time_s, ring_time_s
from validation.launcher import DEFAULT_TIMEOUT_S

RESULTS_FORMAT = "taps-validation-results/1"
# htb counts whole Ethernet frames: 1448 B of TCP payload (with timestamps) per 1514 B frame
TCP_PAYLOAD_FRACTION = 1448 / 1514


def measure_scenarios(nodes: int, ranks_per_node: int) -> list[dict[str, Any]]:
    """The scenarios above that exist for this cluster shape."""
    n, r = nodes, ranks_per_node
    out: list[dict[str, Any]] = []
    if r >= 2:
        out.append({"name": "same-node", "level": "intra", "groups": [list(range(r))]})
    if r >= 2 and n >= 2:
        out.append({"name": "same-node-concurrent", "level": "intra",
                    "groups": [[k * r + j for j in range(r)] for k in range(n)]})
    if n >= 2:
        out.append({"name": "cross-node", "level": "inter",
                    "groups": [[k * r for k in range(n)]]})
    if n >= 2 and r >= 2:
        out.append({"name": "cross-node-concurrent", "level": "inter",
                    "groups": [[k * r + j for k in range(n)] for j in range(r)]})
        out.append({"name": "world", "level": "mixed", "groups": [list(range(n * r))]})
    return out


def load_levels(path: Path) -> tuple[LevelParams, LevelParams, str]:
    """Intra and inter alpha/beta from a calibration measurements JSON or a topology JSON.

    From a topology, beta = 1 / (bandwidth * efficiency) of the GPU-PCIe-switch link (intra)
    and of the NIC-network link (inter), alpha = 2 * that link's latency (one step crosses two
    links). Returns ``(intra, inter, description of the source)``.
    """
    data = json.loads(path.read_text())
    if "fits" in data:
        f = data["fits"]
        return (LevelParams(f["intra"]["alpha_s"], f["intra"]["beta_s_per_byte"]),
                LevelParams(f["inter"]["alpha_s"], f["inter"]["beta_s_per_byte"]),
                f"calibration measurements {path.name}")
    from taps_core.cluster.io import from_dict

    topo = from_dict(data)
    kinds = {d.name: d.kind for d in topo.devices}

    def level(src_kind: str, dst_kind: str, link_kind: str) -> LevelParams:
        for k in topo.links:
            if {kinds[k.src], kinds[k.dst]} == {src_kind, dst_kind} and k.kind == link_kind:
                bw = k.bandwidth_Bps * topo.efficiency_of(k.kind)
                return LevelParams(2 * k.latency_s, 1.0 / bw)
        raise ValueError(f"{path}: no {src_kind}-{dst_kind} {link_kind} link")

    return (level("gpu", "pcie_switch", "pcie"), level("nic", "network_switch", "network"),
            f"topology {path.name}")


def predict(row: dict[str, Any], ranks_per_node: int, intra: LevelParams, inter: LevelParams,
            shaped_Bps: float, intra_shaped: LevelParams | None = None) -> dict[str, float]:
    """Predicted seconds for one summary row (see the module docstring for the three kinds).

    ``intra_shaped`` replaces the calibrated same-node level in the shaped prediction."""
    groups, kind, size = row["groups"], row["kind"], row["size_bytes"]
    crosses = any(len({r // ranks_per_node for r in g}) > 1 for g in groups)
    slow = inter if crosses else intra
    ring = max(ring_time_s(kind, len(g), size, slow.alpha_s, slow.beta_s_per_byte)
               for g in groups)
    link = link_level_time_s(kind, groups, size, ranks_per_node, intra, inter)
    shaped = link_level_time_s(kind, groups, size, ranks_per_node, intra_shaped or intra,
                               LevelParams(0.0, 1.0 / (shaped_Bps * TCP_PAYLOAD_FRACTION)))
    return {"predicted_s": link, "predicted_ring_s": ring, "predicted_shaped_s": shaped}


def run_measurement(
    *,
    nodes: int,
    ranks_per_node: int,
    rate_mbit: float,
    intra: LevelParams,
    inter: LevelParams,
    calibration_source: str,
    sizes: list[int],
    kinds: list[str] | None = None,
    scenarios: list[str] | None = None,
    repeats: int = 5,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    impl: str = "gloo",
    intra_rate_mbit: float | None = None,
) -> dict[str, Any]:
    """Time the scenarios on the cluster that is up; return the results document.

    ``impl``: gloo's own collectives or the point-to-point ones of :mod:`validation.comm`;
    with ``intra_rate_mbit`` (the loopback shaping) the shaped prediction also models the
    same-node level at half that rate per rank.
    """
    if repeats < 5:
        raise ValueError(f"measure-collectives needs >= 5 repeats, got {repeats}")
    kinds = kinds or list(KINDS)
    chosen = measure_scenarios(nodes, ranks_per_node)
    if scenarios:
        unknown = set(scenarios) - {s["name"] for s in chosen}
        if unknown:
            raise ValueError(f"unknown or impossible scenario(s) {sorted(unknown)} for "
                             f"{nodes} x {ranks_per_node}")
        chosen = [s for s in chosen if s["name"] in scenarios]
    from validation.calibrate import build_topology
    from validation.engine_predict import EnginePredictor

    levels = {lv: {"alpha_s": p.alpha_s, "beta_s_per_byte": p.beta_s_per_byte,
                   "bandwidth_Bps": p.bandwidth_Bps} for lv, p in (("intra", intra),
                                                                   ("inter", inter))}
    engine = EnginePredictor(build_topology(nodes, ranks_per_node, levels))
    started = time.time()
    bench = run_benchmark(nodes=nodes, ranks_per_node=ranks_per_node, scenarios=chosen,
                          kinds=kinds, sizes=sizes, repeats=repeats, timeout_s=timeout_s,
                          impl=impl)
    shaped_Bps = rate_mbit * 1e6 / 8
    intra_shaped = None
    if intra_rate_mbit is not None:
        intra_shaped = LevelParams(0.0, 2.0 / (intra_rate_mbit * 1e6 / 8))
    rows = []
    for row in bench["rows"]:
        pred = predict(row, ranks_per_node, intra, inter, shaped_Bps, intra_shaped)
        engine_s = engine.seconds(row["scenario"], row["kind"], row["size_bytes"])
        measured = row["median_s"]
        rows.append({
            **row, **pred, "engine_s": engine_s,
            "error_pct": _err(pred["predicted_s"], measured),
            "ring_error_pct": _err(pred["predicted_ring_s"], measured),
            "shaped_error_pct": _err(pred["predicted_shaped_s"], measured),
            "engine_error_pct": None if engine_s is None else _err(engine_s, measured),
        })
    order = {s["name"]: i for i, s in enumerate(chosen)}
    rows.sort(key=lambda r: (order[r["scenario"]], KINDS.index(r["kind"]), r["size_bytes"]))
    return {
        "format": RESULTS_FORMAT,
        "meta": {
            "nodes": nodes, "ranks_per_node": ranks_per_node, "rate_mbit": rate_mbit,
            "shaped_Bps": shaped_Bps, "sizes_bytes": sizes, "kinds": kinds,
            "scenarios": chosen, "repeats": repeats, "backend": "gloo", "impl": impl,
            "intra_rate_mbit": intra_rate_mbit,
            "started_unix_s": started, "duration_s": time.time() - started,
            "loadavg_1min_end": os.getloadavg()[0],
            "error_pct": "100 * (predicted - measured median) / measured median",
        },
        "calibration": {"source": calibration_source, **levels},
        "engine": {"available": engine.error is None, "error": engine.error},
        "rows": rows,
        "checks_passed": len(bench["checks"]),
    }


def _err(predicted: float, measured: float) -> float:
    """Signed prediction error in percent of the measured time."""
    return 100.0 * (predicted - measured) / measured


def format_table(rows: list[dict[str, Any]]) -> str:
    """Plain-text table: scenario, kind, size, measured and predicted ms, error %."""
    lines = [f"{'scenario':<22} {'kind':<15} {'size':>7} {'measured':>10} {'predicted':>10} "
             f"{'err%':>7} {'engine err%':>11} {'spread%':>8}"]
    for r in rows:
        eng = r.get("engine_error_pct")
        lines.append(
            f"{r['scenario']:<22} {r['kind']:<15} {human_bytes(r['size_bytes']):>7} "
            f"{r['median_s'] * 1e3:>8.2f}ms {r.get('predicted_s', float('nan')) * 1e3:>8.2f}ms "
            f"{r.get('error_pct', float('nan')):>7.1f} {'-' if eng is None else f'{eng:.1f}':>11} "
            f"{100 * r['spread']:>8.1f}"
        )
    return "\n".join(lines)


def human_bytes(n: int) -> str:
    """``4096`` -> ``4KiB``, ``8388608`` -> ``8MiB`` (exact multiples only; else bytes)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}B"
