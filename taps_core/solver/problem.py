"""The pairwise cost problem the search solves: one strategy per node, node plus edge costs.

``cost = sum_v c_v(s_v) + sum_(u,v) C_uv(s_u, s_v)``. Costs may be ``+inf`` (forbidden
combination) but never NaN. Parallel edges are allowed and simply add up.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taps_core.errors import InvalidInputError

MAX_PROBLEM_BYTES = 16 * 2**20


@dataclass(frozen=True)
class CostGraph:
    """Node cost vectors and edge cost matrices (rows index the source's strategies)."""

    node_costs: dict[str, np.ndarray]
    edges: tuple[tuple[str, str, np.ndarray], ...] = ()

    def __post_init__(self) -> None:
        for name, c in self.node_costs.items():
            if c.ndim != 1 or len(c) == 0:
                raise InvalidInputError(f"nodes[{name}].costs", c.shape, "a non-empty list")
            if np.isnan(c).any():
                raise InvalidInputError(f"nodes[{name}].costs", "NaN", "numbers")
        for u, v, m in self.edges:
            where = f"edges[{u}->{v}].costs"
            if u not in self.node_costs or v not in self.node_costs:
                raise InvalidInputError(f"edges[{u}->{v}]", (u, v), "between declared nodes")
            if u == v:
                raise InvalidInputError(f"edges[{u}->{v}]", u, "between two different nodes")
            shape = (len(self.node_costs[u]), len(self.node_costs[v]))
            if m.shape != shape:
                raise InvalidInputError(where, m.shape, f"a {shape[0]}x{shape[1]} matrix")
            if np.isnan(m).any():
                raise InvalidInputError(where, "NaN", "numbers")

    @property
    def num_strategies(self) -> int:
        return int(sum(len(c) for c in self.node_costs.values()))

    def total(self, choice: Mapping[str, int]) -> float:
        """Cost of a full assignment."""
        cost = sum(float(c[choice[n]]) for n, c in self.node_costs.items())
        return cost + sum(float(m[choice[u], choice[v]]) for u, v, m in self.edges)


@dataclass(frozen=True)
class Solution:
    """Chosen strategy index per node and the plan's cost (in the problem's cost unit).

    ``status`` is "optimal" (proven), "feasible" (the best found; the optimum lies in
    ``[lower_bound, cost]``) or "infeasible" (every assignment has an infinite cost or breaks a
    constraint).
    """

    strategies: dict[str, int]
    cost: float
    stats: dict[str, Any] = field(default_factory=dict)
    status: str = "optimal"
    lower_bound: float | None = None

    @property
    def gap(self) -> float | None:
        """``(cost - lower_bound) / |cost|``: 0 when optimal, None when unknown."""
        if self.status == "optimal":
            return 0.0
        if self.lower_bound is None or not np.isfinite(self.lower_bound):
            return None
        if not np.isfinite(self.cost):
            return None
        return max(0.0, self.cost - self.lower_bound) / max(abs(self.cost), 1e-300)


def problem_from_json(data: Any) -> CostGraph:
    """Parse ``{"nodes":[{"name","costs"}],"edges":[{"src","dst","costs"}]}``."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InvalidInputError("problem", type(data).__name__, 'an object with a "nodes" list')
    costs: dict[str, np.ndarray] = {}
    for i, node in enumerate(data["nodes"]):
        if not isinstance(node, dict) or "name" not in node or "costs" not in node:
            raise InvalidInputError(f"nodes[{i}]", node, 'an object with "name" and "costs"')
        name = str(node["name"])
        if name in costs:
            raise InvalidInputError(f"nodes[{i}].name", name, "unique")
        costs[name] = _numbers(node["costs"], f"nodes[{i}].costs", 1)
    edges = []
    for i, edge in enumerate(data.get("edges", [])):
        if not isinstance(edge, dict) or not {"src", "dst", "costs"} <= set(edge):
            raise InvalidInputError(f"edges[{i}]", edge, 'an object with "src", "dst", "costs"')
        edges.append(
            (str(edge["src"]), str(edge["dst"]), _numbers(edge["costs"], f"edges[{i}].costs", 2))
        )
    return CostGraph(costs, tuple(edges))


def _numbers(value: Any, field_name: str, ndim: int) -> np.ndarray:
    try:
        arr = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise InvalidInputError(field_name, value, f"a {ndim}-D list of numbers") from None
    if arr.ndim != ndim or arr.size == 0:
        raise InvalidInputError(field_name, value, f"a non-empty {ndim}-D list of numbers")
    return arr


def load_problem(text: str | bytes) -> CostGraph:
    """Parse problem JSON text (bounded size)."""
    if len(text) > MAX_PROBLEM_BYTES:
        raise InvalidInputError("problem file size", len(text), f"<= {MAX_PROBLEM_BYTES} bytes")
    try:
        return problem_from_json(json.loads(text))
    except json.JSONDecodeError as err:
        raise InvalidInputError("problem JSON", str(err), "valid JSON") from None
