"""Topology: build or load a cluster, draw it (with the plan's traffic), edit or cut links,
and save it as JSON. What this page ends with is the cluster every other page plans on."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import cache, state
from dashboard.state import CUSTOM, GPUS, BuildSpec, LinkEdit, active_edits, topology_url
from dashboard.topology_view import topology_figure
from dashboard.widgets import need_topology, show_chart
from taps_core.errors import TapsError
from taps_core.topology_io import MAX_FILE_BYTES, loads

BUILD_KEYS = {  # form widget key -> BuildSpec field
    "b_nodes": "nodes",
    "b_gpus": "gpus",
    "b_intra": "intra",
    "b_intra_GBps": "intra_GBps",
    "b_intra_lat_us": "intra_lat_us",
    "b_nvlink_pairs_GBps": "nvlink_pairs_GBps",
    "b_nics": "nics",
    "b_nic_GBps": "nic_GBps",
    "b_net_lat_us": "net_lat_us",
    "b_gpu": "gpu",
}
COLS = ("src", "dst", "kind", "bandwidth (GB/s)", "latency (µs)", "in use")


def _use_build() -> None:
    ss = st.session_state
    spec = BuildSpec(**{field: ss[key] for key, field in BUILD_KEYS.items()})
    ss["topo_custom"] = spec.text()
    ss["topo"] = CUSTOM


def _use_upload() -> None:
    ss = st.session_state
    f = ss.get("topo_file")
    if f is None:
        return
    data = f.getvalue()
    try:
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(
                f"topology file size must be <= {MAX_FILE_BYTES} bytes; got {len(data)}"
            )
        text = data.decode("utf-8", errors="replace")
        loads(text)
    except (TapsError, ValueError) as err:
        ss["topo_upload_error"] = str(err)
        return
    ss["topo_upload_error"] = None
    ss["topo_json"], ss["topo_custom"], ss["topo"] = text, "json", CUSTOM


def _reset_edits() -> None:
    ss = st.session_state
    ss["edits"] = ()
    ss["editor_gen"] += 1
    ss.pop("editor_seed", None)


def build_section() -> None:
    ss = st.session_state
    try:
        current = BuildSpec.parse(ss["topo_custom"]) if ss["topo_custom"] != "json" else BuildSpec()
    except TapsError:
        current = BuildSpec()
    for key, field in BUILD_KEYS.items():
        ss.setdefault(key, getattr(current, field))
    with (
        st.expander("Build your own cluster", expanded=ss["topo"] == CUSTOM),
        st.form("build_form", border=False),
    ):
        c = st.columns(4)
        c[0].number_input("Nodes", 1, state.MAX_NODES_UI, step=1, key="b_nodes")
        c[1].number_input("GPUs per node", 1, 16, step=1, key="b_gpus")
        c[2].selectbox(
            "Inside a node",
            ("nvswitch", "pcie"),
            key="b_intra",
            help="NVSwitch (every GPU on NVLink) or a PCIe switch",
        )
        c[3].selectbox("GPU", tuple(GPUS), key="b_gpu")
        c = st.columns(4)
        c[0].number_input(
            "Intra-node bandwidth (GB/s per GPU, each way)",
            0.1,
            5000.0,
            key="b_intra_GBps",
            help="NVLink to the NVSwitch, or PCIe to the switch",
        )
        c[1].number_input("Intra-node latency (µs)", 0.0, 1000.0, key="b_intra_lat_us")
        c[2].number_input(
            "NVLink bridge between GPU pairs (GB/s, PCIe only, 0 = none)",
            0.0,
            5000.0,
            key="b_nvlink_pairs_GBps",
        )
        c = st.columns(4)
        c[0].number_input("NICs per node", 1, 16, step=1, key="b_nics")
        c[1].number_input("Bandwidth per NIC (GB/s each way)", 0.01, 5000.0, key="b_nic_GBps")
        c[2].number_input("Inter-node latency (µs)", 0.0, 1000.0, key="b_net_lat_us")
        st.form_submit_button("Use this cluster", on_click=_use_build, type="primary")


def load_section() -> None:
    ss = st.session_state
    with st.expander("Load a topology JSON (taps-topology/1)"):
        st.file_uploader("Topology JSON", type=["json"], key="topo_file", on_change=_use_upload)
        if ss.get("topo_upload_error"):
            st.error(ss["topo_upload_error"])


def link_rows(topo_json: str, edits: tuple[LinkEdit, ...]) -> pd.DataFrame:
    """The base topology's links with ``edits`` shown in them (the editor's starting table)."""
    topo = cache.topology(topo_json)
    by_pair = {frozenset((e.src, e.dst)): e for e in edits}
    rows = []
    for k in topo.links:
        e = by_pair.get(frozenset((k.src, k.dst)))
        bw = k.bandwidth_Bps / 1e9
        lat = k.latency_s * 1e6
        if e is not None and not e.cut:
            bw = e.bandwidth_GBps if e.bandwidth_GBps is not None else bw
            lat = e.latency_us if e.latency_us is not None else lat
        rows.append((k.src, k.dst, k.kind, bw, lat, not (e is not None and e.cut)))
    return pd.DataFrame(rows, columns=list(COLS))


def edits_from_table(topo_json: str, table: pd.DataFrame) -> tuple[LinkEdit, ...]:
    """Edits that turn the base topology's links into the edited table."""
    topo = cache.topology(topo_json)
    out = []
    for k, (_, row) in zip(topo.links, table.iterrows()):
        if not bool(row["in use"]):
            out.append(LinkEdit(k.src, k.dst, cut=True))
            continue
        bw, lat = float(row["bandwidth (GB/s)"]), float(row["latency (µs)"])
        new_bw = bw if abs(bw * 1e9 - k.bandwidth_Bps) > 1e-9 * k.bandwidth_Bps else None
        new_lat = lat if abs(lat * 1e-6 - k.latency_s) > 1e-15 else None
        if new_bw is not None or new_lat is not None:
            out.append(LinkEdit(k.src, k.dst, new_bw, new_lat))
    return tuple(out)


