"""How it works: why counting bytes picks the wrong plan, computed live on the chosen cluster."""

from __future__ import annotations

import streamlit as st

from dashboard import cache, state
from dashboard.charts import explain_figure
from dashboard.state import CUSTOM
from dashboard.widgets import current, need_topology, show_chart
from taps_core.cluster.io import dumps
from taps_core.cluster.presets import PRESETS
from taps_core.plan.report import fmt_bytes, fmt_seconds

INTRO = """
Intra-operator parallelism splits every operator of a model over the GPUs. Each split has a
price in **communication**: partial sums must be all-reduced, and a tensor laid out one way
must be regathered when the next operator wants it another way. A planner picks one strategy
per operator so that the total price is lowest. Most planners price communication by
**bytes moved**. TAPS prices it by **time on the real links**: a byte that crosses the
network between hosts costs 10–20× a byte over NVLink inside a host.
"""

HOW = """
**How the time is computed.** A ring all-reduce over *p* GPUs of an *S*-byte buffer makes
every GPU send 2(*p*−1)/*p* · *S* bytes in 2(*p*−1) steps. The planner lays every ring of a
pattern out as flows, routes them over the cluster graph (GPU → NVSwitch → GPU, or GPU → NIC →
network switch → NIC → GPU), adds up bytes per link over all groups running at once, and takes
time = max over links (bytes / effective bandwidth) + steps × latency. That is how contention
shows up: on a cluster with one NIC per host, eight GPUs' rings share that NIC.

**What the search does.** The plan's cost is a sum of per-operator costs (compute and the
collectives inside the operator) and per-edge costs (resharding between producer and consumer
layouts). TAPS minimises it exactly by dynamic programming over the operator graph, folding
repeated transformer layers so a 96-layer model costs about as much as a few layers.
"""


def main() -> None:
    ctx = current()
    ss = st.session_state
    st.title("How it works: bytes are not time")
    st.markdown(INTRO)
    topo = need_topology(ctx)
    topo_json, where = ctx.topo_json, f"**{ctx.topo_label}**"
    if topo.nodes < 2 and ss["topo"] != CUSTOM and ss["topo"] in PRESETS:
        from taps_core.cluster.presets import preset

        topo = preset(f"{ss['topo']}:2")
        topo_json = dumps(topo)
        where = f"**{topo.name}** (your cluster has one host, so a second one is added here)"
    size_gb = st.slider(
        "Buffer to all-reduce (GB)", *state.RANGES["explain_gb"], step=0.01, key="explain_gb"
    )
    cases = cache.explain(topo_json, size_gb * 1e9)
    if isinstance(cases, cache.Failure):
        st.info(f"The example needs two plans to exist on this cluster: {cases.message}")
        st.markdown(HOW)
        return
    a, b = cases
    st.markdown(f"Two ways to all-reduce a {fmt_bytes(size_gb * 1e9)} buffer on {where}:")
    c = st.columns(2)
    for col, case in zip(c, cases):
        with col.container(border=True):
            st.markdown(f"**Plan {case.name}**: {case.description}")
            m = st.columns(3)
            m[0].metric("Bytes sent per GPU", fmt_bytes(case.bytes_per_gpu))
            m[1].metric("Time", fmt_seconds(case.time_s))
            m[2].metric(
                "Volume model's cost",
                fmt_seconds(case.volume_s),
                help="Bytes at one fixed rate (100 GB/s), whatever link they cross",
            )
            src, dst, kind = case.bottleneck
            st.caption(
                f"Bottleneck: {src}→{dst} ({kind}); each GPU effectively gets "
                f"{case.per_gpu_Bps / 1e9:.3g} GB/s through it. Latency part "
                f"{fmt_seconds(case.latency_s)}, bandwidth part "
                f"{fmt_seconds(case.bandwidth_s)}."
            )
    show_chart(explain_figure(cases), "explain")
    by_bytes = "A" if a.bytes_per_gpu < b.bytes_per_gpu else "B"
    by_time = "A" if a.time_s < b.time_s else "B"
    slow, fast = (a, b) if a.time_s > b.time_s else (b, a)
    verdict = (
        f"A volume cost model prefers **plan {by_bytes}** (fewer bytes per GPU). "
        f"Measured in time on this cluster, **plan {by_time}** wins: plan {slow.name} "
        f"takes {slow.time_s / fast.time_s:.1f}× as long."
    )
    if by_bytes != by_time:
        st.success(
            verdict + " Every planner decision that places a split inside a host or "
            "across hosts is this decision; TAPS makes it with time."
        )
    else:
        st.info(verdict + " On this cluster bytes and time agree for this example.")
    st.markdown(HOW)


main()
