"""Google's IOPDDL problem format (the ASPLOS / EuroSys 2025 contest on sharding XLA programs).

``{"problem": {"name", "nodes": {"intervals": [[lo, hi], ...], "costs": [[c, ...], ...],
"usages": [[u, ...], ...]}, "edges": {"nodes": [[u, v], ...], "costs": [[...], ...]},
"usage_limit": L}}``. Node ``i`` is live at time steps ``lo..hi-1`` and its strategy ``s``
costs ``costs[i][s]`` and uses ``usages[i][s]`` memory there. Edge ``[u, v]`` costs
``costs[e][i * k_v + j]`` for strategies ``i`` of u and ``j`` of v (row-major ``k_u x k_v``);
parallel edges add up. At every time step the live nodes' usage must stay within
``usage_limit`` (when given). Values are non-negative integers; ``10**18`` or more marks a
forbidden choice. A solution is one strategy index per node, e.g. ``[0, 0, 2, 1, 0]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from taps_core.errors import InvalidInputError
from taps_core.limits import LIMITS, check, check_size
from taps_core.solver.memory import LiveMemory
from taps_core.solver.problem import CostGraph

FORBIDDEN = 10**18  # this cost (or more) forbids a strategy or a pair


@dataclass(frozen=True)
class IopddlProblem:
    """A parsed problem: exact integer data, and the float :class:`CostGraph` the solver uses
    (node ``i`` is named ``str(i)``; forbidden choices are ``inf``)."""

    name: str
    costs: list[np.ndarray]  # int64 (or float64 when the file has non-integers) per node
    usages: list[np.ndarray]
    intervals: np.ndarray  # [n, 2] int64
    edges: list[tuple[int, int, np.ndarray]]  # flat row-major cost lists
    usage_limit: int | float | None

    @property
    def graph(self) -> CostGraph:
        """The solver's view: float costs, ``inf`` where forbidden, self-loops folded in."""
        node = {str(i): _as_cost(c) for i, c in enumerate(self.costs)}
        edges = []
        for u, v, flat in self.edges:
            m = _as_cost(flat).reshape(len(self.costs[u]), len(self.costs[v]))
            if u == v:  # a self-loop only ever pays its diagonal
                node[str(u)] = node[str(u)] + np.diag(m)
            else:
                edges.append((str(u), str(v), m))
        return CostGraph(node, tuple(edges))

    @property
    def memory(self) -> LiveMemory | None:
        if self.usage_limit is None:
            return None
        return LiveMemory(
            {str(i): u.astype(float) for i, u in enumerate(self.usages)},
            {str(i): (int(a), int(b)) for i, (a, b) in enumerate(self.intervals)},
            float(self.usage_limit),
        )


def _as_cost(values: np.ndarray) -> np.ndarray:
    out = values.astype(float)
    out[values >= FORBIDDEN] = np.inf
    return out


