"""Streamlit widgets shared by pages: the sidebar that builds the :class:`Context`, chart
display with PNG/SVG export, and small helpers that turn failures into messages."""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from dashboard import cache, state
from dashboard.bounds import check_json_text
from dashboard.charts import chart_config
from dashboard.exports import WHAT
from dashboard.state import (
    COST_MODELS,
    CUSTOM,
    DTYPES,
    IMAGE_FORMATS,
    MAX_NODES_UI,
    MODES,
    NET_STEPS,
    TOPOLOGY_SOURCES,
    UPLOADED,
    Context,
    active_edits,
    active_net,
    model_defaults,
    topology_url,
)
from taps_core.cluster.topology import node_inter_bandwidth
from taps_core.errors import TapsError
from taps_core.models import sample_names
from taps_core.models.config import MAX_CONFIG_BYTES
from taps_core.plan.records import Plan

GiB = 2**30
COST_LABELS = {"topology": "topology-aware (TAPS)", "volume": "volume (bytes only)"}
MODE_LABELS = {"train": "training", "infer": "inference"}


def _on_model_change() -> None:
    ss = st.session_state
    with contextlib.suppress(*cache.LOADER_ERRORS):  # the page shows the model error
        ss.update(model_defaults(ss["model"], ss.get("model_upload")))


def _on_upload() -> None:
    ss = st.session_state
    f = ss.get("model_file")
    if f is None:
        return
    if f.size > MAX_CONFIG_BYTES:  # refused before reading
        ss["upload_error"] = f"config.json size must be <= {MAX_CONFIG_BYTES} bytes; got {f.size}"
        return
    try:
        text = f.getvalue().decode("utf-8")
        check_json_text(text, "config.json")
        json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        first = (str(err).splitlines() or [""])[0]
        ss["upload_error"] = f"config.json must be valid UTF-8 JSON; {first}"
        return
    except TapsError as err:
        ss["upload_error"] = str(err)
        return
    ss["upload_error"] = None
    ss["model_upload"] = {"name": f.name.rsplit(".", 1)[0] or "uploaded", "text": text}
    ss["model"] = UPLOADED
    _on_model_change()


def sidebar() -> Context:
    """Draw the shared settings and return them as a Context (errors kept, not raised)."""
    ss = st.session_state
    sb = st.sidebar
    sb.header("Workload")
    models = [*sample_names(), UPLOADED]
    sb.selectbox(
        "Model",
        models,
        key="model",
        on_change=_on_model_change,
        help="A bundled sample, or an uploaded Hugging Face config.json",
    )
    with sb.expander("Upload a config.json", expanded=ss["model"] == UPLOADED):
        st.file_uploader(
            "HF config.json (JSON, at most 1 MiB)",
            type=["json"],
            key="model_file",
            on_change=_on_upload,
        )
        if ss.get("upload_error"):
            st.error(ss["upload_error"])
    c1, c2 = sb.columns(2)
    c1.number_input("Batch size", *state.RANGES["batch"], step=1, key="batch")
    if ss.get("model_has_seq", True):
        c2.number_input("Sequence length", *state.RANGES["seq"], step=64, key="seq")
    else:
        c2.caption("Images: no sequence length")
    c1, c2 = sb.columns(2)
    c1.selectbox("dtype", DTYPES, key="dtype")
    c2.radio("Mode", MODES, key="mode", format_func=MODE_LABELS.__getitem__, horizontal=True)
    sb.header("Cluster")
    c1, c2 = sb.columns([3, 2])
    c1.selectbox(
        "Topology",
        TOPOLOGY_SOURCES,
        key="topo",
        format_func=lambda s: "custom (Topology page)" if s == CUSTOM else s,
        help="A preset, or the cluster built or loaded on the Topology page",
    )
    c2.number_input(
        "Nodes",
        min_value=1,
        max_value=MAX_NODES_UI,
        step=1,
        key="nodes",
        disabled=ss["topo"] == CUSTOM,
    )
    _network_slider(sb, ss)
    sb.header("Search")
    sb.radio(
        "Cost model",
        COST_MODELS,
        key="cost",
        format_func=COST_LABELS.__getitem__,
        help="What the search minimises. Plans are always reported with the topology-aware model.",
    )
    sb.number_input(
        "Memory limit per GPU (GiB, 0 = the GPU's memory)",
        *state.RANGES["mem_gib"],
        step=8.0,
        key="mem_gib",
    )
    sb.header("Export")
    sb.radio(
        "Chart camera button saves",
        IMAGE_FORMATS,
        key="img_format",
        horizontal=True,
        format_func=str.upper,
        help="Each chart's camera icon downloads this format",
    )
    ctx = _context(ss)
    if ctx.topo_json is not None:  # what is planned, not what the preset promises
        sb.caption(describe_cluster(cache.topology(ctx.topo_json), edited=ctx.edited))
    return ctx


