"""The dashboard's pure helpers: URL/topology specs, layer folding, figures and the HTML report
(no Streamlit session needed)."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import networkx as nx
import pytest

from dashboard.charts import (
    chart_config,
    lever_labels,
    log_ticks,
    memory_figure,
    same_link_bytes,
    sweep_figure,
    time_figure,
)
from dashboard.exports import plan_exports
from dashboard.graph_view import dag_figure, dag_layout, layer_groups, op_rows
from dashboard.links_view import busiest_link_groups, devices_of
from dashboard.pipeline_view import gantt_figure, relabel_stages, schedule_1f1b
from dashboard.report_html import html_report
from dashboard.review_pack import review_pack
from dashboard.state import BuildSpec
from dashboard.topology_view import device_positions, topology_figure
from taps_core.cluster.edits import LinkEdit, apply_edits, edits_text, parse_edits, with_edit
from taps_core.cluster.io import dumps, loads
from taps_core.cluster.presets import preset
from taps_core.errors import InvalidInputError
from taps_core.models import build_graph, load_model_config
from taps_core.plan.claims import search_status
from taps_core.plan.records import PipelineInfo, StageInfo
from taps_core.plan.report import plan_to_json
from taps_core.search.baselines import compare, data_parallel_filter
from taps_core.search.pipeline import search_pipeline
from taps_core.search.planner import search
from taps_core.studies.sweep import sweep_inter_bandwidth


@pytest.fixture(scope="module")
def gpt2():
    """A plan without pipeline stages (the folding and figure tests read one)."""
    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=8, seq_length=256))
    topo = preset("dgx-a100:2")
    return graph, topo, search(graph, topo, pipeline=False)


@pytest.fixture(scope="module")
def piped():
    """GPT-2 in 4 pipeline stages on 4 DGX hosts (the engine's pipeline search, ~0.3 s)."""
    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=8, seq_length=256))
    plan = search_pipeline(graph, preset("dgx-a100:4"), stage_counts=(4,))
    assert plan is not None and plan.pipeline is not None
    return graph, plan


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
        ("build:nodes=4096", "nodes"),
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
    # layers 4-7 recomputed: blocks 0-3 and 8-11 (first), 4-7; the tail stays after both
    mixed = replace(plan, ops=tuple(replace(o, recompute=o.layer in range(4, 8)) for o in plan.ops))
    lay = dag_layout(mixed, graph)
    assert [b[:2] for b in lay.blocks] == [(0, 8), (4, 4)]
    last_layer_x = max(lay.pos[n][0] for _, _, names in lay.blocks for n in names)
    assert all(lay.pos[n][0] > last_layer_x for n in ("ln_f", "lm_head", "loss"))
    rows = op_rows(plan, graph)
    assert sum(r["× layers"] for r in rows) == len(plan.ops)


def test_dag_figure_highlight_and_legend(gpt2):
    graph, topo, plan = gpt2
    other = compare(graph, topo)["volume"]
    differ = {a.name for a, b in zip(plan.ops, other.ops) if a.strategy != b.strategy}
    assert same_link_bytes(plan, plan) and not same_link_bytes(plan, other)
    fig = dag_figure(plan, graph, highlight=differ, baseline="volume")
    names = [t.name for t in fig.data if t.name]
    assert "differs from volume" in names and "identical layers (drawn once)" in names
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


def test_html_report_groups_links_of_the_same_load(gpt2):
    """With the topology, the busiest-links table has one row per group of links carrying the
    same load (how many, where), not one per link: at 16 hosts a per-link table of 40 rows
    showed a few of hundreds of identical NICs."""
    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=32, seq_length=256))
    topo = preset("dgx-a100:16")
    plan = search(graph, topo, pipeline=False)
    page = html_report(plan, [], rows=[], topology=topo)
    table = page.split("<h2>Busiest links</h2>")[1]
    rows = table.count("<tr>") - 1
    assert "<th>links</th>" in table and "<th>where</th>" in table
    groups = busiest_link_groups(plan, devices_of(topo))
    assert rows == min(40, len(groups)) and sum(g["links"] for g in groups) == len(plan.links)
    assert len(groups) < len(plan.links) / 4  # identical links folded


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("build:nodes=64,gpus=1000000", "gpus"),
        ("build:nodes=5000", "nodes"),
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


def test_log_ticks_and_expanded_view(gpt2):
    assert log_ticks(1, 400) == [1, 2, 5, 10, 20, 50, 100, 200, 500]
    graph, _, plan = gpt2
    lay = dag_layout(plan, graph, expand=True)
    fig = dag_figure(plan, graph, expand=True, layout=lay)
    labels = [t for tr in fig.data if tr.mode == "text" for t in tr.text]
    assert labels and not any(re.match(r"L\d+\.", t) for t in labels)  # names within a layer
    layers = [a.text for a in fig.layout.annotations if "layer" in a.text or "L" in a.text]
    assert len(layers) == 12  # every layer marked in the expanded view
    assert fig.layout.xaxis.range[1] < 28  # opens on the first columns; drag to pan


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