def editor_section(base_json: str) -> None:
    ss = st.session_state
    url = topology_url(ss)
    seed = ss.get("editor_seed")
    if seed is None or seed["base"] != url:
        if seed is not None:
            ss["editor_gen"] += 1
        seed = {"base": url, "edits": active_edits(ss)}
        ss["editor_seed"] = seed
    st.subheader("Links")
    st.caption(
        "Edit a link's bandwidth or latency, or untick **in use** to cut it; the change "
        "applies at once to every page. Cuts that disconnect the cluster are refused."
    )
    table = st.data_editor(
        link_rows(base_json, seed["edits"]),
        key=f"link_editor_{ss['editor_gen']}",
        hide_index=True,
        width="stretch",
        height=320,
        disabled=["src", "dst", "kind"],
        column_config={
            "bandwidth (GB/s)": st.column_config.NumberColumn(min_value=0.001, format="%.4g"),
            "latency (µs)": st.column_config.NumberColumn(min_value=0.0, format="%.4g"),
        },
    )
    new = edits_from_table(base_json, table)
    if new != active_edits(ss):
        ss["edits"], ss["edits_base"] = new, url
        st.rerun()
    if active_edits(ss):
        st.caption(f"{len(active_edits(ss))} link edit(s): `{state.edits_text(ss['edits'])}`")
        st.button("Reset link edits", on_click=_reset_edits)


def main() -> None:
    ctx = state.current()
    ss = st.session_state
    st.title("Topology")
    st.caption(
        "Pick a preset in the sidebar, or build or load a cluster here. Every page plans "
        "on the cluster shown below."
    )
    build_section()
    load_section()
    topo = need_topology(ctx)
    overlay = st.toggle("Show the current plan's traffic on the links", key="topo_overlay")
    plan = None
    if overlay:
        if ctx.model_error:
            st.info(f"No traffic to show: {ctx.model_error}")
        else:
            with st.spinner("Searching the plan…"):
                plan = cache.plan(
                    ctx.workload, ctx.topo_json, ctx.mode, ctx.cost_model, ctx.memory_limit_bytes
                )
            if isinstance(plan, cache.Failure):
                st.info(f"No traffic to show: {plan.message}")
                plan = None
    show_chart(topology_figure(topo, plan), "topology")
    c = st.columns(4)
    c[0].metric("Hosts", topo.nodes)
    c[1].metric("GPUs per host", topo.gpus_per_node)
    c[2].metric("Links", len(topo.links))
    c[3].metric("GPU memory", f"{topo.gpu.memory_bytes / 2**30:.0f} GiB")
    c[3].caption(topo.gpu.name)
    if ss["topo_custom"] == "json" and ss["topo"] == CUSTOM:
        st.caption("An uploaded topology cannot travel in a URL: share the JSON file instead.")
    base_json, _, _ = cache.resolve_topology(
        ss["topo"], int(ss["nodes"]), ss["topo_custom"], ss.get("topo_json"), ()
    )
    if base_json is not None:
        editor_section(base_json)
    text = ctx.topo_json or ""
    st.download_button(
        "Download topology JSON",
        lambda: text,
        key="dl_topology",
        file_name=f"{topo.name.replace(':', '-')}.json",
        mime="application/json",
        on_click="ignore",
    )


main()
