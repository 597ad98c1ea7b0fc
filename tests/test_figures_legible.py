"""The figures stand alone as screenshots at 1 to 128 hosts (issue 18, "pictures").

For gpt2 on 2 DGX hosts (searched), llama3-70b on 16 and gpt3-175b on 128 (Megatron-style
configurations priced with ``--fixed``, ~1 s each): the operator graph's default view holds
every op of the plan; no two text labels overlap in the operator graph, the topology drawing
and the 16-stage Gantt; the colour legend tells a batch split from a tensor split and which
level carries it; the topology drawing puts many hosts in named blocks with labelled links; the
Links page folds links with the same load into one bar or row and sums its traffic matrix per
host past 64 GPUs. Text boxes are estimated from the figure (font size x characters, in pixels
of the width the figure is laid out for) and, where kaleido and chromium are present, read from
the rendered SVG (annotation boxes as the browser measured them, every other text estimated).
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard.charts import mark_rows, sweep_figure
from dashboard.graph_view import (
    BATCH,
    BETWEEN,
    COLUMN,
    DEFAULT_WIDTH_PX,
    ROW,
    SEQUENCE,
    SPLIT_COLORS,
    dag_figure,
    level_class,
)
from dashboard.links_view import (
    GPU_HEATMAP_MAX,
    busiest_link_groups,
    devices_of,
    link_bars_figure,
    traffic_heatmap_figure,
)
from dashboard.pipeline_view import gantt_figure, relabel_stages
from dashboard.topology_view import topology_figure
from taps_core.cluster.presets import preset
from taps_core.models import build_graph, load_model_config
from taps_core.plan.traffic import gpu_traffic_matrix, link_traffic_by_op_kind
from taps_core.search.fixed_config import parse_fixed, plan_fixed
from taps_core.search.planner import search
from taps_core.studies.explain import layer_relative_names
from taps_core.studies.sweep import sweep_inter_bandwidth

CASES = {
    "gpt2@2": ("gpt2", {"batch_size": 8, "seq_length": 256}, "dgx-a100:2", None),
    "llama3-70b@16": ("llama3-70b", {}, "dgx-a100:16", "tp=8,pp=16,mbs=1"),
    "gpt3-175b@128": (
        "gpt3-175b",
        {"batch_size": 1536},
        "dgx-a100:128",
        "tp=8,pp=8,dp=16,mbs=1,sp=1,recompute=none,zero=1",
    ),
}
EM = 0.6  # estimated character width / font size for the figure-side estimate


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    """(graph, topology, plan) of one case, stages relabelled as the dashboard shows them."""
    model, workload, topo_name, fixed = CASES[request.param]
    cfg = load_model_config(model)
    graph = build_graph(cfg.with_workload(**workload) if workload else cfg)
    topo = preset(topo_name)
    if fixed is None:
        plan = search(graph, topo, pipeline=False)
    else:
        plan = relabel_stages(plan_fixed(graph, topo, parse_fixed(fixed)), graph)
    return graph, topo, plan


# ---- text boxes from the figure ---------------------------------------------------------------


def _plain(text: str) -> tuple[str, bool]:
    return re.sub(r"<[^>]+>", "", text), "<b>" in text


def _frame(fig, width_px: int):
    """Data -> pixel (y down) of the plot area, from the figure's margins and axis ranges."""
    m = fig.layout.margin
    h = fig.layout.height
    x0, x1 = fig.layout.xaxis.range
    y0, y1 = fig.layout.yaxis.range
    pw, ph = width_px - m.l - m.r, h - m.t - m.b

    def px(x: float, y: float) -> tuple[float, float]:
        return m.l + (x - x0) / (x1 - x0) * pw, m.t + (y1 - y) / (y1 - y0) * ph

    return px


def figure_text_boxes(fig, width_px: int = DEFAULT_WIDTH_PX) -> list[tuple[tuple, str]]:
    """Pixel boxes of every data label (text traces) and annotation placed in data
    coordinates, each ``((x0, y0, x1, y1), text)``."""
    px = _frame(fig, width_px)
    out = []
    for tr in fig.data:
        if not tr.mode or "text" not in tr.mode or tr.text is None:
            continue
        size = tr.textfont.size or 12
        where = tr.textposition or "middle center"
        assert isinstance(where, str), "labels are placed by the figure, not per point"
        for x, y, text in zip(tr.x, tr.y, tr.text):
            if not text:
                continue
            cx, cy = px(x, y)
            w, h = len(text) * size * EM, size * 1.2
            left = {"center": cx - w / 2, "right": cx + 6, "left": cx - 6 - w}[where.split()[1]]
            out.append(((left, cy - h / 2, left + w, cy + h / 2), text))
    for a in fig.layout.annotations:
        if (a.xref or "x") != "x" or (a.yref or "y") != "y" or not a.text:
            continue
        lines = [_plain(line) for line in a.text.split("<br>")]
        text = " ".join(t for t, _ in lines)
        size = a.font.size or 12
        w = max(len(t) * size * (EM + 0.04 * bold) for t, bold in lines)
        h = size * 1.2 * len(lines)
        cx, cy = px(a.x, a.y)
        left = {"left": cx, "right": cx - w}.get(a.xanchor, cx - w / 2)
        top = {"top": cy, "bottom": cy - h}.get(a.yanchor, cy - h / 2)
        out.append(((left, top, left + w, top + h), text))
    return out