def _network_slider(sb: Any, ss: Any) -> None:
    """One control for the network between hosts, whatever the cluster (0 = as built)."""
    base = cache.resolve_topology(*_base_args(ss)[:4], _edits(ss))
    if base.json is None or cache.topology(base.json).nodes < 2:
        return
    own = round(node_inter_bandwidth(cache.topology(base.json)) / 1e9, 6)
    url = topology_url(ss)
    if ss.get("net_for") != url:  # another cluster: start from its own bandwidth
        ss["net_for"], ss["net_GBps"] = url, own
    value = float(ss.get("net_GBps") or own)
    ss["net_GBps"] = value
    sb.select_slider(
        "Network between hosts (GB/s per host)",
        sorted({*NET_STEPS, own, value}),
        key="net_GBps",
        format_func=lambda v: f"{v:g}" + (" (as built)" if v == own else ""),
        help="Scales every network link so one host's NICs add up to this; "
        "relative NIC speeds, NVLink and PCIe stay as they are",
    )
    ss["net_base"] = "" if ss["net_GBps"] == own else url  # as built: nothing to apply


def _edits(ss: Any) -> tuple[str, ...]:
    return tuple(e.text() for e in active_edits(ss))


def describe_cluster(topo: Any, *, edited: bool) -> str:
    """The cluster actually planned, in one line (hosts, GPUs, links inside and between)."""
    kinds = {d.name: d.kind for d in topo.devices}
    host0 = {d.name for d in topo.devices if d.host == 0}
    inside = sorted(
        {
            f"{k.kind} {k.bandwidth_Bps / 1e9:.3g} GB/s"
            for k in topo.links
            if k.src in host0 and kinds.get(k.src) == "gpu" and k.kind != "network"
        }
    )
    per_host: dict[int, list[float]] = {}
    hosts = {d.name: d.host for d in topo.devices}
    for k in topo.links:
        if k.kind == "network":
            h = hosts.get(k.src) if hosts.get(k.src) is not None else hosts.get(k.dst)
            if h is not None:
                per_host.setdefault(h, []).append(k.bandwidth_Bps / 1e9)
    text = f"**Planned:** {topo.nodes} host(s) × {topo.gpus_per_node} {topo.gpu.name}"
    if inside:
        text += f"; inside a host {', '.join(inside[:2])}"
    if per_host:
        totals = sorted(sum(v) for v in per_host.values())
        nics = sorted(len(v) for v in per_host.values())
        rng = f"{totals[0]:.3g}" if totals[0] == totals[-1] else f"{totals[0]:.3g}–{totals[-1]:.3g}"
        text += f"; between hosts {nics[-1]} NIC(s), {rng} GB/s per host"
    return text + (" · **edited**" if edited else "")


