"""Large and odd clusters: routing memory grows with links, and the answers do not change."""

from __future__ import annotations

import numpy as np
import pytest

from taps_core.cluster import links as linkmodel
from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import preset
from taps_core.cluster.topology import build_cluster
from taps_core.errors import InvalidInputError


def _all_patterns(links: LinkModel) -> dict:
    hosts, g = links.mesh_shape
    out = {}
    for level, size in (("intra", g), ("inter", hosts)):
        for q in (d for d in range(2, size + 1) if size % d == 0):
            for kind in linkmodel.PATTERNS:
                p = links.pattern(level, q, kind)
                out[(level, q, kind)] = (p.beta_s_per_B, p.alpha_s, p.loads.copy())
    return out


@pytest.mark.parametrize("spec", ["pcie-nvlink:2", "dgx-a100:4", "ethernet:3"])
def test_batched_routing_equals_cached_routing(spec, monkeypatch):
    topo = preset(spec)
    cached = _all_patterns(LinkModel(topo))
    monkeypatch.setattr(linkmodel, "PRED_ELEMENTS", 50)  # a few source GPUs per batch
    small = LinkModel(topo)
    batched = _all_patterns(small)
    assert small._pred is None  # the all-GPU trees were never held
    assert cached.keys() == batched.keys()
    for key, (beta, alpha, loads) in cached.items():
        assert batched[key][0] == beta and batched[key][1] == alpha
        assert np.array_equal(batched[key][2], loads)


def test_link_lookup_is_linear_in_links():
    topo = build_cluster(512, 4, intra="pcie", nics_per_node=1)
    links = LinkModel(topo)
    devices = len(topo.devices)
    for value in vars(links).values():  # nothing quadratic in the devices is kept
        if isinstance(value, np.ndarray) and value is not links._pred:
            assert value.size < devices * devices / 100
    assert len(links._keys) == 2 * len(topo.links)
    assert links.pattern("inter", 512, "ring").beta_s_per_B > 0


@pytest.mark.parametrize(
    "nodes, gpus, field",
    [(4096, 1, "nodes"), (2, 1000, "gpus_per_node"), (2048, 16, "nodes x gpus_per_node")],
)
def test_build_cluster_refuses_oversized_clusters_before_building(nodes, gpus, field):
    with pytest.raises(InvalidInputError, match=field):
        build_cluster(nodes, gpus)
