"""The sweep as data: what ``python -m taps_core sweep --json`` prints and the Sweep page's
tables are made from (one function, so the page and the command line agree)."""

from __future__ import annotations

from typing import Any

from taps_core.plan.report import plan_to_json
from taps_core.studies.sweep import Priced, Sweep


def priced_to_json(q: Priced) -> dict[str, Any]:
    """One plan at one point: ``{"fits": true, **plan JSON, "structure", "searched"}`` or
    ``{"fits": false, "reason"}`` (the shape of ``compare --json``'s plans)."""
    if q.plan is None:
        return {"fits": False, "reason": q.reason}
    return {
        "fits": True,
        **plan_to_json(q.plan),
        "structure": q.shape.words() if q.shape is not None else "",
        "searched": q.searched,
    }


def sweep_to_json(sw: Sweep) -> dict[str, Any]:
    """``{"own_bandwidth_GBps", "points": [{"bandwidth_GBps", "own", "plans": {label: plan}}],
    "changes": [{"low_GBps", "high_GBps", "structure", "words", "twins"}]}`` (GB/s per host: 1e9
    bytes/s summed over a host's NICs); points not computed yet are left out."""
    return {
        "own_bandwidth_GBps": None if sw.own_Bps is None else sw.own_Bps / 1e9,
        "complete": sw.complete,
        "points": [
            {
                "bandwidth_GBps": p.node_bandwidth_Bps / 1e9,
                "own": sw.is_own(p.node_bandwidth_Bps),
                "plans": {lb: priced_to_json(q) for lb, q in p.plans.items()},
            }
            for p in sw.done
        ],
        "changes": [
            {
                "low_GBps": c.low_Bps / 1e9,
                "high_GBps": c.high_Bps / 1e9,
                "structure": c.structure,
                "words": c.words,
                "twins": c.twins,
            }
            for c in sw.changes
        ],
    }
