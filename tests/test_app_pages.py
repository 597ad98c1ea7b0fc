"""Every dashboard page under Streamlit's AppTest: it runs without an exception, shows its key
elements, reacts to its widgets, reads and writes the URL, and turns bad input into a message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest

from taps_core.cluster.io import dumps
from taps_core.cluster.presets import preset

APP = str(Path(__file__).resolve().parents[1] / "app.py")
PAGES = {
    "plan": "TAPS Planner",
    "topology": "Topology",
    "links": "Link traffic",
    "compare": "Compare plans",
    "sweep": "Inter-node bandwidth sweep",
    "how_it_works": "How it works: bytes are not time",
}
SMALL = {"model": "gpt2", "topo": "dgx-a100:2", "batch": "8", "seq": "256"}
FEW_POINTS = {"sweep": {"points": "3"}}  # page-wide checks need a sweep, not a fine one


def app(page: str = "plan", **params: str) -> AppTest:
    """A run of ``page`` with URL parameters (defaults: small GPT-2 on two DGX nodes)."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({**SMALL, **params})
    at.run()  # the first run lands on the home page (a switch before it is not honoured)
    if page != "plan":
        at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    assert at.title[0].value == PAGES[page]
    return at


def charts(at: AppTest) -> list[dict]:
    """Figure JSON of every plotly chart on the page."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def chart(at: AppTest, words: str) -> dict:
    found = [f for f in charts(at) if words.lower() in f["layout"]["title"]["text"].lower()]
    assert found, f"no chart titled with {words!r}: {[titles(at)]}"
    return found[0]


def titles(at: AppTest) -> list[str]:
    return [f["layout"]["title"]["text"] for f in charts(at)]


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, at.exception[0].message
    return at


@pytest.mark.parametrize("name", PAGES)
def test_every_page_runs_with_titled_legible_charts(name):
    at = app(name, **FEW_POINTS.get(name, {}))
    assert not at.error, [e.value for e in at.error]
    figs = charts(at)
    assert figs, "every page draws at least one chart"
    for fig in figs:
        layout = fig["layout"]
        assert layout["title"]["text"]
        assert layout["font"]["size"] >= 12 and layout["title"]["font"]["size"] >= 12
        assert layout["legend"]["font"]["size"] >= 12
    for el in at.get("plotly_chart"):  # the camera button exports PNG (SVG from the sidebar)
        assert json.loads(el.proto.config)["toImageButtonOptions"]["format"] == "png"


def test_plan_page_headline_graph_table_downloads():
    at = app()
    headline = {
        "Communication time",
        "Compute time",
        "Intra-node bytes",
        "Inter-node bytes",
        "Memory per device",
        "Search time",
    }
    assert headline <= {m.label for m in at.metric}
    assert all(any(u in metric(at, lb) for u in ("s", "B")) for lb in headline)
    mem = chart(at, "Memory per device")
    assert [t["name"] for t in mem["data"]] == [
        "parameters",
        "gradients",
        "optimizer",
        "activations",
    ]
    assert "levers:" in mem["layout"]["title"]["text"]  # what ZeRO, recomputation... pulled
    # a flat plan is proven optimal; a pipelined one has proven stage plans and a searched shape
    assert any(
        c.value.startswith("Search result: **optimal (proven)**")
        or c.value.startswith("Search result: **each stage's plan optimal (proven)")
        or c.value.startswith("Search result: **optimal among plans without stages (proven)")
        or c.value.startswith("Search result: **the fastest framework configuration")
        for c in at.caption
    ), [c.value for c in at.caption]
    dag = chart(at, "Operator graph")
    classes = {t["name"] for t in dag["data"] if t.get("mode", "").startswith("markers")}
    assert classes & {"data parallel", "column", "row", "2-D", "replicated", "sequence"}
    assert any("×" in a["text"] for a in dag["layout"]["annotations"])  # folded layers
    table = at.dataframe[0].value
    assert len(table) < 75  # one row per distinct op (gpt2 has 149)
    assert {"ZeRO", "recompute"} <= set(table.columns)
    assert [d.label for d in at.download_button][-4:] == [
        "Plan JSON",
        "Links CSV",
        "HTML report (self-contained)",
        "Review pack (zip)",
    ]


def test_your_configuration_is_priced_beside_the_plan():
    """The configuration typed in (or in the URL) is priced by the same model; the table
    shows both, the plan is never slower, a bad key is one st.error naming it."""
    spec = "tp=2,pp=1,dp=8,mbs=1,recompute=none,zero=1"
    at = app(yours=spec)
    table = at.dataframe[0].value
    assert list(table.iloc[:, 0]) == ["the plan", f"yours ({spec})"]
    assert any("faster" in c.value or "Same step" in c.value for c in at.caption)
    assert not at.error
    at.text_input(key="plan_yours").set_value("tp=3")
    rerun(at)
    assert at.query_params["yours"] in (["tp=3"], "tp=3")
    assert len(at.error) == 1 and "tp" in at.error[0].value, [e.value for e in at.error]
    # the same configuration pasted as Megatron-LM arguments, then as a DeepSpeed config
    args = "--tensor-model-parallel-size 2 --micro-batch-size 1 --use-distributed-optimizer"
    at.text_input(key="plan_yours").set_value(args)
    rerun(at)
    assert not at.error, [e.value for e in at.error]
    by_flags = at.dataframe[0].value.iloc[1, 1]
    at.text_input(key="plan_yours").set_value(spec)
    rerun(at)
    assert at.dataframe[0].value.iloc[1, 1] == by_flags  # the same step time
    at.text_input(key="plan_yours").set_value('{"zero_optimization": {"stage": 4}}')
    rerun(at)
    assert len(at.error) == 1 and "zero_optimization.stage" in at.error[0].value
    # uneven stages: the --fixed keys and Megatron-LM's flags price the same configuration
    at.text_input(key="plan_yours").set_value("tp=2,pp=2,mbs=1,sp=1,zero=1,first=8,last=4")
    rerun(at)
    assert not at.error, [e.value for e in at.error]
    by_keys = at.dataframe[0].value.iloc[1, 1]
    at.text_input(key="plan_yours").set_value(
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 "
        "--sequence-parallel --use-distributed-optimizer "
        "--decoder-first-pipeline-num-layers 8 --decoder-last-pipeline-num-layers 4")
    rerun(at)
    assert not at.error and at.dataframe[0].value.iloc[1, 1] == by_keys
    at.text_input(key="plan_yours").set_value("tp=2,pp=2,first=13")
    rerun(at)
    assert len(at.error) == 1 and "first" in at.error[0].value, [e.value for e in at.error]


def test_plan_expand_toggle_shows_every_layer():
    at = app()
    folded = sum(len(t["x"]) for t in chart(at, "Operator graph")["data"] if t.get("hovertext"))
    at.toggle(key="plan_expand").set_value(True)
    rerun(at)
    dag = chart(at, "Operator graph")
    assert "all layers" in dag["layout"]["title"]["text"]
    full = sum(len(t["x"]) for t in dag["data"] if t.get("hovertext"))
    assert full > 2 * folded
    assert at.query_params["expand"] in (["1"], "1")
    assert len(at.dataframe[0].value) == full > 100  # every op, drawn and tabled


def test_plan_prove_toggle_keeps_the_plan_and_states_the_proof():
    at = app()
    step = metric(at, "Step time")
    before = [c.value for c in at.caption if "Search result" in c.value]
    assert before and "not proven" in before[0]
    at.toggle(key="plan_prove").set_value(True)
    rerun(at)
    assert metric(at, "Step time") == step  # the same plan
    after = [c.value for c in at.caption if "Search result" in c.value]
    assert after and "not proven" not in after[0]
    assert "optimal (proven)" in after[0] or "of the proven bound" in after[0]
    assert any("every pipeline shape bounded" in i.value for i in at.info)
    assert at.query_params["prove"] in (["1"], "1")


def test_changing_widgets_changes_the_plan():
    at = app(batch="32", seq="1024")  # big enough that the plan uses the network
    inter = metric(at, "Inter-node bytes")
    at.number_input(key="nodes").set_value(1)
    rerun(at)
    assert metric(at, "Inter-node bytes") == "0 B" != inter
    train_mem = metric(at, "Memory per device")
    at.radio(key="mode").set_value("infer")
    rerun(at)
    assert metric(at, "Memory per device") != train_mem
    at.selectbox(key="model").set_value("mlp-2layer")
    rerun(at)
    assert "mlp-2layer" in at.caption[0].value
    # picking a model resets batch and sequence length to that model's own
    assert at.number_input(key="batch").value == 8
    assert at.number_input(key="seq").value == 512


def test_url_reproduces_the_view_and_is_written_back():
    at = app(
        model="mlp-2layer",
        topo="pcie:2",
        mode="infer",
        batch="4",
        seq="128",
        cost="volume",
        mem="20",
        dtype="float16",
        fmt="svg",
    )
    ss = at.session_state
    assert (ss["model"], ss["topo"], ss["nodes"], ss["mode"], ss["batch"], ss["seq"]) == (
        "mlp-2layer",
        "pcie",
        2,
        "infer",
        4,
        128,
    )
    assert ss["cost"] == "volume" and ss["mem_gib"] == 20 and ss["dtype"] == "float16"
    assert "pcie:2" in at.caption[0].value and "volume" in at.caption[0].value
    for el in at.get("plotly_chart"):
        assert json.loads(el.proto.config)["toImageButtonOptions"]["format"] == "svg"
    qp = dict(at.query_params)
    flat = {k: v[0] if isinstance(v, list) else v for k, v in qp.items()}
    assert flat["topo"] == "pcie:2" and flat["model"] == "mlp-2layer" and flat["batch"] == "4"
    # the written URL reproduces the same session
    again = app(**flat)
    assert metric(again, "Communication time") == metric(at, "Communication time")


def test_bad_url_parameters_warn_and_the_page_still_works():
    at = app(batch="lots", topo="dgx-z9:2", model="gpt9")
    warnings = " ".join(w.value for w in at.warning)
    assert "batch" in warnings and "topo" in warnings and "gpt9" in warnings
    assert metric(at, "Communication time")


def test_invalid_workload_is_one_error_line_not_a_traceback():
    at = app(seq="4096")  # GPT-2 has 1024 positions
    assert not at.exception
    assert any("seq_length" in e.value for e in at.error)
    assert not at.metric
    seq = at.query_params["seq"]
    assert (seq[0] if isinstance(seq, list) else seq) == "4096"  # the URL shows what failed


def test_memory_limit_that_cannot_fit_says_so():
    at = app(mem="0.001")
    assert any("memory" in e.value for e in at.error)


def test_uploaded_hf_config_is_planned():
    at = app()
    cfg = {
        "model_type": "llama",
        "hidden_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "batch_size": 4,
        "seq_length": 128,
    }
    at.file_uploader(key="model_file").set_value(
        ("tiny-llama.json", json.dumps(cfg).encode(), "application/json")
    )
    rerun(at)
    assert at.session_state["model"] == "uploaded config.json"
    assert "tiny-llama" in at.caption[0].value
    assert metric(at, "Communication time")
    at.file_uploader(key="model_file").set_value(("bad.json", b"{not json", "application/json"))
    rerun(at)
    assert any("valid UTF-8 JSON" in e.value for e in at.error)


def test_topology_page_build_form_drives_every_page():
    at = app("topology")
    assert "dgx-a100:2" in chart(at, "dgx-a100:2")["layout"]["title"]["text"]
    at.number_input(key="b_nodes").set_value(3)
    at.number_input(key="b_gpus").set_value(4)
    at.number_input(key="b_nics").set_value(1)
    at.number_input(key="b_nic_GBps").set_value(10.0)
    next(b for b in at.button if b.label == "Use this cluster").click()
    rerun(at)
    assert at.session_state["topo"] == "custom"
    assert any("custom:3x4" in t for t in titles(at))
    topo_param = at.query_params["topo"]
    assert "build:" in (topo_param[0] if isinstance(topo_param, list) else topo_param)
    at.switch_page("app_pages/plan.py")
    rerun(at)
    assert "custom:3x4" in at.caption[0].value


def _editor_key(at: AppTest) -> str:
    return f"link_editor_{at.session_state['editor_gen']}"


def test_link_editor_degrades_and_cuts_links():
    at = app("topology", topo="dgx-a100:2")
    rows = at.data_editor[0].value
    nic = next(i for i, r in rows.iterrows() if r["src"] == "n0.nic0" and r["dst"] == "net")
    at.session_state[_editor_key(at)] = {
        "edited_rows": {nic: {"bandwidth (GB/s)": 1.0}},
        "added_rows": [],
        "deleted_rows": [],
    }
    rerun(at)
    assert any("dgx-a100:2, n0.nic0~net 1 GB/s" in c.value for c in at.caption)
    edits = at.query_params["edits"]
    assert "n0.nic0~net:bw=1" in (edits[0] if isinstance(edits, list) else edits)
    at.switch_page("app_pages/links.py")
    rerun(at)
    assert "n0.nic0~net 1 GB/s" in at.caption[0].value  # the edit by value
    # cutting a GPU's only NVLink leaves it reachable through its NIC; cutting its NIC link
    # too disconnects nothing (the NVSwitch path remains) -- but cutting the only uplink of a
    # single-NIC host is refused with a message
    at = app("topology", topo="ethernet:2")
    rows = at.data_editor[0].value
    uplink = next(i for i, r in rows.iterrows() if r["src"] == "n0.nic0" and r["dst"] == "net")
    at.session_state[_editor_key(at)] = {
        "edited_rows": {uplink: {"in use": False}},
        "added_rows": [],
        "deleted_rows": [],
    }
    rerun(at)
    assert any("skipped" in w.value and "connected" in w.value for w in at.warning)
    assert any("ethernet:2" in t for t in titles(at))


def test_topology_upload_round_trip():
    at = app("topology")
    text = dumps(preset("pcie-nvlink:2"))
    at.file_uploader(key="topo_file").set_value(("mine.json", text.encode(), "application/json"))
    rerun(at)
    assert any("pcie-nvlink:2" in t for t in titles(at))
    assert at.session_state["topo_custom"] == "json"
    at.file_uploader(key="topo_file").set_value(("bad.json", b'{"format": "x"}', "text/json"))
    rerun(at)
    assert any("format" in e.value for e in at.error)


def test_links_page_slider_limits_bars():
    at = app("links", topo="dgx-a100:1")  # one host: never pipelined, split by op kind
    for words in ("Busy time per link", "GPU-to-GPU"):
        chart(at, words)
    at.radio(key="links_metric").set_value("bytes")
    rerun(at)
    chart(at, "Bytes per link")
    at.radio(key="links_metric").set_value("busy")
    at.slider(key="links_top").set_value(4)
    rerun(at)
    busy = chart(at, "Busy time per link")
    assert all(len(t["x"]) <= 4 for t in busy["data"])
    assert "top 4" in busy["layout"]["title"]["text"]
    rows = at.dataframe[0].value  # links with the same load in one row, how many in "links"
    directed = int(metric(at, "Links carrying traffic").split()[0])
    assert 1 <= len(rows) <= 4 and (len(rows) == 4 or rows["links"].sum() == directed)


def test_compare_page_baseline_radio_and_unfit_reasons():
    at = app("compare")
    bars = chart(at, "Step time per plan")
    assert bars["data"][0]["x"] == [
        "TAPS (topology-aware)",
        "volume-based",
        "Megatron-style",
        "data parallel",
    ]
    assert "volume-based" in chart(at, "TAPS plan")["layout"]["title"]["text"]
    at.radio(key="cmp_baseline").set_value("megatron")
    rerun(at)
    assert "Megatron" in chart(at, "TAPS plan")["layout"]["title"]["text"]
    assert "Megatron" in chart(at, "differ most")["layout"]["title"]["text"]
    # how many ops differ, where, and both structures in Megatron-LM terms
    words = next(m.value for m in at.markdown if "sharded differently" in m.value)
    assert re.search(r"\d+ inside hosts, \d+ across hosts\. TAPS: TP \d+", words), words
    assert "Megatron-style: TP" in words
    # the selected baseline's exports: a file per framework, or the reason there is none
    assert "Export the Megatron-style plan" in [h.value for h in at.subheader]
    files = [b.help for b in at.get("download_button") if "_train_megatron-" in (b.help or "")]
    refused = [i.value for i in at.info if i.value.startswith(("not expressible", "could not"))]
    assert len(files) + len(refused) == 3, (files, refused)
    assert all(f.startswith("gpt2_dgx-a100-2_train_megatron-") for f in files)
    # batch 8 cannot be split 16 ways: data parallel has no plan, and the page says why
    at = app("compare", model="gpt2", batch="8", seq="1024")
    warnings = [w.value for w in at.warning]
    assert any("data parallel" in w and "has no plan" in w for w in warnings)
    assert [m.value for m in at.metric][-1] == "does not fit"
    assert chart(at, "Step time per plan")["layout"]["annotations"]


def test_sweep_shows_step_time_without_a_click_and_explains_changes():
    at = app("sweep", points="4", curves="volume", batch="32", seq="1024")
    assert not at.button, "the sweep runs by itself"
    sw = chart(at, "Step time vs inter-node bandwidth")
    shown = [
        t for t in sw["data"]
        if t.get("showlegend") is not False and t["x"][0] is not None
        and not t["name"].startswith("this cluster")  # the star on TAPS's own point
    ]
    # TAPS is drawn last, on top of the baselines
    assert [t["name"] for t in shown] == ["volume-based", "TAPS (topology-aware)"]
    # 4 points from 1 to 400 GB/s, and the cluster's own 200 GB/s
    assert len(shown[-1]["x"]) == 5 and all(y for y in shown[-1]["y"])
    assert sw["layout"]["xaxis"]["type"] == "log"
    ticks = sw["layout"]["xaxis"]["ticktext"]
    assert all(t.lstrip("0.").strip("0") in ("1", "2", "5", "") for t in ticks), ticks
    # gpt2 training on 2 DGX hosts: below some bandwidth the hosts stop splitting the work
    words = " ".join(m.value for m in (*at.markdown, *at.caption))
    assert "①" in words and "GB/s per host" in words and "Because" in words
    assert "DP 2 -> 1 across nodes" in words and "the second node would only duplicate" in words
    assert any("repeat" in w.value for w in at.warning)
    assert at.dataframe, "the regime table is shown"
    at.slider(key="sweep_points").set_value(5)
    rerun(at)
    assert len(chart(at, "Step time vs")["data"][0]["x"]) == 6


def test_sweep_page_holds_to_the_engine_numbers():
    """The sweep page's every-point table is the engine's sweep of the same inputs (what
    ``python -m taps_core sweep --json`` prints), rounded to 4 digits; the cluster's own
    bandwidth is a point (starred in the chart) whose TAPS step is the Plan page's search."""
    from taps_core.models import build_graph, load_model_config
    from taps_core.search.planner import search
    from taps_core.studies.sweep import sweep_grid, sweep_inter_bandwidth

    at = app("sweep", points="3", curves="volume", bw_lo="2", bw_hi="400")
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[-1].value  # "Every point"
    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=8, seq_length=256))
    topo = preset("dgx-a100:2")
    sw = sweep_inter_bandwidth(graph, topo, sweep_grid(2e9, 400e9, 3, 200e9),
                               labels=("taps", "volume"))
    assert len(table) == len(sw.points) == 4
    for (_, row), p in zip(table.iterrows(), sw.points):
        assert row["GB/s per host"] == float(f"{p.node_bandwidth_Bps / 1e9:.4g}")
        for lb, name in (("taps", "TAPS (topology-aware)"), ("volume", "volume-based")):
            ms = p.plans[lb].total_time_s * 1e3
            assert row[f"{name} step (ms)"] == float(f"{ms:.4g}")
        assert row["TAPS structure (Megatron terms)"] == p.plans["taps"].shape.words()
        assert row["point"] == ("this cluster" if sw.is_own(p.node_bandwidth_Bps) else "")
    for col in table.columns:  # sensible digits: no 31.514555166975864
        if table[col].dtype.kind == "f":
            assert all(len(f"{v:g}".replace(".", "").lstrip("0")) <= 4 for v in table[col])
    own = table[table["point"] == "this cluster"].iloc[0]
    plan = search(graph, topo)
    assert own["TAPS (topology-aware) step (ms)"] == float(f"{plan.total_time_s * 1e3:.4g}")
    star = [t for t in chart(at, "Step time vs")["data"] if t["name"].startswith("this cluster")]
    assert star and star[0]["x"] == [200.0]
    assert star[0]["y"][0] == pytest.approx(plan.total_time_s * 1e3)
    from taps_core.plan.report import fmt_seconds

    plan_page = app("plan")  # the same inputs (SMALL): the Plan page's step time
    assert metric(plan_page, "Step time") == fmt_seconds(star[0]["y"][0] / 1e3)
    assert at.get("download_button"), "the sweep JSON can be downloaded"
    regimes = at.dataframe[0].value
    assert any("this cluster" in v for v in regimes["GB/s per host"])
    assert all(v.startswith("TP ") for v in regimes["structure (Megatron terms)"])
    for c in sw.plan_changes:  # each change's structure in Megatron words, in bold
        said = c.structure or "the same Megatron structure"
        assert any(said in m.value and m.value.startswith("**") for m in at.markdown)


