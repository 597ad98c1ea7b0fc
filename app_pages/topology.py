"""Topology: the cluster drawn as you plan on it. Click a link or a device on the drawing to
select it, then change its bandwidth, cut it, or add a link from it; add hosts; build or load a
cluster; save it as JSON. What this page ends with is the cluster every other page plans on."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from dashboard import cache, state
from dashboard.bounds import check_json_text, check_topology
from dashboard.state import CUSTOM, GPUS, BuildSpec, active_edits, topology_url
from dashboard.topology_view import topology_figure
from dashboard.widgets import current, need_topology, show_chart
from taps_core.cluster.edits import ADD_HOST, LINK_KINDS, LinkEdit, edits_text, with_edit
from taps_core.cluster.io import MAX_FILE_BYTES, dumps, loads

BUILD_KEYS = {  # form widget key -> BuildSpec field
    "b_nodes": "nodes",
    "b_gpus": "gpus",
    "b_intra": "intra",
    "b_intra_GBps": "intra_GBps",
    "b_intra_lat_us": "intra_lat_us",
    "b_nvlink_pairs_GBps": "nvlink_pairs_GBps",
    "b_pcie_GBps": "pcie_GBps",
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
    if f.size > MAX_FILE_BYTES:  # refused before reading
        ss["topo_upload_error"] = (
            f"topology file size must be <= {MAX_FILE_BYTES} bytes; got {f.size}"
        )
        return
    try:
        text = f.getvalue().decode("utf-8")
        check_json_text(text, "topology JSON")
        check_topology(loads(text))
    except (*cache.LOADER_ERRORS, UnicodeDecodeError) as err:
        ss["topo_upload_error"] = cache._message(err)
        return
    ss["topo_upload_error"] = None
    ss["topo_json"], ss["topo_custom"], ss["topo"] = text, "json", CUSTOM


def _set_edits(edits: tuple[LinkEdit, ...]) -> None:
    """Store edits of the current base and re-seed the links table."""
    ss = st.session_state
    ss["edits"], ss["edits_base"] = edits, topology_url(ss)
    ss["editor_gen"] += 1
    ss.pop("editor_seed", None)


def _reset_edits() -> None:
    _set_edits(())
    st.session_state.pop("topo_selected", None)


def build_section(current) -> None:
    """The build form, starting from the cluster planned now (re-seeded when it changes)."""
    ss = st.session_state
    if ss.get("b_seed") != current.name + str(current.nodes) + str(len(current.links)):
        spec = BuildSpec.from_topology(current)
        for key, field in BUILD_KEYS.items():
            ss[key] = getattr(spec, field)
        ss["b_seed"] = current.name + str(current.nodes) + str(len(current.links))
    r = state.BUILD_RANGES
    with (
        st.expander("Build your own cluster (starts from the one shown)", expanded=False),
        st.form("build_form", border=False),
    ):
        c = st.columns(4)
        c[0].number_input("Nodes", *r["nodes"], step=1, key="b_nodes")
        c[1].number_input("GPUs per node", *r["gpus"], step=1, key="b_gpus")
        c[2].selectbox("Inside a node", ("nvswitch", "pcie"), key="b_intra")
        c[3].selectbox("GPU", tuple(GPUS), key="b_gpu")
        c = st.columns(4)
        c[0].number_input(
            "Intra-node bandwidth (GB/s per GPU, each way)", *r["intra_GBps"], key="b_intra_GBps"
        )
        c[1].number_input("Intra-node latency (µs)", *r["intra_lat_us"], key="b_intra_lat_us")
        c[2].number_input(
            "NVLink bridge between GPU pairs (GB/s, PCIe only, 0 = none)",
            *r["nvlink_pairs_GBps"],
            key="b_nvlink_pairs_GBps",
        )
        c[3].number_input(
            "GPU to NIC over PCIe (GB/s, NVSwitch only)", *r["pcie_GBps"], key="b_pcie_GBps"
        )
        c = st.columns(4)
        c[0].number_input("NICs per node", *r["nics"], step=1, key="b_nics")
        c[1].number_input("Bandwidth per NIC (GB/s each way)", *r["nic_GBps"], key="b_nic_GBps")
        c[2].number_input("Inter-node latency (µs)", *r["net_lat_us"], key="b_net_lat_us")
        st.form_submit_button("Use this cluster", on_click=_use_build, type="primary")


def load_section() -> None:
    ss = st.session_state
    with st.expander("Load a topology JSON (taps-topology/1)"):
        st.file_uploader(
            f"Topology JSON (at most {MAX_FILE_BYTES // 2**20} MiB)",
            type=["json"],
            key="topo_file",
            on_change=_use_upload,
        )
        if ss.get("topo_upload_error"):
            st.error(ss["topo_upload_error"])


def selection_panel(topo, edits: tuple[LinkEdit, ...]) -> None:
    """Edit what was clicked on the drawing: a link (bandwidth, latency, cut, restore), a cut
    link (restore) or a device (add a link from it)."""
    ss = st.session_state
    sel = ss.get("topo_selected")
    links = {frozenset((k.src, k.dst)): k for k in topo.links}
    with st.container(border=True):
        if not sel:
            st.markdown("**Click a link's square or a device on the drawing to edit it.**")
            return
        pair = (sel[1], sel[2]) if len(sel) == 3 else None
        if sel[0] == "cut" and pair:
            st.markdown(f"**Cut link {pair[0]} – {pair[1]}**")
            if st.button("Restore this link", key="sel_restore_cut"):
                _set_edits(with_edit(edits, None, pair))
                ss.pop("topo_selected", None)
                st.rerun()
            return
        if sel[0] == "link" and pair and frozenset(pair) in links:
            k = links[frozenset(pair)]
            st.markdown(
                f"**Link {k.src} – {k.dst}** ({k.kind}): {k.bandwidth_Bps / 1e9:.4g} GB/s per "
                f"direction, latency {k.latency_s * 1e6:.3g} µs"
            )
            c = st.columns([2, 2, 1, 1, 1])
            bw = c[0].number_input(
                "New bandwidth (GB/s each way)",
                *state.RANGES["edit_GBps"],
                value=float(f"{k.bandwidth_Bps / 1e9:.6g}"),
                key=f"sel_bw_{k.src}_{k.dst}",
            )
            lat = c[1].number_input(
                "Latency (µs)",
                0.0,
                1e6,
                value=float(f"{k.latency_s * 1e6:.6g}"),
                key=f"sel_lat_{k.src}_{k.dst}",
            )
            if c[2].button("Apply", type="primary", key="sel_apply"):
                _set_edits(with_edit(edits, LinkEdit(k.src, k.dst, bw, lat), pair))
                st.rerun()
            if c[3].button("Cut link", key="sel_cut"):
                _set_edits(with_edit(edits, LinkEdit(k.src, k.dst, cut=True), pair))
                ss["topo_selected"] = ("cut", k.src, k.dst)
                st.rerun()
            if any(frozenset((e.src, e.dst)) == frozenset(pair) and not e.add for e in edits) and c[
                4
            ].button("Restore", key="sel_restore"):
                _set_edits(with_edit(edits, None, pair))
                st.rerun()
            return
        if sel[0] == "device":
            name = sel[1]
            mine = [k for k in topo.links if name in (k.src, k.dst)]
            st.markdown(
                f"**Device {name}**: "
                + ", ".join(
                    f"{k.dst if k.src == name else k.src} "
                    f"({k.kind}, {k.bandwidth_Bps / 1e9:.3g} GB/s)"
                    for k in mine
                )
            )
            others = [
                d.name
                for d in topo.devices
                if d.name != name and frozenset((name, d.name)) not in links
            ]
            c = st.columns([3, 2, 2, 1])
            dst = c[0].selectbox("Add a link to", others, key="sel_new_dst")
            kind = c[1].selectbox("Kind", LINK_KINDS, index=2, key="sel_new_kind")
            bw = c[2].number_input(
                "Bandwidth (GB/s)", *state.RANGES["edit_GBps"], value=25.0, key="sel_new_bw"
            )
            if c[3].button("Add link", key="sel_add") and dst:
                new = LinkEdit(name, dst, bw, None, add=True, kind=kind)
                _set_edits((*edits, new))
                st.rerun()
            return
        st.caption("The selection is not part of this cluster any more.")


def link_rows(topo_json: str, edits: tuple[LinkEdit, ...]) -> pd.DataFrame:
    """The base topology's links with ``edits`` shown in them (the table's starting values)."""
    topo = cache.topology(topo_json)
    by_pair = {frozenset((e.src, e.dst)): e for e in edits if not e.add}
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


def table_section(base_json: str) -> None:
    """Every link of the base cluster as an editable table (bulk edits)."""
    ss = st.session_state
    url = topology_url(ss)
    seed = ss.get("editor_seed")
    if seed is None or seed["base"] != url:
        if seed is not None:
            ss["editor_gen"] += 1
        seed = {"base": url, "edits": active_edits(ss)}
        ss["editor_seed"] = seed
    with st.expander("All links of the cluster as a table"):
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
    base_pairs = {frozenset((k.src, k.dst)) for k in cache.topology(base_json).links}
    current = active_edits(ss)
    outside = tuple(
        e
        for e in current
        if e.add or e.src == ADD_HOST or frozenset((e.src, e.dst)) not in base_pairs
    )
    inside = tuple(e for e in current if e not in outside)
    new = edits_from_table(base_json, table)
    if new != inside:
        ss["edits"], ss["edits_base"] = (*outside, *new), url
        st.rerun()


def main() -> None:
    ctx = current()
    ss = st.session_state
    st.title("Topology")
    st.caption(
        "Every page plans on the cluster drawn here. Click a link's square (labelled with its "
        "GB/s) or a device to select it; the sidebar's network slider rescales every link "
        "between hosts at once."
    )
    topo = need_topology(ctx)
    edits = active_edits(ss)
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
    edited = {frozenset((e.src, e.dst)) for e in edits if not e.cut and e.src != ADD_HOST}
    cut = tuple((e.src, e.dst) for e in edits if e.cut)
    fig = topology_figure(topo, plan, edited=edited, cut=cut, selected=ss.get("topo_selected"))
    event = show_chart(fig, "topology", on_select="rerun", selection_mode=("points",))
    points = (event or {}).get("selection", {}).get("points", []) if event else []
    picked = next((tuple(p["customdata"]) for p in points if p.get("customdata")), None)
    if picked and picked != ss.get("topo_selected"):
        ss["topo_selected"] = picked
        st.rerun()
    selection_panel(topo, edits)
    c = st.columns([1, 1, 1, 1, 2])
    c[0].metric("Hosts", topo.nodes)
    c[1].metric("GPUs per host", topo.gpus_per_node)
    c[2].metric("Links", len(topo.links))
    c[3].metric("GPU memory", f"{topo.gpu.memory_bytes / 2**30:.0f} GiB", help=topo.gpu.name)
    with c[4]:
        if st.button("Add a host (a copy of the last one)", key="add_host"):
            _set_edits((*edits, LinkEdit(ADD_HOST, "")))
            st.rerun()
        if edits and st.button("Reset all edits", key="reset_edits", on_click=_reset_edits):
            st.rerun()
    if edits:
        st.caption(f"{ctx.topo_label} · as in the URL: `{edits_text(edits)}`")
    if ss["topo_custom"] == "json" and ss["topo"] == CUSTOM:
        st.caption("An uploaded topology cannot travel in a URL: share the JSON file instead.")
    base = cache.resolve_topology(
        ss["topo"], int(ss["nodes"]), ss["topo_custom"], ss.get("topo_json"), ()
    )
    if base.json is not None:
        table_section(base.json)
    build_section(topo)
    load_section()
    name = topo.name + (" (edited)" if ctx.edited else "")
    text = dumps(replace(topo, name=name)) if ctx.edited else (ctx.topo_json or "")
    stem = topo.name.replace(":", "-") + ("-edited" if ctx.edited else "")
    st.download_button(
        "Download topology JSON",
        lambda: text,
        key="dl_topology",
        file_name=f"{stem}.json",
        mime="application/json",
        on_click="ignore",
    )


main()
