"""Where TAPS's gain over the volume-based plan comes from: the 85% claim and breakdowns."""

from __future__ import annotations

from benchmarks.plan_quality import Breakdown
from benchmarks.report_sections.inputs import RunResults
from benchmarks.report_sections.markdown import figure, pct, prose_sec, sec, table
from taps_core.plan.report import fmt_bytes

CLAIM = 0.85  # the paper's headline: up to 85% less communication than volume-based search


def _gain_levels(b: Breakdown) -> dict[str, float]:
    """Communication seconds by plan and mesh level in a breakdown."""
    out = {"taps_inter": 0.0, "taps_intra": 0.0, "volume_inter": 0.0, "volume_intra": 0.0}
    for c in b.categories:
        out[f"taps_{c['level']}"] += c["taps_s"]
        out[f"volume_{c['level']}"] += c["volume_s"]
    return out


def _model_split_across(words: str) -> bool:
    """Whether strategy words split a model (non-sample) dimension across nodes."""
    return any(
        part.endswith("across nodes") and not part.startswith(("batch ", "expert tokens "))
        for part in words.split(", ")
    )


def claim_paragraph(r: RunResults) -> list[str]:
    """Whether the paper's 85% is reached, and the mechanism, from the top breakdown."""
    q = r.quality
    assert q is not None
    real = q.stats["realistic"]
    mech = _mechanism(q.breakdowns[0]) if q.breakdowns else ""
    if real.get("at_least_85", 0):
        return [
            f"**The 85% claim holds on our engine**: the largest realistic reduction is "
            f"{pct(real['max'])} ({real['max_scenario']}) and "
            f"{real['at_least_85']} realistic scenarios reach 85%.{mech}",
            "",
        ]
    return [
        f"**Why not 85%.** The largest realistic reduction is {pct(real.get('max'))}. "
        "Both searches use the same strategy space, the same DP and the same compute costs; "
        "they differ only in how a byte is priced. Where the volume-optimal plan already keeps "
        "the heavy collectives inside nodes (small clusters, fast NICs, inference with the batch "
        f"split across nodes) there is little left to save.{mech}",
        "",
    ]


def _mechanism(b: Breakdown) -> str:
    """Sentences on the top scenario: seconds across nodes and the op that saves most."""
    lv = _gain_levels(b)
    vol = lv["volume_inter"] + lv["volume_intra"]
    top = b.ops[0]
    mech = (
        f" In the top scenario ({b.scenario}) the volume-based plan spends "
        f"{sec(lv['volume_inter'])} of its {sec(vol)} communicating across nodes, TAPS "
        f"{prose_sec(lv['taps_inter'])}; the op saving most is `{top['op']}` "
        f"(x{top['count']}): the volume-based plan runs it as *{top['volume_strategy']}*, "
        f"TAPS as *{top['taps_strategy']}*."
    )
    if _model_split_across(top["volume_strategy"]) and not _model_split_across(
        top["taps_strategy"]
    ):
        mech += (
            " Counted in bytes, splitting a tensor over more GPUs looks cheaper whichever "
            "link the bytes cross, so the volume model puts model dimensions across the NICs "
            "(per GPU 9-12x slower than NVLink on the DGX presets, ~190x on the ethernet "
            "lab); TAPS keeps them on NVLink and sends only batch-split work (or nothing) "
            "across nodes."
        )
    return mech


def breakdown_section(r: RunResults, b: Breakdown, tag: str) -> list[str]:
    """One scenario's gain by kind of communication, op and link kind, with its figures."""
    lv = _gain_levels(b)
    return [
        f"### Where the gain comes from: {b.scenario}",
        "",
        f"- TAPS plan: {b.taps_summary}.",
        f"- Volume-based plan: {b.volume_summary}.",
        f"- Communication across nodes: TAPS {prose_sec(lv['taps_inter'])}, volume-based "
        f"{prose_sec(lv['volume_inter'])}; inside nodes: TAPS {prose_sec(lv['taps_intra'])}, "
        f"volume-based {prose_sec(lv['volume_intra'])}.",
        "",
        "By kind of communication and mesh level (seconds per step, all ops):",
        "",
        _category_table(b),
        "",
        "By op, largest saving first (summed over layers; `L*.` is the same op in every layer):",
        "",
        _op_table(b),
        "",
        "By link kind (bytes all links of the kind carry per step, both directions; the "
        "busiest link of the kind and how long it is busy):",
        "",
        _link_table(b),
        "",
        figure(r.figures, f"gain_by_op{tag}", "Communication time per op, TAPS vs volume-based"),
        "",
        figure(r.figures, f"gain_by_link{tag}", "Traffic per link kind, TAPS vs volume-based"),
        "",
    ]


def _category_table(b: Breakdown) -> str:
    """Seconds per step by kind of communication and mesh level, both plans and the saving."""
    return table(
        ["communication", "level", "TAPS", "volume-based", "saved"],
        [
            [
                c["category"],
                "across nodes" if c["level"] == "inter" else "inside nodes",
                sec(c["taps_s"]),
                sec(c["volume_s"]),
                sec(c["saving_s"]),
            ]
            for c in b.categories
            if c["taps_s"] or c["volume_s"]
        ],
        "llrrr",
    )


def _op_table(b: Breakdown) -> str:
    """The ten op groups saving most communication (seconds per step) and their strategies."""
    return table(
        [
            "op",
            "count",
            "TAPS comm",
            "volume comm",
            "saved",
            "TAPS strategy",
            "volume strategy",
        ],
        [
            [
                g["op"],
                str(g["count"]),
                sec(g["taps_s"]),
                sec(g["volume_s"]),
                sec(g["saving_s"]),
                g["taps_strategy"],
                g["volume_strategy"],
            ]
            for g in b.ops[:10]
        ],
        "lrrrrll",
    )


def _link_table(b: Breakdown) -> str:
    """Bytes per step on each link kind, and its busiest link and busy seconds, both plans."""
    return table(
        [
            "link kind",
            "TAPS bytes",
            "volume bytes",
            "TAPS busiest link",
            "busy",
            "volume busiest link",
            "busy",
        ],
        [
            [
                k["kind"],
                fmt_bytes(k["taps_bytes"]),
                fmt_bytes(k["volume_bytes"]),
                f"`{k['taps_busiest_link']}`" if k["taps_busiest_link"] else "-",
                sec(k["taps_busiest_s"]),
                f"`{k['volume_busiest_link']}`" if k["volume_busiest_link"] else "-",
                sec(k["volume_busiest_s"]),
            ]
            for k in b.link_kinds
        ],
        "lrrlrlr",
    )