def _context(ss: Any) -> Context:
    upload = ss.get("model_upload")
    model_error = None
    if ss["model"] == UPLOADED:
        if upload:
            model, text = upload["name"], upload["text"]
        else:
            model, text = UPLOADED, None
            model_error = "model: upload a config.json in the sidebar (or pick a sample)"
    else:
        model, text = ss["model"], None
    res = cache.resolve_topology(
        ss["topo"],
        int(ss["nodes"]),
        ss["topo_custom"],
        ss.get("topo_json"),
        _edits(ss),
        active_net(ss),
    )
    topo_json, label, errors = res.json, res.label, res.messages
    ctx = Context(
        model=model,
        model_text=text,
        batch=int(ss["batch"]),
        seq=int(ss["seq"]),
        dtype=ss["dtype"],
        mode=ss["mode"],
        cost_model=ss["cost"],
        memory_limit_bytes=float(ss["mem_gib"]) * GiB if ss["mem_gib"] > 0 else None,
        topo_json=topo_json,
        topo_label=label,
        topo_url=topology_url(ss),
        model_error=model_error,
        topology_error=errors[0] if topo_json is None else None,
        edit_errors=errors if topo_json is not None else (),
        topo_name=res.name,
        edited=res.edited,
    )
    if model_error is None:
        g = cache.graph_or_failure(ctx.workload)
        if isinstance(g, cache.Failure):
            ctx = replace(ctx, model_error=g.message)
    return ctx


# ---- page helpers ------------------------------------------------------------------------------


def titled(fig: go.Figure, ctx: Context | None = None) -> go.Figure:
    """Add what the chart shows (model, cluster + edited, mode, batch) under its title."""
    ctx = ctx or st.session_state.get("_ctx")
    title = fig.layout.title.text or ""
    if ctx is not None and ctx.tag not in title:
        fig.update_layout(
            title_text=f"{title}<br><span style='font-size:13px;color:#4b5563'>{ctx.tag}</span>"
        )
        fig.update_layout(margin_t=max(fig.layout.margin.t or 0, 125))
    return fig


def show_chart(fig: go.Figure, key: str, **kwargs: Any) -> Any:
    """Draw a figure titled with the context, exported as ``<model>_<cluster>_<mode>_<key>``.

    Extra keyword arguments go to ``st.plotly_chart`` (e.g. selection events).
    """
    ctx = st.session_state.get("_ctx")
    titled(fig, ctx)
    stem = ctx.file_stem(key) if ctx is not None else key
    return st.plotly_chart(
        fig,
        theme=None,
        key=key,
        config=chart_config(st.session_state.get("img_format", "png"), stem),
        **kwargs,
    )


def need_model(ctx: Context) -> Any:
    """The operator graph, or show the model error and stop the page."""
    if ctx.model_error:
        st.error(ctx.model_error)
        st.stop()
    return cache.graph(*ctx.workload)


def need_topology(ctx: Context) -> Any:
    """The topology, or show the topology error and stop the page."""
    for msg in ctx.edit_errors:
        st.warning(msg)
    if ctx.topo_json is None:
        st.error(ctx.topology_error or "topology: invalid")
        st.stop()
    return cache.topology(ctx.topo_json)


def plan_args(ctx: Context, prove_stages: bool = False) -> tuple[Any, ...]:
    """The arguments of :func:`dashboard.cache.plan` for the sidebar settings: what the plan,
    and every view drawn from it alone, depends on."""
    return (ctx.workload, ctx.topo_json, ctx.mode, ctx.cost_model, ctx.memory_limit_bytes,
            prove_stages)


def need_plan(ctx: Context, prove_stages: bool = False) -> Plan:
    """The plan for the sidebar settings (spinner on a first search), or an error and stop;
    ``prove_stages`` also bounds every pipeline shape (the same plan, a stronger claim)."""
    need_model(ctx)
    need_topology(ctx)
    what = "Bounding every pipeline shape" if prove_stages else "Searching plans"
    args = plan_args(ctx, prove_stages)
    preview = st.empty()
    if ctx.cost_model == "topology" and not cache.plan_ready(*args):
        with preview.container():
            framework_preview(ctx)
    with st.spinner(f"{what} for {ctx.model} on {ctx.topo_label}…"):
        plan = cache.plan(*args)
    preview.empty()
    if isinstance(plan, cache.Failure):
        message = plan.message
        if ctx.mode == "infer":  # the engine's hint lists inference among the remedies
            message = message.replace(" or inference", "").replace(", inference", "")
        st.error(message)
        st.stop()
    return plan