# ---- pipelined plans, levers, search status, exports ------------------------------------------


def _pipeline(plan, p: int, m: int, t: float, send: float = 0.0, sync: float = 0.0):
    """A hand-made balanced pipeline: ``p`` stages of ``t`` seconds per micro-batch each."""
    stages = tuple(
        StageInfo(i, (i, i), (i,), 8, plan, t, sync, send if p > 1 else 0.0, 0.0) for i in range(p)
    )
    busy = (m + p - 1) * t
    return PipelineInfo(stages, m, 1, busy + sync, 0.0, 0.0, (p - 1) * t, 0.0)


@pytest.mark.parametrize(("p", "m"), [(1, 3), (2, 5), (4, 8), (3, 2)])
def test_1f1b_replay_matches_the_textbook(gpt2, p, m):
    _, _, plan = gpt2
    t, send, sync = 3.0, 0.6, 1.5
    sched = schedule_1f1b(_pipeline(plan, p, m, t, send, sync))
    # balanced stages: (m + p - 1) micro-batch slots, then the gradient sync
    assert sched.end_s == pytest.approx((m + p - 1) * t + sync)
    for i in range(p):
        mine = sorted((b for b in sched.blocks if b.stage == i), key=lambda b: b.start)
        work = [b for b in mine if b.kind in ("forward", "backward")]
        order = [(b.kind[0].upper(), b.microbatch) for b in work]
        warm = min(p - i - 1, m)  # 1F1B: warm-up forwards, then one forward one backward
        assert order[:warm] == [("F", j) for j in range(warm)]
        if warm < m:
            assert order[warm : warm + 2] == [("F", warm), ("B", 0)]
        else:  # fewer micro-batches than stages ahead: every forward, then the backwards
            assert order[warm] == ("B", 0)
        assert sorted(order) == sorted([("F", j) for j in range(m)] + [("B", j) for j in range(m)])
        fwd = next(b for b in work if b.kind == "forward")
        bwd = next(b for b in work if b.kind == "backward")
        own = t - (send if p > 1 else 0.0)
        assert fwd.end - fwd.start == pytest.approx(own / 3)  # forward : backward = 1 : 2
        assert bwd.end - bwd.start == pytest.approx(2 * own / 3)
        busy = sum(b.end - b.start for b in mine if b.kind != "idle")
        assert busy == pytest.approx(m * t + sync)  # every second of the stage accounted for
        covered = sum(b.end - b.start for b in mine)
        assert covered == pytest.approx(sched.end_s)  # idle fills the rest of the row
        for a, b in itertools.pairwise(mine):
            assert a.end <= b.start + 1e-12  # one thing at a time


def test_gantt_names_stages_microbatches_bubble_and_cuts_the_steady_state(gpt2, piped):
    _, plan = piped
    pi = plan.pipeline
    fig = gantt_figure(plan)
    title = fig.layout.title.text
    assert f"{len(pi.stages)} stages" in title and f"{pi.microbatches} micro-batches" in title
    assert f"bubble {100 * pi.bubble_fraction:.0f}%" in title
    names = {t.name for t in fig.data}
    assert {"forward (compute + in-stage comm.)", "backward (compute + in-stage comm.)"} <= names
    assert "gradient sync (once per step)" in names and "bubble (stage idle)" in names
    assert fig.layout.yaxis.ticktext[0].startswith("stage 0 · layers 0–")
    _, _, flat = gpt2
    long = replace(flat, pipeline=_pipeline(flat, 4, 64, 1e-3))
    cut = gantt_figure(long)
    assert any(t.name.startswith("not drawn:") for t in cut.data)
    fwd = next(t for t in cut.data if t.name.startswith("forward"))
    assert {"1", "8", "57", "64"} <= set(fwd.text) and "32" not in fwd.text
    assert len(cut.to_json()) < 40_000  # the figure stays small however many micro-batches
    deep = gantt_figure(replace(flat, pipeline=_pipeline(flat, 32, 512, 1e-3)))
    assert len(deep.to_json()) < 120_000  # and however many stages


def test_stages_relabelled_banded_and_tabled(piped):
    graph, plan = piped
    fixed = relabel_stages(plan, graph)
    assert [op.name for op in fixed.ops] == [op.name for op in graph.ops]
    spans = {st.index: st.layers for st in plan.pipeline.stages}
    for op in fixed.ops:
        if op.layer is not None:
            assert op.name.startswith(f"L{op.layer}.")
            lo, hi = spans[op.stage]
            assert lo <= op.layer <= hi
    assert relabel_stages(fixed, graph) is fixed  # already right: unchanged
    fig = dag_figure(fixed, graph)  # identical layers fold across stages: one band for them
    bands = [a.text for a in fig.layout.annotations if a.text.startswith("<b>stage")]
    last = len(plan.pipeline.stages) - 1
    assert bands[0].startswith("<b>stage 0") and bands[-1].startswith(f"<b>stage {last}")
    assert any(b.startswith(f"<b>stages 0–{last}") for b in bands)
    assert "pipeline stages (shaded bands)" in {t.name for t in fig.data}
    expanded = dag_figure(fixed, graph, expand=True)
    bands = [a.text for a in expanded.layout.annotations if a.text.startswith("<b>stage")]
    assert len(bands) >= 2 and all(not b.startswith("<b>stages") for b in bands)
    rows = op_rows(fixed, graph)
    assert {"stage", "ZeRO", "recompute"} <= set(rows[0])
    assert {r["stage"] for r in rows} == {"0", "3", f"0–{last}"}
    per_op = op_rows(fixed, graph, expand=True)
    assert {r["stage"] for r in per_op} == {str(st.index) for st in plan.pipeline.stages}
    mem = memory_figure(fixed)
    assert list(mem.data[0].y) == [f"stage {st.index}" for st in plan.pipeline.stages]


