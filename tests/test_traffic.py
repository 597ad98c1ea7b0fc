"""taps_core.plan.traffic: per-op-kind link loads and GPU flows add up to the plan's own totals."""

from __future__ import annotations

import numpy as np
import pytest

from taps_core.cluster.presets import preset
from taps_core.errors import InvalidInputError
from taps_core.models import build_graph, load_model_config
from taps_core.plan.traffic import gpu_traffic_matrix, link_traffic_by_op_kind
from taps_core.search.planner import search


@pytest.fixture(
    scope="module",
    params=[
        ("mlp-2layer", "dgx-a100:2", "train"),
        ("gpt2", "pcie:2", "infer"),
        ("gpt2", "ethernet:2", "train"),
        ("gpt2", "dgx-a100:4", "train"),  # pipelined, the tied embedding across its ends
    ],
)
def planned(request):
    model, topo_spec, mode = request.param
    topo = preset(topo_spec)
    return search(build_graph(load_model_config(model)), topo, mode=mode), topo


def test_link_breakdown_matches_plan_links(planned):
    plan, topo = planned
    br = link_traffic_by_op_kind(plan, topo)
    expected = {(k.src, k.dst): (k.bytes, k.busy_time_s) for k in plan.links}
    got = {(u, v): (b, t) for (u, v, _, _), b, t in zip(br.links, br.total_bytes, br.total_busy_s)}
    assert got.keys() == expected.keys()
    for key, (b, t) in expected.items():
        assert got[key][0] == pytest.approx(b, rel=1e-9)
        assert got[key][1] == pytest.approx(t, rel=1e-9)
    assert set(br.op_kinds) <= {op.kind for op in plan.ops} | {
        "pipeline send", "tied embedding sync"}
    assert br.bytes.shape == (len(br.op_kinds), len(br.links))
    assert (br.bytes >= 0).all()


def test_gpu_matrix_sums_to_comm_bytes(planned):
    plan, topo = planned
    gpus, m = gpu_traffic_matrix(plan, topo)
    assert gpus == topo.gpus
    assert m.shape == (topo.num_gpus, topo.num_gpus)
    assert np.diag(m).sum() == 0
    assert m.sum() == pytest.approx(plan.comm_bytes, rel=1e-9)


def test_gpu_matrix_inter_part_matches_inter_bytes(planned):
    plan, topo = planned
    _, m = gpu_traffic_matrix(plan, topo)
    g = topo.gpus_per_node
    host = np.arange(topo.num_gpus) // g
    cross = m[host[:, None] != host[None, :]].sum()
    # flows between hosts are exactly the inter-level phases
    assert cross == pytest.approx(plan.inter_node_bytes, rel=1e-9, abs=1e-6)


def test_rejects_other_cluster():
    topo = preset("dgx-a100:2")
    plan = search(build_graph(load_model_config("mlp-2layer")), topo)
    with pytest.raises(InvalidInputError, match="topology"):
        link_traffic_by_op_kind(plan, preset("dgx-a100:4"))
