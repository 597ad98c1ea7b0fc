"""Topologies: presets, JSON round trip, edits, validation, and the link-level cost model."""

from __future__ import annotations

import json

import pytest

from taps_core.cluster.io import dumps, loads
from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import PRESETS, preset
from taps_core.cluster.topology import build_cluster
from taps_core.costs.collectives import TopologyCost, VolumeCost, all_gather, all_reduce, all_to_all
from taps_core.errors import InvalidInputError

GB = 1e9


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("nodes", [1, 2])
def test_presets_round_trip_through_json(name, nodes):
    topo = preset(f"{name}:{nodes}")
    assert topo.nodes == nodes
    assert loads(dumps(topo)) == topo


def test_preset_shapes():
    assert (preset("dgx-a100:4").nodes, preset("dgx-a100:4").gpus_per_node) == (4, 8)
    assert preset("pcie:2").gpus_per_node == 4
    nv = preset("pcie-nvlink:1")
    assert nv.link("n0.gpu0", "n0.gpu1").kind == "nvlink"
    eth = preset("ethernet:2")
    assert sum(d.kind == "nic" for d in eth.devices) == 2


def test_ring_all_reduce_inside_a_dgx_node_is_hand_worked():
    # 1 GB over 8 GPUs: each sends 2*7/8 GB over its 300 GB/s NVLink at 80% efficiency
    links = LinkModel(preset("dgx-a100:2"))
    (phase,) = all_reduce(1, 8, 1 * GB)
    t = TopologyCost(links).seconds(phase)
    assert t == pytest.approx(2 * 7 / 8 * GB / (300 * GB * 0.8) + 14 * 2e-6, rel=1e-9)


def test_cross_node_all_reduce_uses_each_gpus_rail():
    # 2 GPUs on two nodes: 2*(1/2) GB over a 25 GB/s NIC at 80%: ~7x slower than in-node 8-way
    links = LinkModel(preset("dgx-a100:2"))
    (phase,) = all_reduce(2, 1, 1 * GB)
    t = TopologyCost(links).seconds(phase)
    assert t == pytest.approx(1 * GB / (25 * GB * 0.8) + 2 * (2 * 2.5e-6 + 2 * 1e-6), rel=1e-9)
    in_node = TopologyCost(links).seconds(all_reduce(1, 8, 1 * GB)[0])
    assert t / in_node > 5  # the primer's example: fewer bytes, far more time


def test_shared_nic_is_contended_by_eight_gpus():
    dgx = TopologyCost(LinkModel(preset("dgx-a100:2"))).seconds(all_reduce(2, 1, GB)[0])
    eth = TopologyCost(LinkModel(preset("ethernet:2"))).seconds(all_reduce(2, 1, GB)[0])
    # 8 rails of 25 GB/s vs one 12.5 GB/s NIC shared by 8 GPUs: 16x less bandwidth per GPU
    assert eth / dgx == pytest.approx(16, rel=0.01)


def test_volume_cost_ignores_the_topology():
    vol = VolumeCost(seconds_per_byte=1e-11)
    assert vol.seconds(all_reduce(2, 1, GB)[0]) == pytest.approx(1e-11 * GB)
    assert vol.seconds(all_reduce(1, 2, GB)[0]) == vol.seconds(all_reduce(2, 1, GB)[0])


def test_hierarchical_all_reduce_phases():
    phases = all_reduce(2, 8, GB)
    assert [p.collective for p in phases] == ["reduce_scatter", "all_reduce", "all_gather"]
    assert phases[1].per_rank_bytes == pytest.approx(2 * 0.5 * GB / 8)


def test_all_gather_and_all_to_all_bytes():
    (ag,) = all_gather("intra", 4, GB)
    assert ag.per_rank_bytes == pytest.approx(0.75 * GB)
    (a2a,) = all_to_all("intra", 4, GB)
    assert a2a.per_rank_bytes == pytest.approx(0.75 * GB)


def test_nvlink_pair_is_faster_than_pcie():
    links = LinkModel(preset("pcie-nvlink:1"))
    pair = links.pattern("intra", 2, "ring")
    quad = links.pattern("intra", 4, "ring")
    assert pair.beta_s_per_B < quad.beta_s_per_B


def test_degraded_nic_slows_cross_node_collectives():
    topo = preset("dgx-a100:2")
    slow = topo.with_link("n0.nic3", "net", bandwidth_Bps=1 * GB)
    base = LinkModel(topo).pattern("inter", 2, "ring").beta_s_per_B
    worse = LinkModel(slow).pattern("inter", 2, "ring").beta_s_per_B
    assert worse == pytest.approx(base * 25, rel=1e-9)  # the slowest rail sets the pace
    assert loads(dumps(slow)) == slow


def test_cutting_an_nvlink_bridge_routes_over_pcie():
    topo = preset("pcie-nvlink:1")
    cut = topo.without_link("n0.gpu0", "n0.gpu1")
    assert (
        LinkModel(cut).pattern("intra", 2, "ring").beta_s_per_B
        > LinkModel(topo).pattern("intra", 2, "ring").beta_s_per_B
    )


def test_link_loads_sum_per_rank_traffic():
    links = LinkModel(preset("dgx-a100:2"))
    p = links.pattern("intra", 8, "ring")
    nvlink = [i for i, (_, _, k) in enumerate(links.links) if k.kind == "nvlink"]
    # 16 GPUs each send one unit up to the switch and receive one down
    assert p.loads[nvlink].sum() == pytest.approx(32)


@pytest.mark.parametrize(
    "spec, field",
    [
        ("dgx-z100:2", "topology"),
        ("dgx-a100:0", "topology nodes"),
        ("dgx-a100:x", "topology"),
    ],
)
def test_bad_presets(spec, field):
    with pytest.raises(InvalidInputError, match=field):
        preset(spec)


def test_bad_topology_json_names_the_field():
    data = json.loads(dumps(preset("dgx-a100:2")))
    data["links"][0]["bandwidth_Bps"] = -5
    with pytest.raises(InvalidInputError, match=r"links\[.*\]\.bandwidth_Bps"):
        loads(json.dumps(data))
    data = json.loads(dumps(preset("dgx-a100:2")))
    data["links"] = [k for k in data["links"] if k["dst"] != "net"]
    with pytest.raises(InvalidInputError, match="connected"):
        loads(json.dumps(data))
    with pytest.raises(InvalidInputError, match="valid JSON"):
        loads("{not json")
    with pytest.raises(InvalidInputError, match="nics_per_node"):
        build_cluster(2, 4, nics_per_node=8)


def test_pcie_node_traffic_stays_off_the_nic():
    links = LinkModel(preset("pcie:2"))
    p = links.pattern("intra", 4, "ring")
    for i, (u, v, _) in enumerate(links.links):
        if "nic" in u or "nic" in v:
            assert p.loads[i] == 0, (u, v)


def test_edits_are_described_by_value():
    from taps_core.cluster.edits import describe_edits, parse_edits

    edits = parse_edits("n0.nic0~net:bw=0.001;n0~n1:cut;+host;+host;a~b:add:kind=nvlink:bw=10")
    assert describe_edits(edits, most=5) == (
        "n0.nic0~net 0.001 GB/s, n0~n1 cut, + nvlink link a~b 10 GB/s, +2 host(s)"
    )
    assert describe_edits(edits, most=2).endswith("and 2 more edit(s)")