def test_memory_levers_and_kv_cache_are_labelled(gpt2):
    graph, _, plan = gpt2
    assert "levers: " + ", ".join(lever_labels(plan)) in memory_figure(plan).layout.title.text
    if any(op.zero for op in plan.ops):
        assert any(x.startswith("ZeRO-") for x in lever_labels(plan))
    infer = search(graph, preset("dgx-a100:1"), mode="infer")
    assert infer.memory.kv_cache > 0
    assert "KV cache" in {t.name for t in memory_figure(infer).data}
    assert "gradients" not in {t.name for t in memory_figure(infer).data}


def test_search_status_is_honest(gpt2):
    _, _, plan = gpt2
    assert search_status(plan) == "optimal (proven)"
    bound = plan.total_time_s * 0.9
    feasible = replace(plan, search=replace(plan.search, status="feasible", lower_bound_s=bound))
    assert search_status(feasible).startswith("best found, within 10% of the proven bound")
    unbounded = replace(feasible, search=replace(feasible.search, lower_bound_s=None))
    assert search_status(unbounded) == "best found (no bound proven)"


def test_exports_give_files_or_one_line_reasons(gpt2):
    graph, _, plan = gpt2
    one = preset("dgx-a100:1")
    dp = search(graph, one, allow=data_parallel_filter(one), pipeline=False)
    files = {f.fmt: f for f in plan_exports(plan_to_json(dp))}
    assert set(files) == {"megatron", "deepspeed", "dtensor"}
    assert all(f.text and f.reason is None for f in files.values())
    assert "--tensor-model-parallel-size 1" in files["megatron"].text
    assert files["megatron"].notes[0].startswith("workload: batch 8, sequence 256")
    assert '"train_batch_size": 8' in files["deepspeed"].text
    assert "def parallelize" in files["dtensor"].text and files["dtensor"].ext == "py"
    refused = plan_exports(plan_to_json(plan))  # TAPS's own plan: a split a framework lacks
    for f in refused:
        if f.text is None:
            assert f.reason.startswith(f"not expressible in {f.framework}: ")
            assert "\n" not in f.reason


def test_review_pack_rendering_retries_a_failing_browser(monkeypatch):
    import plotly.graph_objects as go

    from dashboard import review_pack as rp

    calls = []

    def flaky(figs, paths, **_):  # kaleido's page not ready yet, then fine
        calls.append(len(paths))
        if len(calls) == 1:
            raise RuntimeError("JavascriptError: kaleido_scopes is not defined")
        for p in paths:
            with open(p, "wb") as f:
                f.write(b"<svg/>")

    monkeypatch.setattr(rp.pio, "write_images", flaky)
    monkeypatch.setattr(rp.time, "sleep", lambda s: None)
    images, problem = rp.render_images({"a": go.Figure()})
    assert problem is None and set(images) == {"a.svg", "a.png"} and len(calls) == 2

    def missing(figs, paths, **_):
        calls.append(0)
        raise RuntimeError("Image export requires the Kaleido package")

    calls.clear()
    monkeypatch.setattr(rp.pio, "write_images", missing)
    images, problem = rp.render_images({"a": go.Figure()})
    assert images == {} and "requires the Kaleido package" in problem and calls == [0]


def test_a_plan_is_searched_once_however_its_cached_call_is_written(monkeypatch):
    """Streamlit keys a cached call by the arguments given: the Plan page asked for the plan
    with ``prove_stages=False`` and its exports and reasons without it, so every first opening
    searched twice (15 of 30 s for llama3-70b on 16 hosts). Both spellings now share one
    entry."""
    from dashboard import cache

    calls = []
    real = cache.search

    def counted(*args, **kwargs):
        calls.append(kwargs.get("prove_stages"))
        return real(*args, **kwargs)

    monkeypatch.setattr(cache, "search", counted)
    work = ("gpt2", None, 8, 136, "bf16")  # a sequence length no other test plans
    topo = dumps(preset("dgx-a100:2"))
    args = (work, topo, "train", "topology", None)
    first = cache.plan(*args)
    assert cache.plan_ready(*args) and cache.plan_ready(*args, False)
    again = [cache.plan(*args, False), cache.plan(*args, prove_stages=False), cache.plan(*args)]
    assert calls == [False]
    assert all(p.total_time_s == first.total_time_s for p in again)
