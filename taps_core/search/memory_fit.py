"""Fit a searched plan within the memory limit, its transient buffers counted exactly.

The search charges each layer 1/L of the transient buffers (the layer ZeRO-3 has gathered, the
activations a recomputed layer re-creates in backward); a plan holds the largest of them. The
two agree when the layers choose alike, and the search's count is never the larger, so its
feasible set holds every plan that truly fits: :func:`within_limit` re-searches with a tightened
limit only when the plan found overflows, and then no longer claims optimality.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from taps_core.errors import InfeasibleError
from taps_core.plan.records import Plan
from taps_core.units import GiB

TRANSIENT_RETRIES = 8  # searches with a tightened limit when transient buffers overflow it
PLAIN_RETRIES = 1  # the first retry shrinks by the overflow alone; later ones at least double


def within_limit(run: Callable[[float], Plan], limit_bytes: float) -> Plan:
    """``run(search_limit)`` until its plan fits ``limit`` bytes per device, exactly counted
    (see the module docstring): the first plan stands when it fits (optimal if its search
    proved it); otherwise the limit shrinks and the plan is "feasible", above the first
    search's bound. The first retry shrinks the limit by the overflow (as close to the limit as
    it allows), later ones at least double the shrink (plans that overflow in turn cannot stall
    it: each retry is a whole search, and mixing recomputation variants leaves small overflows
    retry after retry), and so does a retry after one that returned the same plan (a shrink
    below the search's memory resolution); a shrink past every fitting plan is bisected back.
    Raises InfeasibleError when no retry fits."""
    plan = first = run(limit_bytes)
    lo, hi = 0.0, limit_bytes  # shrinks of the limit: lo's plan overflows, hi's search fails
    same = False  # the last retry returned the plan before it (its shrink was too small)
    for attempt in range(TRANSIENT_RETRIES):
        over = plan.memory.total - limit_bytes
        if over <= limit_bytes * 1e-9:
            break
        plain = attempt < PLAIN_RETRIES and not same
        shrink = lo + over if plain else max(lo + over, 2 * lo)
        if shrink >= hi:
            shrink = (lo + hi) / 2
        try:
            again = run(limit_bytes - shrink)
        except InfeasibleError:
            hi = shrink
            continue
        same = (again.memory.total, again.total_time_s) == (plan.memory.total, plan.total_time_s)
        plan, lo = again, shrink
    over = plan.memory.total - limit_bytes
    if over > limit_bytes * 1e-9:
        raise InfeasibleError(
            f"memory: the best plan needs {plan.memory.total / GiB:.3g} GiB per device with "
            f"its transient buffers, over the {limit_bytes / GiB:.3g} GiB limit; use more GPUs "
            "or a smaller batch"
        )
    if plan is first:
        return plan
    bound = first.search.lower_bound_s
    lower = min(first.total_time_s if bound is None else bound, plan.total_time_s)
    note = (plan.search.note + "; " if plan.search.note else "") + (
        "limit tightened for the largest transient buffer"
    )
    return replace(
        plan,
        memory_limit_bytes=limit_bytes,
        search=replace(plan.search, status="feasible", lower_bound_s=lower, note=note),
    )
