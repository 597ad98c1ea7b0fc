"""The pairwise cost problem the search solves: one strategy per node, node plus edge costs.

``cost = sum_v c_v(s_v) + sum_(u,v) C_uv(s_u, s_v)``. Costs may be ``+inf`` (forbidden
combination) but never NaN. Parallel edges are allowed and simply add up.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from taps_core.errors import InvalidInputError
from taps_core.limits import LIMITS, check_size
from taps_core.strict_json import loads

MAX_PROBLEM_BYTES = int(LIMITS["problem_file_bytes"].hi)


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
    """Parse ``{"nodes":[{"name","costs"}],"edges":[{"src","dst","costs"}]}``.

    Names are strings or integers; costs are finite numbers within +-1e300 (no ``Infinity``:
    use a large number to forbid a pair). Sizes are bounded by :mod:`taps_core.limits`.
    """
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InvalidInputError("problem", type(data).__name__, 'an object with a "nodes" list')
    nodes = data["nodes"]
    edges_in = data.get("edges", [])
    if not isinstance(edges_in, list):
        raise InvalidInputError("edges", edges_in, "a list of edges (or absent)")
    check_size("problem_nodes", len(nodes), field="nodes length")
    check_size("problem_edges", len(edges_in), field="edges length")
    costs: dict[str, np.ndarray] = {}
    top = int(LIMITS["strategies_per_node"].hi)
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or "name" not in node or "costs" not in node:
            raise InvalidInputError(f"nodes[{i}]", node, 'an object with "name" and "costs"')
        name = _name(node["name"], f"nodes[{i}].name")
        if name in costs:
            raise InvalidInputError(f"nodes[{i}].name", name, "unique")
        costs[name] = _numbers(node["costs"], f"nodes[{i}].costs", 1)
        if len(costs[name]) > top:
            raise InvalidInputError(f"nodes[{i}].costs", len(costs[name]), f"<= {top} strategies")
    entries = 0
    edges = []
    for i, edge in enumerate(edges_in):
        if not isinstance(edge, dict) or not {"src", "dst", "costs"} <= set(edge):
            raise InvalidInputError(f"edges[{i}]", edge, 'an object with "src", "dst", "costs"')
        src = _name(edge["src"], f"edges[{i}].src")
        dst = _name(edge["dst"], f"edges[{i}].dst")
        m = _numbers(edge["costs"], f"edges[{i}].costs", 2)
        entries = check_size("problem_entries", entries + m.size, field="edge cost entries")
        edges.append((src, dst, m))
    return CostGraph(costs, tuple(edges))


def _name(value: Any, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidInputError(where, value, "a string or an integer")
    name = str(value) if isinstance(value, str) or abs(value) < 10**18 else ""
    if not name or len(name) > LIMITS["name_length"].hi:
        raise InvalidInputError(where, value, "a name of 1 to 256 characters")
    return name


def _numbers(value: Any, where: str, ndim: int) -> np.ndarray:
    """A non-empty ``ndim``-D list of finite numbers within +-1e300, as floats."""
    shape_hint = "a non-empty list of numbers" if ndim == 1 else "a non-empty list of rows"
    if not isinstance(value, list) or not value:
        raise InvalidInputError(where, value, shape_hint)
    flat = value if ndim == 1 else [x for row in value if isinstance(row, list) for x in row]
    if any(isinstance(x, bool) or not isinstance(x, (int, float)) for x in flat):
        raise InvalidInputError(where, value, f"a {ndim}-D list of numbers")
    try:
        arr = np.array(value, dtype=float)
    except (ValueError, OverflowError, TypeError):
        raise InvalidInputError(
            where, value, f"a rectangular {ndim}-D list of numbers within float range"
        ) from None
    if arr.ndim != ndim or arr.size == 0:
        raise InvalidInputError(where, value, f"a non-empty {ndim}-D list of numbers")
    bound = LIMITS["cost"].hi
    if not (np.abs(arr) <= bound).all():
        raise InvalidInputError(where, value, f"finite numbers within +-{bound:g}")
    return arr


def load_problem(text: str | bytes) -> CostGraph:
    """Parse problem JSON text (bounded size and depth, strict JSON)."""
    return problem_from_json(loads(text, field="problem", limit="problem_file_bytes"))
