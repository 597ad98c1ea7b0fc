"""A self-contained HTML report of a plan: headline figures, charts and tables in one file.

plotly.js is embedded once (``include_plotlyjs=True`` on the first chart), so the report opens
offline; no CDN is referenced.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import plotly.graph_objects as go
import plotly.io as pio

from dashboard.charts import fmt_gib
from dashboard.links_view import busiest_link_groups, devices_of
from taps_core.cluster.topology import Topology
from taps_core.plan.claims import search_status
from taps_core.plan.records import Plan
from taps_core.plan.report import describe, fmt_bytes, fmt_seconds


def busiest_link_rows(plan: Plan, top: int | None = None) -> list[dict[str, object]]:
    """Table rows (GB/s, GB, ms) of the plan's links, busiest first; ``top`` limits them."""
    ranked = sorted(plan.links, key=lambda k: -k.busy_time_s)
    return [
        {
            "src": k.src,
            "dst": k.dst,
            "kind": k.kind,
            "bandwidth (GB/s)": k.bandwidth_Bps / 1e9,
            "bytes (GB)": k.bytes / 1e9,
            "busy (ms)": k.busy_time_s * 1e3,
        }
        for k in ranked[:top]
    ]


GiB = 2**30
CSS = """
body { font-family: Inter, Helvetica, Arial, sans-serif; margin: 2rem auto; max-width: 1200px;
       color: #1f2937; font-size: 15px; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 13px; }
th, td { border: 1px solid #d1d5db; padding: 4px 8px; text-align: left; }
th { background: #f3f4f6; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.chart { margin: 1rem 0 2rem; }
"""


def _table(rows: Sequence[dict], limit: int | None = None) -> str:
    rows = list(rows)[:limit] if limit else list(rows)
    if not rows:
        return "<p>(none)</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = []
    for row in rows:
        cells = []
        for v in row.values():
            if isinstance(v, float):
                cells.append(f'<td class="num">{v:.4g}</td>')
            else:
                cells.append(f"<td>{html.escape(str(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def html_report(
    plan: Plan,
    figures: Sequence[go.Figure],
    *,
    rows: Sequence[dict] = (),
    url: str = "",
    cluster: str | None = None,
    topology: Topology | None = None,
) -> str:
    """The report as one HTML string (a few MB: plotly.js is inside); ``cluster`` names the
    cluster with its edits by value (default: the plan's topology name). With the plan's
    ``topology``, links of the same load are one row of the busiest links (how many, where),
    as on the Links page, so the table stays short at many hosts."""
    headline = [
        {"figure": "step time", "value": fmt_seconds(plan.total_time_s)},
        {"figure": "communication time", "value": fmt_seconds(plan.comm_time_s)},
        {"figure": "compute time", "value": fmt_seconds(plan.compute_time_s)},
        {"figure": "intra-node bytes", "value": fmt_bytes(plan.intra_node_bytes)},
        {"figure": "inter-node bytes", "value": fmt_bytes(plan.inter_node_bytes)},
        {
            "figure": "memory per device",
            "value": f"{fmt_gib(plan.memory.total)} of {fmt_gib(plan.memory_limit_bytes)}",
        },
        {
            "figure": "search",
            "value": f"{search_status(plan)} ({plan.search.algorithm}, "
            f"{fmt_seconds(plan.search.time_s)})",
        },
    ]
    pi = plan.pipeline
    if pi is not None:
        headline.append(
            {
                "figure": "pipeline",
                "value": f"{len(pi.stages)} stages × {pi.microbatches} micro-batches of "
                f"{pi.micro_batch_size} ({pi.schedule}), bubble {100 * pi.bubble_fraction:.0f}% "
                f"({fmt_seconds(pi.bubble_time_s)}), {fmt_bytes(pi.p2p_bytes)} between stages",
            }
        )
    links = (busiest_link_rows(plan) if topology is None
             else busiest_link_groups(plan, devices_of(topology)))
    charts = []
    for i, fig in enumerate(figures):
        charts.append(
            '<div class="chart">'
            + pio.to_html(
                fig, include_plotlyjs=(i == 0), full_html=False, config={"displaylogo": False}
            )
            + "</div>"
        )
    title = (
        f"TAPS plan: {plan.model_name} on {cluster or plan.topology_name} "
        f"({plan.nodes}×{plan.gpus_per_node} GPUs, {plan.mode})"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{CSS}</style></head><body>
<h1>{html.escape(title)}</h1>
<p><b>Plan:</b> {html.escape(describe(plan))}</p>
<p>Searched with the {html.escape(plan.cost_model)} cost model; all figures use the
topology-aware link model.</p>
{f'<p>View: <a href="{html.escape(url)}">{html.escape(url)}</a></p>' if url else ""}
{_table(headline)}
{"".join(charts)}
<h2>Per-op strategies</h2>
{_table(rows)}
<h2>Busiest links</h2>
{_table(links, limit=40)}
</body></html>
"""