def framework_preview(ctx: Context) -> None:
    """While TAPS searches: the fastest configuration Megatron-LM or DeepSpeed would run (the
    exhaustive search TAPS starts from, seconds at most), marked as a preview that the plan
    replaces. Draws nothing when the model has no framework space or nothing fits."""
    from dashboard.charts import fmt_gib, memory_figure
    from taps_core.plan.report import describe, fmt_seconds
    from taps_core.search.configs import configuration_in

    seed = cache.framework_plan(ctx.workload, ctx.topo_json, ctx.mode, ctx.memory_limit_bytes)
    if seed is None:
        return
    named = configuration_in(seed.search.note)
    config = f"`{named}`, " if named else ""
    with st.container(border=True):
        st.markdown(
            f"**Preview while TAPS searches:** the fastest configuration Megatron-LM or "
            f"DeepSpeed would run, found exhaustively: {config}step "
            f"**{fmt_seconds(seed.total_time_s)}**, {fmt_gib(seed.memory.total)} per GPU "
            f"({describe(seed)}). TAPS's plan is never slower; it replaces this box when its "
            "search is done."
        )
        show_chart(memory_figure(seed), "preview_memory")


def why_this_plan(ctx: Context, plan: Plan) -> None:
    """Warnings and the decisions that matter, each priced against its runner-up."""
    from taps_core.studies.explain import edit_words, replication_warning
    from taps_core.studies.sweep import reprice

    st.markdown("#### Why this plan")
    if plan.pipeline is not None:
        pipeline_words(plan)
    warning = replication_warning(plan) if plan.pipeline is None else None
    if warning:
        st.warning(warning)
    if ctx.edited:
        res = cache.resolve_topology(*_base_args(st.session_state))
        if res.json is not None:
            base = cache.plan(
                ctx.workload, res.json, ctx.mode, ctx.cost_model, ctx.memory_limit_bytes
            )
            if isinstance(base, Plan):
                here = reprice(base, need_model(ctx), cache.topology(ctx.topo_json))
                st.info(edit_words(plan, base, unedited_here=here))
    with st.spinner("Pricing each decision against its runner-up (one bounded search each)…"):
        found = cache.why(
            ctx.workload, ctx.topo_json, ctx.mode, ctx.cost_model, ctx.memory_limit_bytes
        )
    if isinstance(found, cache.Failure):
        st.caption(f"Decisions unavailable: {found.message}")
        return
    if not found:
        st.caption("One GPU: there is nothing to split.")
    for d in found:
        st.markdown(f"- {d.words}")
    if plan.pipeline is not None:  # after the list: the search note is in the box above it
        st.caption(
            "Decisions priced against runner-ups are shown for plans without pipeline stages; "
            "the stage plans' own choices are in the graph and table below."
        )


def _base_args(ss: Any) -> tuple:
    """resolve_topology arguments of the current cluster without edits or bandwidth change."""
    return (ss["topo"], int(ss["nodes"]), ss["topo_custom"], ss.get("topo_json"), ())


def context_caption(ctx: Context) -> None:
    """One line saying what the page shows."""
    st.caption(
        f"**{ctx.model}** · batch {ctx.batch} · seq {ctx.seq} · {ctx.dtype} · "
        f"{MODE_LABELS[ctx.mode]} · on **{ctx.topo_label}** · "
        f"search cost model: {COST_LABELS[ctx.cost_model]}"
    )


def page_url() -> str:
    """The URL that reproduces this view (the browser's address; a placeholder host in tests)."""
    from urllib.parse import urlencode

    base = (getattr(st.context, "url", None) or "http://localhost:8501/").split("?")[0]
    return f"{base}?{urlencode(dict(st.query_params))}"


