"""taps_core.studies.sweep: the network knob, warm-started baselines equal direct searches, changes
located by bisection, and every point's parts adding up."""

from __future__ import annotations

import itertools
import math

import pytest

from taps_core.cluster.presets import preset
from taps_core.cluster.topology import node_inter_bandwidth, scale_inter_bandwidth
from taps_core.errors import InvalidInputError
from taps_core.models import build_graph, load_model_config
from taps_core.search.baselines import compare
from taps_core.search.planner import search
from taps_core.studies.shape import plan_shape, shape_change_words
from taps_core.studies.sweep import (
    BISECT_RATIO,
    SweepRun,
    coarse_to_fine,
    log_bandwidths,
    plan_key,
    reprice,
    sweep_grid,
    sweep_inter_bandwidth,
)


@pytest.fixture(scope="module")
def gpt2():
    return build_graph(load_model_config("gpt2"))


def test_node_bandwidth_of_presets():
    assert node_inter_bandwidth(preset("dgx-a100:2")) == pytest.approx(200e9)
    assert node_inter_bandwidth(preset("ethernet:4")) == pytest.approx(12.5e9)


def test_scale_keeps_relative_speeds_and_other_links():
    topo = preset("dgx-a100:2").with_link("n0.nic3", "net", bandwidth_Bps=5e9)
    scaled = scale_inter_bandwidth(topo, 2 * node_inter_bandwidth(topo))
    for old, new in zip(topo.links, scaled.links):
        factor = 2.0 if old.kind == "network" else 1.0
        assert new.bandwidth_Bps == pytest.approx(old.bandwidth_Bps * factor)
        assert new.latency_s == old.latency_s


def test_single_host_rejected(gpt2):
    with pytest.raises(InvalidInputError, match="nodes >= 2"):
        sweep_inter_bandwidth(gpt2, preset("dgx-a100:1"), [10e9])


@pytest.mark.parametrize(
    ("low", "high", "points"), [(0, 1e9, 3), (2e9, 1e9, 3), (1e9, 2e9, 0), (1e9, 2e9, 41)]
)
def test_log_bandwidths_validates(low, high, points):
    with pytest.raises(InvalidInputError):
        log_bandwidths(low, high, points)


def test_log_bandwidths_endpoints_and_drawing_order():
    bws = log_bandwidths(1e9, 400e9, 5)
    assert bws[0] == pytest.approx(1e9) and bws[-1] == pytest.approx(400e9)
    assert all(a < b for a, b in itertools.pairwise(bws))
    for n in range(1, 14):
        order = coarse_to_fine(n)
        assert sorted(order) == list(range(n)) and order[: min(n, 2)] == [0, n - 1][: min(n, 2)]


def test_every_point_equals_a_direct_search_and_parts_add_up(gpt2):
    topo = preset("dgx-a100:2")
    bws = log_bandwidths(2e9, 400e9, 3)
    sw = sweep_inter_bandwidth(gpt2, topo, bws, mode="train")
    assert sw.complete and sw.labels == ("taps", "volume", "megatron", "data_parallel")
    for i, point in enumerate(sw.points):
        # the same inputs as the Plan and Compare pages: the default search, stages included
        scaled = scale_inter_bandwidth(topo, point.node_bandwidth_Bps)
        if i == 1:  # between the ends: the baselines there are warm-started, and exact
            for label, plan in compare(gpt2, scaled, mode="train").items():
                assert point.total_time_s[label] == pytest.approx(plan.total_time_s, rel=1e-9)
        taps = search(gpt2, scaled, mode="train")
        assert point.plans["taps"].strategies == plan_key(taps)
        assert point.total_time_s["taps"] == pytest.approx(taps.total_time_s, rel=1e-9)
        for q in point.plans.values():
            assert q.total_time_s == pytest.approx(
                q.compute_time_s + q.comm_time_s + q.bubble_time_s
            )
        for label in ("volume", "megatron", "data_parallel"):
            assert point.total_time_s["taps"] <= point.total_time_s[label] + 1e-12
    # the volume plan never depends on bandwidth: searched at the two ends only, re-costed
    # in between, with the same numbers
    warm = sweep_inter_bandwidth(gpt2, topo, bws, mode="train", labels=("volume",), locate=False)
    assert [p.plans["volume"].searched for p in warm.points] == [True, False, True]
    for a, b in zip(warm.points, sw.points):
        assert a.total_time_s["volume"] == pytest.approx(b.total_time_s["volume"], rel=1e-9)