def _overlaps(boxes: list[tuple[tuple, str]]) -> list[tuple[str, str]]:
    bad = []
    for i, (a, ta) in enumerate(boxes):
        for b, tb in boxes[i + 1 :]:
            if a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5:
                bad.append((ta, tb))
    return bad


# ---- the operator graph ------------------------------------------------------------------------


def test_default_view_holds_every_op(case):
    graph, _, plan = case
    fig = dag_figure(plan, graph)
    ops = next(t for t in fig.data if t.name == "ops")
    x0, x1 = fig.layout.xaxis.range
    y0, y1 = fig.layout.yaxis.range
    assert all(x0 < x < x1 for x in ops.x) and all(y0 < y < y1 for y in ops.y)
    shown: dict[str, list[set[int]]] = {}
    for name, layers in ops.customdata:
        spans = set()
        for part in filter(None, layers.split(", ")):
            lo, _, hi = part.partition("–")
            spans |= set(range(int(lo), int(hi or lo) + 1))
        shown.setdefault(name, []).append(spans)
    relative = layer_relative_names(plan.ops)
    for op in plan.ops:
        marks = shown.get(relative[op.name], [])
        assert marks, f"{op.name} is not in the default view"
        if op.layer is not None:
            assert any(op.layer in s for s in marks), f"layer {op.layer} of {op.name} missing"
    if plan.pipeline is not None:  # every stage named by a band (alone or in a range)
        bands = [a.text for a in fig.layout.annotations if a.text.startswith("<b>stage")]
        named = set()
        for b in bands:
            m = re.match(r"<b>stages? (\d+)(?:–(\d+))?", b)
            assert m, b
            named |= set(range(int(m[1]), int(m[2] or m[1]) + 1))
        assert named == {st.index for st in plan.pipeline.stages}


def test_graph_labels_never_overlap_and_name_most_ops(case):
    graph, _, plan = case
    fig = dag_figure(plan, graph)
    boxes = figure_text_boxes(fig)
    assert not _overlaps(boxes)
    px = _frame(fig, DEFAULT_WIDTH_PX)
    ops = next(t for t in fig.data if t.name == "ops")
    markers = [px(x, y) for x, y in zip(ops.x, ops.y)]
    for (x0, y0, x1, y1), text in boxes:  # no label covers a marker's centre
        assert not any(x0 < mx < x1 and y0 < my < y1 for mx, my in markers), text
    labels = [t for tr in fig.data if tr.mode == "text" for t in tr.text]
    assert len(labels) >= 0.9 * len(ops.x)  # and the default view names (nearly) every op


def test_colours_tell_batch_from_tensor_and_the_level(case):
    graph, _, plan = case
    fig = dag_figure(plan, graph)
    inside = {t.name: t.marker.color for t in fig.data if t.legend in (None, "legend") and t.name}
    across = {t.name: t.marker.color for t in fig.data if t.legend == "legend2"}
    assert len(set(SPLIT_COLORS.values())) == len(SPLIT_COLORS)  # one colour per class
    ops = {op.name: op for op in plan.ops}
    if "gpt3-175b" in plan.model_name:  # TP 8 inside a host, DP across hosts, SP on norms
        assert {COLUMN, ROW, SEQUENCE} <= set(inside) and BATCH in across
        assert inside[COLUMN] != across[BATCH]
        assert level_class(ops["L0.ln1"], "intra") == SEQUENCE  # a norm is never "column"
        assert level_class(ops["L0.ln1"], "inter") == BATCH
        assert level_class(ops["L0.mlp.down"], "intra") == ROW
        assert level_class(ops["L0.mlp.gelu"], "intra") == BETWEEN
    legend_title = fig.layout.legend2.title.text if across else fig.layout.legend.title.text
    assert "across hosts" in legend_title or "inside a host" in legend_title
    for op in plan.ops:  # the hover says both levels in words
        assert level_class(op, "intra") in SPLIT_COLORS


