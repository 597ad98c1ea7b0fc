"""within_limit: a plan whose transient buffers overflow the limit is searched again under a
tightened limit until it fits; the answer is then 'feasible' with the first search's bound."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from taps_core.cluster.presets import preset
from taps_core.costs.ops import Memory
from taps_core.errors import InfeasibleError
from taps_core.models import build_graph, load_model_config
from taps_core.search.memory_fit import TRANSIENT_RETRIES, within_limit
from taps_core.search.planner import search

GB = 1e9


@pytest.fixture(scope="module")
def base_plan():
    graph = build_graph(load_model_config("mlp-2layer").with_workload(batch_size=8))
    return search(graph, preset("dgx-a100:1"), pipeline=False)


def _searcher(base, memory_at, calls):
    """A stand-in search: the plan it finds under ``limit`` holds ``memory_at(limit)`` bytes
    (its seconds are the base plan's)."""

    def run(limit):
        calls.append(limit)
        used = memory_at(limit)
        if used is None:
            raise InfeasibleError("nothing fits")
        return replace(base, memory=Memory(activations=used),
                       search=replace(base.search, status="optimal", lower_bound_s=None))

    return run


def test_a_plan_that_fits_is_returned_as_found(base_plan):
    calls: list[float] = []
    plan = within_limit(_searcher(base_plan, lambda lim: 0.9 * lim, calls), 100 * GB)
    assert calls == [100 * GB]
    assert plan.search.status == "optimal"


def test_an_overflowing_plan_is_searched_again_until_it_fits(base_plan):
    """The search undercounts by 1 GB (its transient buffer averaged over layers): the limit
    shrinks by the overflow and the fitting plan is reported feasible, above the first
    search's bound."""
    calls: list[float] = []
    plan = within_limit(_searcher(base_plan, lambda lim: lim + GB, calls), 100 * GB)
    assert plan.memory.total <= 100 * GB * (1 + 1e-9)
    assert plan.search.status == "feasible"
    assert "limit tightened" in plan.search.note
    assert plan.search.lower_bound_s == pytest.approx(base_plan.total_time_s)
    assert plan.search.lower_bound_s <= plan.total_time_s
    assert len(calls) == 2 and calls[1] == pytest.approx(99 * GB)


def test_a_search_coarser_than_the_overflow_still_ends_fitting(base_plan):
    """The search's memory has a resolution (the chain's steps): a shrink below it returns the
    same plan, and the shrink grows instead of retrying the same limit; it ends fitting within
    the retry budget."""
    step = 0.5 * GB

    def coarse(lim):  # memory counted in 0.5 GB steps, rounded up, plus a 0.1 GB undercount
        return math.ceil(lim / step) * step + 0.1 * GB

    calls: list[float] = []
    plan = within_limit(_searcher(base_plan, coarse, calls), 100 * GB)
    assert plan.memory.total <= 100 * GB * (1 + 1e-9)
    assert len(calls) <= 1 + TRANSIENT_RETRIES
    assert len(set(calls)) == len(calls)  # never the same limit twice


def test_nothing_fits_is_refused_in_one_line(base_plan):
    calls: list[float] = []
    with pytest.raises(InfeasibleError, match="transient buffers") as err:
        within_limit(_searcher(base_plan, lambda lim: 200 * GB if lim > 50 * GB else None,
                               calls), 100 * GB)
    assert "\n" not in str(err.value)