def test_changes_are_located_tightly_and_explained(gpt2):
    bws = log_bandwidths(1e9, 400e9, 5)
    run = SweepRun(gpt2, preset("dgx-a100:2"), labels=("taps",))
    snapshots = list(run.fill(bws))
    assert [s.complete for s in snapshots].count(True) == 1 and snapshots[-1].complete
    assert len(snapshots[0].done) == 1  # drawn after the first point already
    sw = snapshots[-1]
    assert sw.changes, "a 400x range of network speed moves gpt2's training plan"
    for c in sw.changes:
        near = "A near tie" in c.words  # not bisected: the choice hardly matters
        assert c.located and (near or c.high_Bps / c.low_Bps <= BISECT_RATIO + 1e-9)
        below = run.at("taps", c.low_Bps)
        above = run.at("taps", c.high_Bps)
        assert below.strategies != above.strategies
        assert "GB/s per host" in c.words and "Because" in c.words
    regimes = sw.regimes
    assert regimes[0].first == 0 and regimes[-1].last == len(bws) - 1
    assert regimes[0].replicated_across > regimes[-1].replicated_across  # slow: hosts repeat
    # a finished grid is remembered: no new search
    searches = run.searches
    again = list(run.fill(bws))
    assert len(again) == 1 and again[0] is sw and run.searches == searches


def test_reprice_matches_a_fresh_evaluation(gpt2):
    topo = preset("dgx-a100:2")
    plan = search(gpt2, topo, pipeline=False)
    same = reprice(plan, gpt2, topo)
    assert same.total_time_s == pytest.approx(plan.total_time_s, rel=1e-12)
    slow = reprice(plan, gpt2, scale_inter_bandwidth(topo, 2e9))
    assert slow.comm_time_s > plan.comm_time_s and slow.compute_time_s == plan.compute_time_s
    assert reprice(plan, gpt2, preset("dgx-a100:1")) is None


def test_not_fitting_is_reported_not_raised():
    graph = build_graph(load_model_config("gpt2"))
    sw = sweep_inter_bandwidth(
        graph, preset("dgx-a100:2"), [50e9], memory_limit_bytes=1e6, labels=("taps",)
    )
    point = sw.points[0]
    assert point.total_time_s["taps"] is None
    assert "memory" in point.reasons["taps"]
    assert point.plans["taps"].summary == "does not fit"


def test_unknown_label(gpt2):
    with pytest.raises(InvalidInputError, match="labels"):
        sweep_inter_bandwidth(gpt2, preset("dgx-a100:2"), [1e9], labels=("alpa",))


def _outcome(sw):
    points = [
        (p.node_bandwidth_Bps, lb, q.strategies, q.total_time_s, q.searched)
        for p in sw.points
        for lb, q in sorted(p.plans.items())
    ]
    changes = [(c.low_Bps, c.high_Bps, c.words, c.changed_ops, c.located) for c in sw.changes]
    return points, changes


def test_warm_previews_never_change_the_complete_sweep(gpt2):
    """The dashboard warm-starts TAPS when a search is slow on this machine: whatever it
    chooses, the finished sweep (points and located changes, TAPS's and the baselines') is the
    same."""
    labels = ("taps", "volume", "data_parallel")
    topo = preset("dgx-a100:2")
    bws = log_bandwidths(1e9, 400e9, 5)
    exact = SweepRun(gpt2, topo, labels=labels)
    warm = SweepRun(gpt2, topo, labels=labels, warm_taps=True)
    a = list(exact.fill(bws))
    b = list(warm.fill(bws))
    assert _outcome(a[-1]) == _outcome(b[-1])
    assert all(p.plans["taps"].searched for p in b[-1].points)
    previews = [p.plans["taps"] for s in b[:-1] for p in s.points if p is not None]
    assert any(not q.searched for q in previews), "the warm path was taken before searching"


def test_a_bandwidth_computed_two_ways_is_one_point(gpt2):
    """A grid point and the same bandwidth from a bisection (sqrt(a*b)) share one entry: no
    second search, and the plan at it is the searched one (the KeyError of issue 20)."""
    run = SweepRun(gpt2, preset("dgx-a100:2"), labels=("taps",), warm_taps=True)
    a, b = 1e9, 400e9
    grid = log_bandwidths(a, b, 3)  # geomspace: its middle is 20000000000.000004
    mid = math.sqrt(a * b)  # 20000000000.0
    assert grid[1] != mid
    list(run.fill([a, b], locate=False))
    first = run.at("taps", grid[1])  # warm: re-costed from the two ends, or searched
    searches = run.searches
    assert run.at("taps", mid) is first and run.searches == searches
    plan = run.found("taps", mid, searched=True).plan
    assert run.at("taps", grid[1]).searched and plan is run.found("taps", grid[1]).plan