def test_level_classes_from_strategies(case):
    _, _, plan = case
    for op in plan.ops:
        letters = {ch for ch, f in op.strategy.intra if f > 1}
        klass = level_class(op, "intra")
        if letters == {"b"}:
            assert klass == BATCH
        if op.kind in ("norm", "elementwise") and letters and not letters & {"b", "s", "e"}:
            assert klass == BETWEEN, op.name


# ---- topology, Gantt --------------------------------------------------------------------------


def test_topology_labels_readable_at_many_hosts(case):
    _, topo, plan = case
    for fig in (topology_figure(topo, plan), topology_figure(topo)):
        boxes = figure_text_boxes(fig)
        assert not _overlaps(boxes)
        link_labels = [t for tr in fig.data if tr.mode and "text" in tr.mode for t in tr.text]
        if topo.nodes > 8:  # per class, not per link (16 x 24 links at 16 hosts); the usual
            assert len(link_labels) <= 40  # values named once, in the legend
            names = " ".join(t.name or "" for t in fig.data)
            assert "25 GB/s per host" in names and "300 GB/s per host" in names


@pytest.mark.parametrize("name", ["dgx-a100:1", "dgx-a100:4", "dgx-a100:8", "pcie-nvlink:6"])
def test_topology_labels_never_overlap_at_a_few_hosts(name):
    fig = topology_figure(preset(name))
    boxes = figure_text_boxes(fig)
    assert boxes and not _overlaps(boxes), _overlaps(boxes)[:3]


def _block_names(fig) -> list[str]:
    """The names under the topology drawing's boxes (``host 3``, ``hosts 0–31``)."""
    return [
        re.sub(r"<[^>]+>", "", a.text)
        for a in fig.layout.annotations
        if re.match(r"<b>hosts? \d", a.text or "")
    ]


def _hosts_named(names: list[str]) -> list[int]:
    hosts = []
    for name in names:
        for part in name.split(" ", 1)[1].split(", "):
            lo, _, hi = part.partition("–")
            hosts += range(int(lo), int(hi or lo) + 1)
    return hosts


@pytest.mark.parametrize(
    "name, edit, host",
    [("dgx-a100:16", "n3.nic0~net:bw=5", 3), ("dgx-a100:128", "n70.gpu2~n70.nvswitch:bw=100", 70)],
)
def test_edited_host_is_named_and_labelled(name, edit, host):
    from taps_core.cluster.edits import apply_edits, parse_edits

    topo, errors = apply_edits(preset(name), parse_edits(edit))
    assert not errors
    src, dst = edit.split(":")[0].split("~")
    fig = topology_figure(topo, edited={frozenset((src, dst))})
    labels = [t for tr in fig.data if tr.mode == "text" for t in tr.text]
    bw = "5–25" if host == 3 else "100–300"
    # the edited host's class: one link slower than 7 (" GB/s" dropped when columns are narrow)
    assert labels[0] in (f"8 × {bw} GB/s", f"8 × {bw}")
    assert f"host {host}" in _block_names(fig)  # a block of its own, named
    assert "edited link" in {t.name for t in fig.data}
    assert not _overlaps(figure_text_boxes(fig))


@pytest.mark.parametrize("hosts", [[3, 40], [3, 8, 12, 20, 41, 50]])
def test_every_edited_host_is_named_at_64_hosts(hosts):
    from taps_core.cluster.edits import apply_edits, parse_edits

    edits = ";".join(f"n{h}.nic1~net:bw=5" for h in hosts)
    topo, errors = apply_edits(preset("dgx-a100:64"), parse_edits(edits))
    assert not errors
    fig = topology_figure(topo, edited={frozenset((f"n{h}.nic1", "net")) for h in hosts})
    notes = [re.sub(r"<[^>]+>", " ", a.text) for a in fig.layout.annotations]
    named = set()  # a block of its own ("host 3") or under its block ("edited: hosts 3, 8")
    for note in notes:
        if m := re.fullmatch(r" ?host (\d+) ?", note):
            named.add(int(m[1]))
        if m := re.search(r"edited: hosts? ([\d, –]+)", note):
            named |= set(_hosts_named([f"hosts {m[1]}"]))
    assert set(hosts) <= named, notes
    assert not _overlaps(figure_text_boxes(fig))


