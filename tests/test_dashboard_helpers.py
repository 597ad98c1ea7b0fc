"""The dashboard's pure helpers: URL/topology specs, layer folding, figures and the HTML report
(no Streamlit session needed)."""

from __future__ import annotations

import re

import networkx as nx
import pytest

from dashboard.charts import chart_config, log_ticks, memory_figure, sweep_figure, time_figure
from dashboard.graph_view import dag_figure, dag_layout, label_chars, layer_groups, op_rows
from dashboard.report_html import html_report
from dashboard.review_pack import review_pack
from dashboard.state import (
    BuildSpec,
    LinkEdit,
    apply_edits,
    edits_text,
    parse_edits,
    with_edit,
)
from dashboard.topology_view import device_positions, topology_figure
from taps_core.errors import InvalidInputError
from taps_core.models import build_graph, load_model_config
from taps_core.planner import compare, search
from taps_core.presets import preset
from taps_core.sweep import sweep_inter_bandwidth
from taps_core.topology_io import dumps, loads


@pytest.fixture(scope="module")
def gpt2():
    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=8, seq_length=256))
    topo = preset("dgx-a100:2")
    return graph, topo, search(graph, topo)


def test_build_spec_round_trips_and_builds():
    spec = BuildSpec(
        nodes=3,
        gpus=4,
        intra="pcie",
        intra_GBps=32,
        nvlink_pairs_GBps=300,
        nics=1,
        nic_GBps=12.5,
        gpu="a100-40-pcie",
    )
    again = BuildSpec.parse(spec.text())
    assert again == spec
    topo = again.build()
    assert (topo.nodes, topo.gpus_per_node) == (3, 4)
    assert {k.kind for k in topo.links} == {"pcie", "nvlink", "network"}


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("build:nodes=x", "nodes"),
        ("build:speed=3", "field"),
        ("build:gpu=tpu", "gpu"),
        ("build:nodes=999", "nodes"),
    ],
)
def test_build_spec_errors_name_the_field(text, field):
    with pytest.raises(InvalidInputError, match=field):
        BuildSpec.parse(text)


def test_edits_round_trip_and_apply():
    edits = parse_edits("n0.nic0~net:bw=5:lat=3;n1.gpu2~n1.nvswitch:cut")
    assert edits == (
        LinkEdit("n0.nic0", "net", 5.0, 3.0),
        LinkEdit("n1.gpu2", "n1.nvswitch", cut=True),
    )
    assert parse_edits(edits_text(edits)) == edits
    topo, errors = apply_edits(preset("dgx-a100:2"), edits)
    assert not errors
    assert topo.link("n0.nic0", "net").bandwidth_Bps == 5e9
    assert topo.link("n0.nic0", "net").latency_s == pytest.approx(3e-6)
    with pytest.raises(InvalidInputError):
        topo.link("n1.gpu2", "n1.nvswitch")


def test_bad_edits_are_skipped_with_a_reason():
    topo, errors = apply_edits(preset("ethernet:2"), parse_edits("n0.nic0~net:cut;a~b:bw=1"))
    assert len(errors) == 2
    assert "connected" in errors[0] and "link" in errors[1]
    assert topo == preset("ethernet:2")
    for bad in ("no-tilde:bw=1", "a~b:bw=0", "a~b:bw=nan", "a~b:bw=1e9", "a~b:weird"):
        with pytest.raises(InvalidInputError, match="edits"):
            parse_edits(bad)
    with pytest.raises(InvalidInputError, match="at most"):
        parse_edits(";".join(["a~b:cut"] * 1000))


def test_identical_layers_fold(gpt2):
    graph, _, plan = gpt2
    groups = layer_groups(plan, graph)
    assert groups.count == {0: 12}
    assert len(groups.members["L0.attn.q"]) == 12
    assert groups.relative["L5.mlp.up"] == "mlp.up"
    folded = dag_layout(plan, graph)
    full = dag_layout(plan, graph, expand=True)
    assert len(full.nodes) == len(plan.ops) and len(folded.nodes) < 20
    for lay in (folded, full):  # both views are DAGs laid out left to right
        dag = nx.DiGraph(lay.edges)
        assert nx.is_directed_acyclic_graph(dag)
        assert all(lay.pos[u][0] < lay.pos[v][0] for u, v in lay.edges)
    assert folded.blocks[0][:2] == (0, 12)
    rows = op_rows(plan, graph)
    assert sum(r["× layers"] for r in rows) == len(plan.ops)


def test_dag_figure_highlight_and_legend(gpt2):
    graph, topo, plan = gpt2
    other = compare(graph, topo)["volume"]
    differ = {a.name for a, b in zip(plan.ops, other.ops) if a.strategy != b.strategy}
    fig = dag_figure(plan, graph, highlight=differ, baseline="volume")
    names = [t.name for t in fig.data if t.name]
    assert "differs from volume" in names and "identical layers (×N)" in names
    ring = next(t for t in fig.data if t.name == "differs from volume")
    assert 0 < len(ring.x) <= len(dag_layout(plan, graph).nodes)