def test_sweep_grid_always_holds_the_clusters_own_bandwidth():
    assert sweep_grid(1e9, 400e9, 3, 200e9) == pytest.approx((1e9, 20e9, 200e9, 400e9))
    assert sweep_grid(1e9, 10e9, 2, 200e9)[-1] == 200e9  # outside the range too
    assert len(sweep_grid(1e9, 400e9, 2, 400e9)) == 2  # no duplicate


def test_own_bandwidth_is_the_plan_pages_plan_and_changes_speak_megatron(gpt2):
    """At the cluster's own bandwidth the sweep is the Plan page's search (same plan, same
    step time); gpt2's slow-network change reads in Megatron's TP/PP/DP words."""
    topo = preset("dgx-a100:2")
    own = node_inter_bandwidth(topo)
    sw = sweep_inter_bandwidth(gpt2, topo, sweep_grid(2e9, 400e9, 3, own), labels=("taps",))
    (point,) = [p for p in sw.points if sw.is_own(p.node_bandwidth_Bps)]
    plan = search(gpt2, topo)
    assert point.plans["taps"].total_time_s == plan.total_time_s
    assert point.plans["taps"].strategies == plan_key(plan)
    assert point.plans["taps"].shape == plan_shape(plan)
    slow, flat, fast = (p.plans["taps"].shape for p in [*sw.points[:2], point])
    assert (flat.dp_across, slow.dp_across, slow.copies) == (2, 1, 2)
    assert all(s.tp * s.pp * s.dp * s.copies == topo.num_gpus for s in (slow, flat, fast))
    words = shape_change_words(slow, flat)
    assert words.startswith("DP 2 -> 1 across nodes") and "the second node would only " \
        "duplicate work, because at this bandwidth syncing gradients" in words
    assert "planner:" in words and shape_change_words(fast, fast) == ""
    if fast.pp > 1:  # at 200 GB/s two stages (each half the layers) beat syncing across nodes
        assert shape_change_words(flat, fast).startswith(f"PP {fast.pp} -> 1: pipeline stages")
    assert sw.changes and all(c.words.startswith(c.structure) for c in sw.changes)


def test_twins_at_either_end_of_an_interval_are_a_tie(gpt2, monkeypatch):
    """A flip is located without bisecting when the two plans cost the same at one end: the
    plan above re-costed at the bottom, or the plan below re-costed at the top."""
    from types import SimpleNamespace

    run = SweepRun(gpt2, preset("dgx-a100:2"), labels=("taps",))
    below = search(gpt2, preset("dgx-a100:2"), pipeline=False)
    above = search(gpt2, preset("dgx-a100:2"), pipeline=False,
                   memory_limit_bytes=0.7 * below.memory.total)
    monkeypatch.setattr(run, "_taps_plan", lambda bw: below if bw == 1.0 else above)
    for twin_end, expected in ((2.0, True), (1.0, True), (None, False)):
        def moved(plan, at, found_at, end=twin_end):
            there = below if at == 1.0 else above
            same = at == end
            return SimpleNamespace(total_time_s=there.total_time_s * (1 if same else 1.5),
                                   comm_time_s=0.0)

        monkeypatch.setattr(run, "_reprice", moved)
        run._ties.clear()  # remembered per bisection pass; the plans changed here
        assert run._tie(1.0, 2.0) is expected, twin_end
        run._record(1.0, 2.0, located=True)  # the words say so, naming the end
        words = run._changes[(1.0, 2.0)].words
        tie = f"A tie: at {twin_end / 1e9:.3g} GB/s" if expected else "A tie"
        assert (tie in words) is expected, words