def test_sweep_redraws_an_unchanged_state_without_a_duplicate_chart(monkeypatch):
    """Two planning states in a row can draw the same figure (e.g. while the last plan change
    is located): each draft chart has its own key, so Streamlit never sees two charts with one
    auto-generated ID (gpt3-175b's sweep showed StreamlitDuplicateElementId)."""
    from dashboard import cache

    real = cache.sweep_run

    class Twice:
        """The real sweep run, every state it yields handed out twice."""

        def __init__(self, run):
            self.run = run

        def fill(self, grid, **kw):
            for sw in self.run.fill(grid, **kw):
                yield sw
                yield sw

    monkeypatch.setattr(cache, "sweep_run", lambda *a, **kw: Twice(real(*a, **kw)))
    at = app("sweep", points="3", curves="volume", batch="32", seq="1024")
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert chart(at, "Step time vs inter-node bandwidth")


def test_sweep_page_single_node_explains():
    at = app("sweep", topo="dgx-a100:1")
    assert any("one host" in i.value for i in at.info)


def test_how_it_works_live_on_the_topology():
    at = app("how_it_works", topo="ethernet:2")
    fig = chart(at, "All-reduce of one buffer")
    time_b = fig["data"][3]["y"][0]
    assert time_b > 10 * fig["data"][1]["y"][0]  # one shared NIC: B is far slower
    at.slider(key="explain_gb").set_value(2.0)
    rerun(at)
    assert chart(at, "All-reduce of one buffer")["data"][3]["y"][0] == pytest.approx(
        2 * time_b, rel=0.01
    )
    at = app("how_it_works", topo="dgx-a100:1")
    assert any("second one is added" in m.value for m in at.markdown)


