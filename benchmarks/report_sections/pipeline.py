"""The pipelining section: the best plan with pipeline stages against the best without."""

from __future__ import annotations

from benchmarks.pipelining import PipelineRow
from benchmarks.report_sections.inputs import RunResults
from benchmarks.report_sections.markdown import pct, sec, table


def pipeline_section(r: RunResults) -> list[str]:
    """Where pipeline stages win and where TAPS's plans without stages are enough."""
    rows = r.pipelining or []
    out = [
        "## Pipelining: where stages across hosts win",
        "",
        "Each scenario is planned twice on the same workload and memory limit: the exact TAPS "
        "search without stages, and the pipeline search (layers cut into stages on groups of "
        "hosts, micro-batches under 1F1B, the TAPS search inside each stage, point-to-point "
        "sends routed over the real links; `taps_core.search.pipeline`). \"Across hosts\" says "
        "whether "
        "a layer splits heads, hidden or FFN across hosts. The planner's `search` keeps the "
        "faster of the two.",
        "",
    ]
    out += [
        table(
            ["scenario", "no stages: step", "across hosts", "pipeline: step", "across hosts",
             "faster", "search s (flat / pipeline)"],
            [_pipeline_cells(x) for x in rows],
            "lllllll",
        ),
        "",
        "Pipelining wins where the plan without stages must spread each layer's weights or "
        "activations over slow links (many hosts, Ethernet, memory-bound training): stages "
        "send only the boundary activation between hosts and keep tensor splits inside a host. "
        "Where a model fits a host or the network is fast, TAPS's plans without stages are "
        "enough (no bubble, no idle stage). The outer pipeline search is a guided enumeration "
        "(most stages first, micro-batch counts until the step stops improving); each stage's "
        "plan is the exact TAPS search for that stage.",
        "",
    ]
    return out


def _yes_no(x: bool | None) -> str:
    """Whether a plan splits a layer across hosts, as yes / no (n/a without a plan)."""
    return "n/a" if x is None else ("yes" if x else "no")


def _pipeline_cells(x: PipelineRow) -> list[str]:
    """One scenario: step seconds without and with stages, the stage shape, search seconds."""
    return [
        f"{x.model} on {x.cluster}, batch {x.batch}",
        "does not fit" if x.flat_s is None else f"{sec(x.flat_s)} ({x.flat_status})",
        _yes_no(x.flat_split_across),
        "none fits" if x.piped_s is None else (
            f"{sec(x.piped_s)}: {x.stages} stages x {x.microbatches} micro-batches, bubble "
            f"{pct(x.bubble_fraction)}, {x.piped_memory_gib:.1f} GiB"
        ),
        _yes_no(x.piped_split_across),
        x.winner,
        f"{x.wall_flat_s:.1f} / {x.wall_piped_s:.1f}",
    ]
