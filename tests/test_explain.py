"""taps_core.explain: the primer's section-2 example, checked against the ring formulas."""

from __future__ import annotations

import pytest

from taps_core.errors import InvalidInputError
from taps_core.explain import volume_vs_time
from taps_core.presets import preset


def test_primer_numbers_on_dgx_a100():
    a, b = volume_vs_time(preset("dgx-a100:2"), 1e9)
    # bytes each GPU sends: 2(p-1)/p * S
    assert a.bytes_per_gpu == pytest.approx(2 * 7 / 8 * 1e9)
    assert b.bytes_per_gpu == pytest.approx(1e9)
    # bandwidth term over the effective link speed (80% of 300 GB/s and of 25 GB/s)
    assert a.bandwidth_s == pytest.approx(1.75e9 / (0.8 * 300e9))
    assert b.bandwidth_s == pytest.approx(1e9 / (0.8 * 25e9))
    assert a.time_s == pytest.approx(a.latency_s + a.bandwidth_s)
    # volume prefers B, time prefers A
    assert b.volume_s < a.volume_s
    assert a.time_s < b.time_s / 5
    assert a.bottleneck[2] == "nvlink" and b.bottleneck[2] == "network"


def test_shared_nic_contention_on_ethernet():
    _, b = volume_vs_time(preset("ethernet:2"), 1e9)
    # 8 GPUs share one 12.5 GB/s NIC: each gets 1/8 of its effective speed
    assert b.per_gpu_Bps == pytest.approx(0.8 * 12.5e9 / 8)


def test_odd_hosts_use_all_hosts():
    _, b = volume_vs_time(preset("pcie:3"))
    assert b.group_size == 3


@pytest.mark.parametrize(("spec", "field"), [("dgx-a100:1", "nodes"), ("dgx-a100:2", "size")])
def test_invalid(spec, field):
    size = -1.0 if field == "size" else 1e9
    with pytest.raises(InvalidInputError, match=field):
        volume_vs_time(preset(spec), size)