def test_figures_are_titled_and_legible(gpt2):
    graph, topo, plan = gpt2
    sw = sweep_inter_bandwidth(graph, topo, [10e9, 100e9], labels=("taps",))
    figs = [
        memory_figure(plan),
        time_figure(compare(graph, topo)),
        sweep_figure(sw, 200e9),
        topology_figure(topo, plan),
        topology_figure(topo),
    ]
    for fig in figs:
        assert fig.layout.title.text
        assert fig.layout.font.size >= 12
    traffic = figs[3]
    assert any(
        getattr(t.marker, "colorbar", None) and t.marker.colorbar.title.text for t in traffic.data
    )
    assert chart_config("svg", "gpt2_dgx-a100-2_train_graph")["toImageButtonOptions"] == {
        "format": "svg",
        "filename": "gpt2_dgx-a100-2_train_graph",
    }
    assert chart_config("png", "a/b c")["toImageButtonOptions"]["filename"] == "a-b-c"


def test_device_positions_of_an_uploaded_layout():
    data = loads(dumps(preset("pcie-nvlink:2")))
    pos = device_positions(data)
    assert set(pos) == {d.name for d in data.devices}
    hosts = {d.name: d.host for d in data.devices}
    xs0 = [pos[n][0] for n, h in hosts.items() if h == 0]
    xs1 = [pos[n][0] for n, h in hosts.items() if h == 1]
    assert max(xs0) < min(xs1)  # hosts side by side, not overlapping


def test_html_report_is_self_contained(gpt2):
    graph, topo, plan = gpt2
    page = html_report(
        plan, [memory_figure(plan), topology_figure(topo, plan)], rows=op_rows(plan, graph)
    )
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script[^>]+src=", page)  # nothing loaded from a CDN
    assert "Plotly.newPlot" in page and len(page) > 1_000_000  # plotly.js is embedded once
    assert page.count("plotly.js v") <= 2
    assert "Per-op strategies" in page and "L0.attn.q" in page


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("build:nodes=64,gpus=1000000", "gpus"),
        ("build:nodes=1000", "nodes"),
        ("build:nic_GBps=nan", "nic_GBps"),
        ("build:intra=optical", "intra"),
        ("build:" + "x" * 500, "topology spec"),
    ],
)
def test_build_spec_refuses_what_the_form_cannot_express(text, field):
    with pytest.raises(InvalidInputError, match=field):
        BuildSpec.parse(text)


@pytest.mark.parametrize("name", ["dgx-a100:4", "pcie-nvlink:3", "ethernet:2", "dgx-h100:2"])
def test_builder_starts_from_the_cluster_shown(name):
    topo = preset(name)
    spec = BuildSpec.from_topology(topo)
    built = spec.build()
    assert (built.nodes, built.gpus_per_node) == (topo.nodes, topo.gpus_per_node)
    assert built.gpu == topo.gpu
    assert sorted(k.bandwidth_Bps for k in built.links) == pytest.approx(
        sorted(k.bandwidth_Bps for k in topo.links)
    )


def test_hosts_and_links_can_be_added_and_edits_replaced():
    topo, errors = apply_edits(
        preset("dgx-a100:2"), parse_edits("+host;n0.gpu0~n1.gpu0:add:kind=network:bw=10")
    )
    assert not errors and topo.nodes == 3 and topo.link("n0.gpu0", "n1.gpu0").bandwidth_Bps == 1e10
    assert {d.name for d in topo.devices} >= {"n2.gpu7", "n2.nic7"}
    edits = parse_edits("+host;a~b:bw=1")
    edits = with_edit(edits, LinkEdit("a", "b", 2.0), ("b", "a"))
    assert edits_text(edits) == "+host;a~b:bw=2"
    assert edits_text(with_edit(edits, None, ("a", "b"))) == "+host"


def test_log_ticks_and_label_room(gpt2):
    assert log_ticks(1, 400) == [1, 2, 5, 10, 20, 50, 100, 200, 500]
    graph, _, plan = gpt2
    lay = dag_layout(plan, graph, expand=True)
    chars = label_chars(lay)
    fig = dag_figure(plan, graph, expand=True, layout=lay)
    texts = [t for tr in fig.data if tr.text for t in tr.text]
    assert texts and all(len(t) <= max(chars, 1) for t in texts)
    layers = [a.text for a in fig.layout.annotations if "layer" in a.text]
    assert len(layers) == 12  # every layer marked in the expanded view


def test_review_pack_holds_charts_report_json_and_url(gpt2):
    import io
    import zipfile

    _, _, plan = gpt2
    data = review_pack(
        {"gpt2_dgx-a100-2_train_memory": memory_figure(plan)},
        files={"gpt2_dgx-a100-2_train_plan.json": "{}"},
        url="http://localhost:8501/?model=gpt2",
        summary="gpt2",
    )
    z = zipfile.ZipFile(io.BytesIO(data))
    names = set(z.namelist())
    assert {"gpt2_dgx-a100-2_train_plan.json", "URL.txt", "README.txt"} <= names
    if "gpt2_dgx-a100-2_train_memory.svg" in names:  # kaleido + chromium present
        assert z.read("gpt2_dgx-a100-2_train_memory.png").startswith(b"\x89PNG")
        assert b"<svg" in z.read("gpt2_dgx-a100-2_train_memory.svg")[:400]
    else:
        assert b"could not be rendered" in z.read("README.txt")