def test_topology_at_128_hosts_is_blocks_of_hosts_with_labelled_links():
    fig = topology_figure(preset("dgx-a100:128"))
    names = _block_names(fig)
    assert 2 <= len(names) <= 8 and sorted(_hosts_named(names)) == list(range(128))
    labels = [t for tr in fig.data if tr.mode == "text" for t in tr.text]
    assert len(labels) + len(names) <= 40 and not _overlaps(figure_text_boxes(fig))
    for value in ("8 × 300 GB/s", "8 × 32 GB/s", "8 × 25 GB/s"):  # on every block's lines
        assert labels.count(value) == len(names), value
    assert "128 hosts" in fig.layout.title.text and "blocks of 32" in fig.layout.title.text


def test_gantt_legible_at_16_stages(case):
    _, _, plan = case
    if plan.pipeline is None or len(plan.pipeline.stages) < 8:
        pytest.skip("no long pipeline in this case")
    fig = gantt_figure(plan)
    rows = len(plan.pipeline.stages)
    m = fig.layout.margin
    row_px = (fig.layout.height - m.t - m.b) / rows
    ticks = fig.layout.yaxis.ticktext
    lines = max(t.count("<br>") + 1 for t in ticks)
    assert row_px >= 16 * lines  # each row's label fits its row
    widest = max(len(part) for t in ticks for part in t.split("<br>"))
    assert widest * 12 * EM <= 0.22 * DEFAULT_WIDTH_PX  # the timeline keeps most of the width
    vals = list(fig.layout.xaxis.tickvals)
    span = fig.layout.xaxis.range[1] - fig.layout.xaxis.range[0]
    for a, b, text in zip(vals, vals[1:], fig.layout.xaxis.ticktext[1:]):  # ticks apart
        assert (b - a) / span * (DEFAULT_WIDTH_PX - 250) >= len(text) * 12 * EM + 8


# ---- links page -------------------------------------------------------------------------------


def test_link_bars_name_how_many_links_share_each_load(case):
    _, topo, plan = case
    br = link_traffic_by_op_kind(plan, topo)
    fig = link_bars_figure(br, devices_of(topo), metric="busy", top=24)
    names = {x for tr in fig.data for x in tr.x}
    counts = [int(m[1]) if (m := re.match(r"(\d+) × ", n)) else 1 for n in names]
    assert len(names) <= 2 * 24 and sum(counts) == len(br.links)  # every link, in few bars
    if topo.nodes >= 16:  # identical links folded: the hosts past the first ones are counted
        assert len(names) <= 12 and max(counts) >= 8 * topo.nodes
        assert any(re.search(r"hosts \d+–\d+", n) for n in names)
    axes = [v for k, v in fig.layout.to_plotly_json().items() if k.startswith("xaxis")]
    assert axes and all(ax["automargin"] for ax in axes)  # rotated labels get their room
    rows = busiest_link_groups(plan, devices_of(topo))
    assert sum(r["links"] for r in rows) == len(plan.links)
    assert rows[0]["busy (ms)"] == pytest.approx(max(k.busy_time_s for k in plan.links) * 1e3)


def test_traffic_heatmap_is_host_by_host_past_64_gpus(case):
    _, topo, plan = case
    gpus, matrix = gpu_traffic_matrix(plan, topo)
    fig = traffic_heatmap_figure(gpus, matrix, devices_of(topo))
    heat = fig.data[0]
    if len(gpus) <= GPU_HEATMAP_MAX:
        assert "GPU-to-GPU" in fig.layout.title.text and len(heat.z) == len(gpus)
        return
    per_host = np.array(heat.customdata)  # GB: the engine's GPU x GPU bytes summed per host
    assert per_host.shape == (topo.nodes, topo.nodes)
    assert per_host.sum() == pytest.approx(matrix.sum() / 1e9)
    g = topo.gpus_per_node
    inside = sum(matrix[h * g : (h + 1) * g, h * g : (h + 1) * g].sum() for h in range(topo.nodes))
    assert np.trace(per_host) == pytest.approx(inside / 1e9)
    assert "host" in fig.layout.xaxis.title.text and "host" in fig.layout.yaxis.title.text
    assert "diagonal" in fig.layout.title.text and "log" in heat.colorbar.title.text
    assert np.isnan(np.array(heat.z, dtype=float)).any()  # hosts that never talk: empty cells


# ---- the rendered SVG -------------------------------------------------------------------------


def _translate(el) -> tuple[float, float]:
    m = re.search(r"translate\(([-\d.e]+)[ ,]*([-\d.e]*)\)", el.get("transform", ""))
    return (float(m[1]), float(m[2] or 0)) if m else (0.0, 0.0)