def test_near_equal_plans_of_one_shape_are_not_bisected(gpt2, monkeypatch):
    """Plans of the same Megatron-LM structure within NEAR_TIE_REL of each other at both ends
    of an interval are a near tie: not bisected, recorded as located with words saying so;
    a larger gap at either end, or another structure, is bisected as before."""
    from types import SimpleNamespace

    from taps_core.studies.sweep import NEAR_TIE_REL

    run = SweepRun(gpt2, preset("dgx-a100:2"), labels=("taps",))
    below = search(gpt2, preset("dgx-a100:2"), pipeline=False)
    above = search(gpt2, preset("dgx-a100:2"), pipeline=False,
                   memory_limit_bytes=0.7 * below.memory.total)
    same_shape = "taps_core.studies.sweep.shape_change_words"
    monkeypatch.setattr(same_shape, lambda a, b: "")  # as if they had one structure
    monkeypatch.setattr(run, "_taps_plan", lambda bw: below if bw == 1.0 else above)
    monkeypatch.setattr(run, "_tie", lambda a, b: False)
    for gap, near in ((0.5 * NEAR_TIE_REL, True), (2 * NEAR_TIE_REL, False)):
        def moved(plan, at, found_at, gap=gap):
            there = below if at == 1.0 else above
            return SimpleNamespace(total_time_s=there.total_time_s * (1 + gap), comm_time_s=0.0)

        monkeypatch.setattr(run, "_reprice", moved)
        assert (run._near_tie(1.0, 4.0) is not None) is near, gap
        assert run._bisects(1.0, 4.0) is not near
        run._record(1.0, 4.0, located=False)
        change = run._changes[(1.0, 4.0)]
        assert change.located is near and ("A near tie" in change.words) is near
    monkeypatch.setattr(run, "_reprice", lambda plan, at, found_at: plan)
    monkeypatch.setattr(same_shape, lambda a, b: "TP 2 -> 4")
    assert run._near_tie(1.0, 4.0) is None  # another structure: located as before


def test_a_regime_runs_on_across_equal_cost_twins(gpt2):
    """Points whose plans differ only by equal-cost twins (every change between them a twin)
    are one regime; a change that moves the step still starts a new one."""
    from dataclasses import replace

    bws = log_bandwidths(1e9, 400e9, 5)
    sw = list(SweepRun(gpt2, preset("dgx-a100:2"), labels=("taps",)).fill(bws))[-1]
    assert len(sw.regimes) > 1 and sw.changes
    twins = replace(sw, changes=tuple(replace(c, twins=True) for c in sw.changes))
    assert len(twins.regimes) == 1 and twins.regimes[0].last == len(bws) - 1
    assert not twins.plan_changes and len(twins.twin_changes) == len(sw.changes)
    first = sw.changes[0]  # one real change, the rest twins: two regimes
    mixed = replace(twins, changes=(replace(first, twins=False), *twins.changes[1:]))
    assert len(mixed.regimes) == 2


def test_pipelined_plans_are_recosted_not_searched_again():
    """A pipelined plan re-costs at another bandwidth (its stages, split and micro-batches
    kept), so ties and previews need no search; where it was found, it costs what it did."""
    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=32))
    topo = preset("dgx-a100:4")
    plan = search(graph, topo, pipeline=True)
    assert plan.pipeline is not None
    assert reprice(plan, graph, topo).total_time_s == pytest.approx(plan.total_time_s, rel=1e-12)
    run = SweepRun(graph, topo, labels=("taps",), pipeline=True)
    bw = node_inter_bandwidth(topo)
    slower = run._reprice(plan, bw / 10, bw)
    assert slower is not None and slower.pipeline is not None
    assert slower.total_time_s > plan.total_time_s and run.searches == 0


def test_workers_give_the_same_sweep(gpt2):
    # grid points and the next bisections searched ahead in two processes: every plan, figure
    # and located change is the one the sequential sweep finds
    topo = preset("ethernet:2")
    bws = log_bandwidths(1e9, 100e9, 4)
    one = sweep_inter_bandwidth(gpt2, topo, bws, mode="train", workers=1)
    two = sweep_inter_bandwidth(gpt2, topo, bws, mode="train", workers=2)
    assert one.changes and one.changes == two.changes
    for a, b in zip(one.points, two.points):
        assert a.node_bandwidth_Bps == b.node_bandwidth_Bps
        for label in one.labels:
            pa, pb = a.plans[label], b.plans[label]
            assert (pa.strategies, pa.searched, pa.summary) == (pb.strategies, pb.searched,
                                                                pb.summary)
            assert pa.total_time_s == pb.total_time_s


def test_workers_validated_and_errors_cross_processes(gpt2):
    import pickle

    from taps_core.studies.sweep_jobs import MAX_WORKERS

    for bad in (0, MAX_WORKERS + 1, 1.5, True):
        with pytest.raises(InvalidInputError, match="workers"):
            SweepRun(gpt2, preset("dgx-a100:2"), workers=bad)
    err = InvalidInputError("--fixed tp", 16, "a divisor of 8")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is InvalidInputError and str(back) == str(err) and back.field == err.field