def is_iopddl(data: Any) -> bool:
    """True for the contest's layout (a ``problem`` object whose ``nodes`` is an object)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("problem"), dict)
        and isinstance(data["problem"].get("nodes"), dict)
    )


def _list(obj: Any, key: str, where: str) -> list[Any]:
    if not isinstance(obj, dict) or key not in obj:
        raise InvalidInputError(f"{where}.{key}", None, "present (a list)")
    value = obj[key]
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}.{key}", value, "a list")
    return value


def _numbers(value: Any, where: str, size: int | None = None) -> np.ndarray:
    """A non-empty list of non-negative integers (or finite numbers) as an array."""
    if not isinstance(value, list) or not value:
        raise InvalidInputError(where, value, "a non-empty list of numbers")
    if size is not None and len(value) != size:
        raise InvalidInputError(where, f"{len(value)} values", f"{size} values")
    try:
        arr = np.array(value)
    except (ValueError, OverflowError, TypeError):
        raise InvalidInputError(where, value, "a flat list of numbers") from None
    if arr.ndim != 1 or arr.dtype.kind not in "iuf" or any(type(x) is bool for x in value):
        raise InvalidInputError(where, value, "a flat list of numbers")
    if arr.dtype.kind == "u":  # 2**63 .. 2**64-1: beyond the contest's 64-bit integers
        raise InvalidInputError(where, int(arr.max()), "values below 2**63")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise InvalidInputError(where, value, "finite numbers")
    if (arr < 0).any():
        raise InvalidInputError(where, float(arr.min()), "non-negative numbers")
    return arr


def parse(data: Any) -> IopddlProblem:
    """Check and convert the JSON object; errors name the field (``problem.edges.costs[7]``)."""
    if not is_iopddl(data):
        raise InvalidInputError("problem", type(data).__name__, 'an object with "problem"')
    prob = data["problem"]
    nodes = prob["nodes"]
    intervals = _list(nodes, "intervals", "problem.nodes")
    costs = _list(nodes, "costs", "problem.nodes")
    usages = _list(nodes, "usages", "problem.nodes")
    n = check_size("problem_nodes", len(costs), field="problem.nodes.costs length")
    for key, lst in (("intervals", intervals), ("usages", usages)):
        if len(lst) != n:
            raise InvalidInputError(f"problem.nodes.{key} length", len(lst), f"{n} (one per node)")
    edges = prob.get("edges", {"nodes": [], "costs": []})
    pairs = _list(edges, "nodes", "problem.edges")
    flats = _list(edges, "costs", "problem.edges")
    check_size("problem_edges", len(pairs), field="problem.edges.nodes length")
    if len(flats) != len(pairs):
        raise InvalidInputError("problem.edges.costs length", len(flats), f"{len(pairs)}")
    top = int(LIMITS["strategies_per_node"].hi)
    node_costs, node_use = [], []
    for i in range(n):
        c = _numbers(costs[i], f"problem.nodes.costs[{i}]")
        if len(c) > top:
            raise InvalidInputError(f"problem.nodes.costs[{i}]", len(c), f"<= {top} strategies")
        node_costs.append(c)
        node_use.append(_numbers(usages[i], f"problem.nodes.usages[{i}]", len(c)))
    spans = np.zeros((n, 2), dtype=np.int64)
    for i, iv in enumerate(intervals):
        where = f"problem.nodes.intervals[{i}]"
        if not isinstance(iv, list) or len(iv) != 2:
            raise InvalidInputError(where, iv, "[lo, hi] (two integers)")
        a = check("iopddl_time", iv[0], field=f"{where}[0]")
        b = check("iopddl_time", iv[1], field=f"{where}[1]")
        if b < a:
            raise InvalidInputError(where, iv, "[lo, hi] with lo <= hi (live at lo..hi-1)")
        spans[i] = (a, b)
    entries = sum(len(f) if isinstance(f, list) else 0 for f in flats)
    check_size("problem_entries", entries, field="problem.edges.costs entries")
    edge_list = []
    for e, pair in enumerate(pairs):
        where = f"problem.edges.nodes[{e}]"
        if not isinstance(pair, list) or len(pair) != 2:
            raise InvalidInputError(where, pair, "[u, v] (two node indices)")
        if not all(_is_int(x) and 0 <= x < n for x in pair):
            raise InvalidInputError(where, pair, f"indices of declared nodes (0..{n - 1})")
        u, v = pair
        size = len(node_costs[u]) * len(node_costs[v])
        edge_list.append((u, v, _numbers(flats[e], f"problem.edges.costs[{e}]", size)))
    limit = prob.get("usage_limit")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            raise InvalidInputError("problem.usage_limit", limit, "a number (or absent)")
        if not (math.isfinite(limit) and 0 <= limit < 2**63):
            raise InvalidInputError("problem.usage_limit", limit, "a number in [0, 2**63)")
    name = prob.get("name", "")
    return IopddlProblem(str(name)[:200], node_costs, node_use, spans, edge_list, limit)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def evaluate(p: IopddlProblem, solution: list[int]) -> tuple[int | float, int | float, bool]:
    """(exact cost, peak usage, within the limit) of a solution; cost is inf if forbidden."""
    total: int | float = 0
    for c, s in zip(p.costs, solution):
        total += c[s].item()
    for u, v, flat in p.edges:
        total += flat[solution[u] * len(p.costs[v]) + solution[v]].item()
    forbidden = any(c[s] >= FORBIDDEN for c, s in zip(p.costs, solution)) or any(
        flat[solution[u] * len(p.costs[v]) + solution[v]] >= FORBIDDEN for u, v, flat in p.edges
    )
    # usage profile in exact (Python) integers: +usage at lo, -usage at hi
    events: dict[int, int | float] = {}
    for (a, b), use, s in zip(p.intervals, p.usages, solution):
        if b > a:
            events[int(a)] = events.get(int(a), 0) + use[s].item()
            events[int(b)] = events.get(int(b), 0) - use[s].item()
    peak: int | float = 0
    level: int | float = 0
    for t in sorted(events):
        level += events[t]
        peak = max(peak, level)
    fits = p.usage_limit is None or peak <= p.usage_limit
    return (math.inf if forbidden else total), peak, fits