def svg_text_boxes(svg: str, em: float = 0.52) -> list[tuple[tuple, str]]:
    """Pixel boxes of the text a browser drew: annotations as measured (their background box),
    every other ``<text>`` from its anchor point, font size and characters."""
    root = ET.fromstring(svg)
    out = []

    def walk(el, dx: float, dy: float, in_note: bool) -> None:
        tx, ty = _translate(el)
        dx, dy = dx + tx, dy + ty
        tag = el.tag.split("}")[-1]
        cls = el.get("class", "")
        if "annotation-text-g" in cls:
            in_note = True
            rect = next((r for r in el.iter() if r.get("class") == "bg"), None)
            inner = next((g for g in el if "cursor" in g.get("class", "")), el)
            ix, iy = _translate(inner)
            text = "".join(t.text or "" for t in el.iter() if t.tag.endswith("text"))
            if rect is not None and text.strip() and float(rect.get("width", 0)) > 0:
                x0, y0 = dx + ix + float(rect.get("x")), dy + iy + float(rect.get("y"))
                w, h = float(rect.get("width")), float(rect.get("height"))
                out.append(((x0 + 1, y0 + 1, x0 + w - 1, y0 + h - 1), text))
        if tag == "text" and not in_note and (el.text or "").strip():
            size = float(re.search(r"font-size: ([\d.]+)px", el.get("style", ""))[1])
            x, y = dx + float(el.get("x", 0)), dy + float(el.get("y", 0))
            w = len(el.text.strip()) * size * em
            anchor = el.get("text-anchor", "start")
            left = {"middle": x - w / 2, "end": x - w}.get(anchor, x)
            out.append(((left, y - 0.75 * size, left + w, y + 0.2 * size), el.text.strip()))
        for child in el:
            walk(child, dx, dy, in_note)

    walk(root, 0.0, 0.0, False)
    return out


@pytest.fixture(scope="module")
def render():
    """SVG of a figure at the width it is laid out for (skipped without kaleido/chromium)."""
    kaleido = pytest.importorskip("kaleido")
    import warnings

    import plotly.graph_objects as go
    import plotly.io as pio

    def svg(fig) -> str:
        with warnings.catch_warnings():  # "kopts ignored with a server": nothing asked
            warnings.simplefilter("ignore", UserWarning)
            return pio.to_image(
                fig, format="svg", width=DEFAULT_WIDTH_PX, height=fig.layout.height
            ).decode()

    try:
        kaleido.start_sync_server(silence_warnings=True)  # one browser for every render
        svg(go.Figure())
    except Exception as err:  # no browser here
        pytest.skip(f"kaleido cannot render: {err}")
    yield svg
    kaleido.stop_sync_server(silence_warnings=True)


def test_rendered_graph_and_topology_text_never_overlaps(case, render):
    graph, topo, plan = case
    for fig in (dag_figure(plan, graph), topology_figure(topo, plan)):
        boxes = svg_text_boxes(render(fig))
        assert len(boxes) > 10
        assert not _overlaps(boxes), _overlaps(boxes)[:5]


def test_rendered_sweep_legend_clear_of_the_axis_title(render):
    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=8, seq_length=256))
    sw = sweep_inter_bandwidth(graph, preset("dgx-a100:2"), [10e9, 100e9], labels=("taps",))
    fig = sweep_figure(sw, 200e9)
    names = {t.name for t in fig.data if t.name and t.showlegend is not False} | {"plan"}
    boxes = svg_text_boxes(render(fig))
    title = [
        ((x0 - 8, y0 - 8, x1 + 8, y1 + 8), t)  # with a clear gap around it
        for (x0, y0, x1, y1), t in boxes
        if t.startswith("inter-node bandwidth per host")
    ]
    legend = [b for b in boxes if b[1] in names]
    assert title and len(legend) >= 3 and not _overlaps(title + legend)


@given(st.lists(st.floats(min_value=-3.0, max_value=3.0), max_size=25),
       st.floats(min_value=0.01, max_value=1.0))
def test_change_marks_on_one_row_never_touch(xs, gap):
    """The sweep's numbered change marks: marks sharing a row are at least the gap apart, and
    a row is opened only when every row above has a mark too close."""
    rows = mark_rows(xs, gap)
    assert len(rows) == len(xs)
    for r in set(rows):
        on_row = sorted(x for x, q in zip(xs, rows) if q == r)
        assert all(b - a >= gap for a, b in itertools.pairwise(on_row))
    for x, r in zip(xs, rows):  # every row above holds a mark just left of it, too close
        assert all(any(q == above and 0 <= x - y < gap for y, q in zip(xs, rows))
                   for above in range(r))
    assert mark_rows([0.0, 1.0, 2.0], 0.5) == [0, 0, 0]
    assert mark_rows([0.0, 0.1, 0.2, 0.6], 0.5) == [0, 1, 2, 0]