@pytest.mark.parametrize("name", PAGES)
def test_every_chart_title_names_model_cluster_mode_and_batch(name):
    at = app(name, net="25", **FEW_POINTS.get(name, {}))  # an edited cluster says so
    for title in titles(at):
        assert "gpt2" in title and "dgx-a100:2, network 25 GB/s per host" in title, title
        assert "training" in title and "batch 8" in title, title
    for el in at.get("plotly_chart"):
        stem = json.loads(el.proto.config)["toImageButtonOptions"]["filename"]
        assert stem.startswith("gpt2_dgx-a100-2-edited_train_"), stem


def test_network_slider_changes_the_plan_and_says_why():
    at = app(batch="32", seq="1024")
    fast = metric(at, "Inter-node bytes")
    at.select_slider(key="net_GBps").set_value(1.0)
    rerun(at)
    assert metric(at, "Inter-node bytes") != fast
    assert any("Against the unedited dgx-a100:2" in i.value for i in at.info)
    assert any("repeats the same work" in w.value for w in at.warning)
    assert any("Why this plan" in m.value for m in at.markdown)
    assert any("runner-up" in m.value for m in at.markdown)
    net = at.query_params["net"]
    assert (net[0] if isinstance(net, list) else net) == "1"
    assert any("1 GB/s per host" in c.value and "edited" in c.value for c in at.sidebar.caption)