def op_table(rows: list[dict], *, extra: tuple[str, ...] = ()) -> None:
    """The per-op table, narrow enough for the page (the compact strategy label is in the
    graph's hover and the JSON; the words say the same)."""
    order = ["op", "kind", "layer", "stage", "× layers", *extra, "in words", "sharding"]
    order += ["ZeRO", "recompute", "compute (ms)", "comm (ms)", "comm (MB)"]
    number = st.column_config.NumberColumn
    st.dataframe(
        rows,
        hide_index=True,
        width="stretch",
        column_order=[c for c in order if not rows or c in rows[0]],
        column_config={
            "op": st.column_config.TextColumn(width="medium"),
            "kind": st.column_config.TextColumn(width="small"),
            "layer": st.column_config.TextColumn(width="small"),
            "× layers": number(width="small"),
            "in words": st.column_config.TextColumn(width="large"),
            "sharding": st.column_config.TextColumn(width="medium"),
            "stage": st.column_config.TextColumn(width="small", help="Pipeline stage"),
            "ZeRO": number(
                width="small",
                help="ZeRO stage of the op's weights: 1 optimizer state, 2 + gradients, "
                "3 + parameters sharded over the GPUs that hold copies",
            ),
            "recompute": st.column_config.TextColumn(
                width="small", help="full: the op's layer runs its forward again in backward; "
                "selective: only its attention core does (no attention scores kept)"
            ),
            "compute (ms)": number(format="%.4g", width="small"),
            "comm (ms)": number(format="%.4g", width="small"),
            "comm (MB)": number(format="%.4g", width="small"),
        },
    )


def pipeline_words(plan: Plan) -> None:
    """Why a pipelined plan looks the way it does, from its PipelineInfo (the search note is
    the Plan page's info box, just above).

    The engine's decision pricing and its hosts-repeat-work warning read a plan without
    stages (each stage's ops run on the stage's own hosts), so they are not shown here.
    """
    from taps_core.plan.report import fmt_bytes, fmt_seconds

    pi = plan.pipeline
    assert pi is not None
    p = len(pi.stages)
    hosts = sorted({len(s.hosts) for s in pi.stages})
    per = f"{hosts[0]} host{'s' if hosts[0] > 1 else ''}" if len(hosts) == 1 else "hosts"
    slowest = max(pi.stages, key=lambda s: s.microbatch_s)
    st.markdown(
        f"- **{p} pipeline stages across hosts** ({per} each), the batch of "
        f"{plan.workload.get('batch_size', '?')} as **{pi.microbatches} micro-batches** of "
        f"{pi.micro_batch_size} under {pi.schedule}. Between stages only the boundary "
        f"activation and its gradient move, point to point: {fmt_bytes(pi.p2p_bytes)} per step."
    )
    st.markdown(
        f"- The slowest stage sets the pace: stage {slowest.index} takes "
        f"{fmt_seconds(slowest.microbatch_s)} per micro-batch; fill and drain leave "
        f"{fmt_seconds(pi.bubble_time_s)} idle (bubble {100 * pi.bubble_fraction:.0f}% of the "
        "pipelined part of the step)."
    )


def export_buttons(files: Any, stem: Any, *, key: str, label: str = "") -> dict[str, str]:
    """One download button per framework (or the one-line reason it cannot run the plan,
    as an info box), their notes in an expander. ``stem(part)`` names a file without its
    extension; returns ``{format: file name}`` of the files offered."""
    if isinstance(files, cache.Failure):
        st.info(f"No export: {files.message}")
        return {}
    names: dict[str, str] = {}
    cols = st.columns(len(files))
    for col, f in zip(cols, files):
        name = f"{stem(f.part)}.{f.ext}"
        if f.text is None:
            col.info(f.reason)
            continue
        names[f.fmt] = name
        col.download_button(
            f"{label}{f.framework} {WHAT.get(f.fmt, 'export')} (.{f.ext})",
            f.text,
            file_name=name,
            mime=f.mime,
            on_click="ignore",
            key=f"{key}_{f.fmt}",
            help=f"{name}: " + "; ".join(f.notes[:1]),
        )
    notes = [(f.framework, n) for f in files if f.text is not None for n in f.notes]
    if notes:
        with st.expander(
            "Export notes (what each framework is told, and what it does differently)"
        ):
            for framework, note in notes:
                st.markdown(f"- **{framework}**: {note}")
    return names


def current() -> Context:
    """The context the sidebar built on this run (``app.py`` sets it before the page runs)."""
    ctx = st.session_state.get("_ctx")
    if ctx is None:  # a page run on its own: build the frame first
        state.init_session()
        ctx = sidebar()
    return ctx
