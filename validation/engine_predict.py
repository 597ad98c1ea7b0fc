"""Predictions of the engine's own link-level model (``taps_core``) for the measured scenarios.

The engine costs a collective on one mesh level with *every* group of that level running at
once, so only scenarios of that shape have an engine prediction: ``same-node-concurrent``
(level intra, q = ranks per node), ``cross-node-concurrent`` (level inter, q = nodes) and the
all-reduce of ``world`` (hierarchical: reduce-scatter in the node, all-reduce across nodes,
all-gather in the node; gloo itself runs one flat ring). Anything else gives None. The engine
is imported lazily and any failure (its API is still moving) gives None with a reason.
"""

from __future__ import annotations

from typing import Any

ENGINE_SCENARIOS = {"same-node-concurrent": "intra", "cross-node-concurrent": "inter"}


class EnginePredictor:
    """Seconds for (scenario, kind, size) from ``taps_core`` on one topology; None if n/a."""

    def __init__(self, topology: Any) -> None:
        self.error: str | None = None
        try:
            from taps_core.cluster.links import LinkModel
            from taps_core.costs.collectives import Phase, TopologyCost, all_reduce

            self._phase, self._all_reduce = Phase, all_reduce
            self._cost = TopologyCost(LinkModel(topology))
            self._shape = (topology.nodes, topology.gpus_per_node)
        except Exception as err:  # engine missing or changed: predictions become None
            self.error = f"{type(err).__name__}: {err}"
            self._cost = None

    def seconds(self, scenario: str, kind: str, size_bytes: float) -> float | None:
        """Engine time (s) of ``kind`` with full size ``size_bytes``, or None."""
        if self._cost is None:
            return None
        nodes, per_node = self._shape
        try:
            if scenario == "world" and kind == "all_reduce":
                phases = self._all_reduce(nodes, per_node, size_bytes)
            elif scenario in ENGINE_SCENARIOS:
                level = ENGINE_SCENARIOS[scenario]
                q = per_node if level == "intra" else nodes
                phases = (self._single(kind, level, q, size_bytes),)
            else:
                return None
            return float(sum(self._cost.seconds(ph) for ph in phases))
        except Exception as err:  # keep the measurement even if the engine trips
            self.error = f"{type(err).__name__}: {err}"
            return None

    def _single(self, kind: str, level: str, q: int, size_bytes: float) -> Any:
        """One engine phase for a flat collective over ``q`` ranks (primer ring volumes)."""
        from validation.formulas import ring_bytes_per_rank, ring_steps

        return self._phase(kind, level, q, ring_bytes_per_rank(kind, q, size_bytes),
                           ring_steps(kind, q))