def test_selecting_a_link_and_changing_its_bandwidth_replans():
    at = app("topology", topo="ethernet:2")
    at.session_state["topo_selected"] = ("link", "n0.nic0", "net")  # what a click stores
    rerun(at)
    at.number_input(key="sel_bw_n0.nic0_net").set_value(0.5)
    at.button(key="sel_apply").click()
    rerun(at)
    edits = at.query_params["edits"]
    assert "n0.nic0~net:bw=0.5" in (edits[0] if isinstance(edits, list) else edits)
    drawn = chart(at, "ethernet:2")
    assert any(t.get("name") == "edited link" for t in drawn["data"])
    at.button(key="add_host").click()
    rerun(at)
    assert any("3 host(s)" in c.value for c in at.sidebar.caption)
    at.session_state["topo_selected"] = ("device", "n2.gpu0")
    rerun(at)
    assert any("Device n2.gpu0" in m.value for m in at.markdown)


def test_compare_says_why_a_baseline_is_slow():
    at = app("compare", batch="32", seq="1024")
    assert any("Why these plans differ" in m.value for m in at.markdown)
    assert any("step takes" in (m.delta or "") for m in at.metric if m.label.startswith("TAPS vs"))


def test_pipelined_plan_shows_stages_schedule_and_why_exports_are_refused():
    at = app(topo="dgx-a100:4", batch="32", seq="1024")  # gpt2's own workload: pipelined
    gantt = chart(at, "1F1B pipeline schedule")
    title = gantt["layout"]["title"]["text"]
    found = re.search(r"(\d+) stages × (\d+) micro-batches of \d+ · bubble \d+%", title)
    assert found, title
    stages = int(found.group(1))
    assert "gpt2 · dgx-a100:4 · training · batch 32" in title
    assert metric(at, "Stages") == str(stages) and metric(at, "Pipeline bubble").endswith("%")
    rows = gantt["layout"]["yaxis"]["ticktext"]
    assert [r.split(" · ")[0] for r in rows] == [f"stage {i}" for i in range(stages)]
    kinds = {t["name"] for t in gantt["data"]}
    assert {"forward (compute + in-stage comm.)", "send to the next / previous stage"} <= kinds
    assert {"gradient sync (once per step)", "bubble (stage idle)"} <= kinds
    assert any("split forward : backward = 1 : 2" in c.value for c in at.caption)
    cfg = next(
        json.loads(el.proto.config)
        for el in at.get("plotly_chart")
        if "1F1B" in json.loads(el.proto.spec)["layout"]["title"]["text"]
    )
    assert cfg["toImageButtonOptions"]["filename"] == "gpt2_dgx-a100-4_train_pipeline"
    dag = chart(at, "Operator graph")
    banded = set()  # a band names one stage or a range of identical ones ("stages 1–2")
    for a in dag["layout"]["annotations"]:
        one = re.match(r"<b>stage (\d+)\b", a["text"])
        run = re.match(r"<b>stages (\d+)–(\d+)\b", a["text"])
        banded |= {int(one.group(1))} if one else set(
            range(int(run.group(1)), int(run.group(2)) + 1)) if run else set()
    assert banded == set(range(stages))
    table = at.dataframe[0].value
    covered = set()  # a row of identical layers folded across stages names their range
    for part in (p for cell in table["stage"] for p in str(cell).split(", ")):
        lo, _, hi = part.partition("–")
        covered |= set(range(int(lo), int(hi or lo) + 1))
    assert covered == set(range(stages))
    assert any("pipeline stages across hosts" in m.value for m in at.markdown)
    # why this plan: pipelining itself, priced against the fastest configuration without stages
    assert any(
        f"{stages} pipeline stages with" in m.value
        and "configuration without stages" in m.value
        for m in at.markdown
    )
    assert "levers:" in chart(at, "Memory per device (fullest stage)")["layout"]["title"]["text"]
    # TAPS's stage plans split the batch differently per op: no framework runs them as is
    refused = [i.value for i in at.info if i.value.startswith("not expressible in ")]
    assert refused, [i.value for i in at.info]
    for reason in refused:
        assert "\n" not in reason and re.search(r"\b(op|lever|pipeline|stage)\b", reason)
    # Links: stages broken down on their own hosts, the sends between stages as their own kind
    rerun(at.switch_page("app_pages/links.py"))
    bars = chart(at, "per link")
    assert "pipeline send" in {t["name"] for t in bars["data"]}
    assert [t for t in titles(at) if "GPU-to-GPU" in t]


