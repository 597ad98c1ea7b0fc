"""taps_core.sweep: rescaling the network, per-point plans equal direct searches, regimes."""

from __future__ import annotations

import itertools

import pytest

from taps_core.errors import InvalidInputError
from taps_core.models import build_graph, load_model_config
from taps_core.planner import compare, search
from taps_core.presets import preset
from taps_core.sweep import (
    log_bandwidths,
    node_inter_bandwidth,
    scale_inter_bandwidth,
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


def test_log_bandwidths_endpoints():
    bws = log_bandwidths(1e9, 400e9, 5)
    assert bws[0] == pytest.approx(1e9) and bws[-1] == pytest.approx(400e9)
    assert all(a < b for a, b in itertools.pairwise(bws))


def test_points_match_direct_search_and_compare(gpt2):
    topo = preset("dgx-a100:2")
    bws = [5e9, 400e9]
    sw = sweep_inter_bandwidth(gpt2, topo, bws, mode="train")
    assert sw.labels == ("taps", "volume", "megatron", "data_parallel")
    for point in sw.points:
        scaled = scale_inter_bandwidth(topo, point.node_bandwidth_Bps)
        direct = compare(gpt2, scaled, mode="train")
        for label, plan in direct.items():
            assert point.comm_time_s[label] == pytest.approx(plan.comm_time_s)
        taps = search(gpt2, scaled, mode="train")
        assert point.taps_strategies == tuple(op.strategy.label() for op in taps.ops)
        # TAPS is never slower than a baseline it competes with
        for label in ("volume", "megatron", "data_parallel"):
            assert point.total_time_s["taps"] <= point.total_time_s[label] + 1e-12


def test_regimes_cover_points_and_mark_changes(gpt2):
    bws = log_bandwidths(0.5e9, 800e9, 6)
    sw = sweep_inter_bandwidth(gpt2, preset("ethernet:2"), bws, labels=("taps",))
    assert sw.labels == ("taps",)
    assert sw.regimes[0].first == 0 and sw.regimes[-1].last == len(bws) - 1
    for a, b in itertools.pairwise(sw.regimes):
        assert b.first == a.last + 1
        assert b.changed_ops > 0
        assert sw.points[a.last].taps_strategies != sw.points[b.first].taps_strategies
    assert sw.changes == tuple(r.first for r in sw.regimes[1:])
    # a 1600x range of network speed must move the plan at least once for GPT-2 training
    assert len(sw.regimes) >= 2


def test_not_fitting_is_reported_not_raised():
    graph = build_graph(load_model_config("gpt2"))
    sw = sweep_inter_bandwidth(
        graph, preset("dgx-a100:2"), [50e9], memory_limit_bytes=1e6, labels=("taps",)
    )
    point = sw.points[0]
    assert point.comm_time_s["taps"] is None
    assert "memory" in point.reasons["taps"]
    assert point.taps_summary == "does not fit"


def test_unknown_label(gpt2):
    with pytest.raises(InvalidInputError, match="labels"):
        sweep_inter_bandwidth(gpt2, preset("dgx-a100:2"), [1e9], labels=("alpa",))