def test_an_expressible_plan_downloads_all_three_exports():
    at = app(topo="build:nodes=1,gpus=1,nics=1")  # one GPU: plain data parallelism of 1
    helps = {b.label: b.help for b in at.get("download_button")}
    stem = "gpt2_custom-1x1_train_"
    assert helps["Megatron-LM arguments (.txt)"].startswith(f"{stem}megatron-args.txt")
    assert helps["DeepSpeed config (.json)"].startswith(f"{stem}deepspeed-config.json")
    assert helps["DTensor plan (.py)"].startswith(f"{stem}dtensor-plan.py")
    assert not [i.value for i in at.info if i.value.startswith("not expressible")]


def _preview_only() -> None:
    from dashboard.widgets import current, framework_preview

    framework_preview(current())


def test_while_taps_searches_the_framework_configuration_is_previewed_then_replaced():
    """The preview names the configuration and its step and draws its memory; once the plan
    is found the page holds the plan alone (no preview left beside its figures)."""
    at = AppTest.from_function(_preview_only, default_timeout=120)
    at.query_params.update({**SMALL, "batch": "16"})
    at.run()
    assert not at.exception, at.exception[0].message if at.exception else ""
    words = " ".join(m.value for m in at.markdown)
    assert "Preview while TAPS searches" in words and "tp=" in words and "step" in words
    assert titles(at) and "memory" in titles(at)[0].lower()
    page = app("plan", batch="12")  # a workload no other test plans: its search runs here
    assert not any("Preview while TAPS searches" in m.value for m in page.markdown)
    assert metric(page, "Step time")
