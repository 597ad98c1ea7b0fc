"""benchmarks: the quick slice end to end (report, figures, raw JSON) and a few helpers."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks.__main__ import main
from benchmarks.bandwidth_sweep import PRESET_NIC_Bps, cluster
from benchmarks.config import QUICK, scaled_batch
from benchmarks.plan_quality import op_group
from taps_core.cluster.presets import preset
from taps_core.models import build_graph, load_model_config
from taps_core.search.planner import search


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    assert main(["--quick", "--out", str(out)]) == 0
    return out, (out / "RESULTS.md").read_text(), json.loads((out / "results.json").read_text())


def test_report_has_every_section_and_tables(quick_run):
    _, md, _ = quick_run
    for heading in (
        "## Summary",
        "## 1. Plan quality",
        "## 2. Search speed and exactness",
        "### Headline checks",
        "## 3. Bandwidth sweep",
        "## Limits and notes",
        "## Machine",
    ):
        assert heading in md
    assert "python -m benchmarks" in md
    assert "| cluster | GPUs | mode | batch | TAPS comm | volume comm |" in md
    assert "| GPUs | layers | batch |" in md
    assert len(re.findall(r"^\| ", md, flags=re.M)) > 30
    for model in QUICK.quality_models:
        assert f"### {model}" in md


def test_dp_equals_ilp_in_every_finished_row(quick_run):
    _, md, raw = quick_run
    rows = raw["speed"]["rows"]
    assert {(r["layers"], r["gpus"]) for r in rows} >= {(1, 8), (2, 8)}
    finished = [r for r in rows if r["ilp_finished"]]
    assert finished, "the quick slice must solve some ILPs"
    for r in finished:
        assert r["equal"] is True
        assert r["ilp_cost_s"] == pytest.approx(r["dp_cost_s"], rel=1e-9)
    assert "**NO**" not in md


def test_quality_rows_and_reductions(quick_run):
    _, _, raw = quick_run
    rows = raw["quality"]["rows"]
    assert len(rows) == len(QUICK.quality_models) * len(QUICK.quality_clusters) * 2
    for r in rows:
        assert r["plans"]["taps"]["fits"]
        red = r["reduction_vs"].get("volume")
        assert red is not None and red <= 1.0
        # TAPS optimises the step time: never slower than a baseline that fits
        for label, p in r["plans"].items():
            if p["fits"]:
                assert r["plans"]["taps"]["total_s"] <= p["total_s"] * (1 + 1e-9), label
    assert raw["quality"]["stats"]["all"]["count"] == len(rows)


def test_figures_and_machine_are_recorded(quick_run):
    out, md, raw = quick_run
    links = re.findall(r"\]\((figures/[^)]+)\)", md)
    assert len(links) >= 5
    for link in links:
        assert (out / link).is_file()
        assert link.endswith((".png", ".html"))
    env = raw["environment"]
    assert env["python"] and env["cpu"] and env["usable_cores"] >= 1
    assert "numpy" in env["packages"]


def test_sweep_cluster_matches_the_preset_at_its_own_bandwidth():
    graph = build_graph(load_model_config("mlp-2layer"))
    ours = search(graph, cluster(2, PRESET_NIC_Bps))
    ref = search(graph, preset("dgx-a100:2"))
    assert ours.total_time_s == pytest.approx(ref.total_time_s, rel=1e-12)
    assert ours.comm_time_s == pytest.approx(ref.comm_time_s, rel=1e-12)


def test_helpers():
    cfg = load_model_config("llama3-70b")  # sample batch 8
    assert scaled_batch(cfg, 1) == 8
    assert scaled_batch(cfg, 16) == 16
    assert scaled_batch(cfg, 3) == 9
    assert op_group("L7.mlp.up", 7) == "L*.mlp.up"
    assert op_group("S0.B0.conv1", 0) == "S0.B0.conv1"
    assert op_group("lm_head", None) == "lm_head"


def test_scaling_slice_beats_the_published_configuration(tmp_path):
    """The two smallest of Megatron-LM's GPT runs: the plan is no slower than the published
    configuration priced by the same model, within 0.5x-2x of the measured step, and the
    docs block is replaced in place (not appended twice)."""
    from benchmarks import scaling

    rows = [scaling.plan_run(run, prove=i == 0) for i, run in enumerate(scaling.QUICK)]
    for r in rows:
        assert r.step_s <= r.published_priced_s * (1 + 1e-9), r
        assert 0.5 <= r.step_s / r.run.published_step_s() <= 2.0, r
    # 1.7B on 32 GPUs: every pipeline shape is bounded above the plan, so it is proven optimal
    assert rows[0].proof_status == "optimal" and rows[0].bound_s == rows[0].proof_step_s
    assert rows[0].proof_step_s <= rows[0].step_s
    doc = tmp_path / "RESULTS.md"
    doc.write_text("# Results\n\nmain run\n")
    for _ in range(2):
        scaling.write_section(scaling.section(rows, quick=True), doc)
    text = doc.read_text()
    assert text.count(scaling.BEGIN) == 1 and text.startswith("# Results\n\nmain run\n")
    assert "| 1.7B | 32 | 512 |" in text and "| optimal | " in text


def test_sweep_flip_between_twins_at_the_top_is_not_bisected(monkeypatch):
    """Where the plan below an interval costs at its top what the plan found there does, the
    two are equal-cost twins at the top: a tie there, found without a single search (the
    llama3-70b sweep spent most of its time bisecting such flips)."""
    from benchmarks import bandwidth_sweep as bs

    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=8, seq_length=256))
    topo = cluster(2, PRESET_NIC_Bps)
    low = search(graph, topo, pipeline=False)
    high = search(graph, topo, pipeline=False, memory_limit_bytes=0.7 * low.memory.total)
    assert bs._signature(low) != bs._signature(high)

    def priced(g, plan, nodes, nic_Bps):  # below: dearer at the bottom, twin at the top
        return plan.total_time_s * (2.0 if nic_Bps < 2e9 else 1.0) if plan is high else (
            high.total_time_s)

    def refuse(*args, **kwargs):
        raise AssertionError("bisected")

    monkeypatch.setattr(bs, "step_time_at", priced)
    monkeypatch.setattr(bs, "_taps", refuse)
    found = bs.locate(graph, 2, "train", (1e9, low), (4e9, high), steps=6)
    assert len(found) == 1 and found[0].tie
    assert found[0].low_Bps == found[0].high_Bps == 4e9


def test_sweep_change_is_located_by_two_searches_beside_the_plans_crossover(monkeypatch):
    """Where the plans at the two ends of an interval cross (re-costed, no search), one search
    just below and one just above the crossover bracket the change at the resolution six
    bisections reach, with two searches instead of six; the bracket holds: the search gives
    the old plan at its low end and a new one at its high end."""
    from benchmarks import bandwidth_sweep as bs
    from benchmarks.config import workload

    graph, _, _ = workload("gpt2", 2)
    lo_bw, hi_bw = 1e9, 400e9
    low, high = (bs._taps(graph, 2, "train", bw) for bw in (lo_bw, hi_bw))
    assert low is not None and high is not None and bs._signature(low) != bs._signature(high)
    x = bs.crossover(graph, 2, low, high, lo_bw, hi_bw)
    assert x is not None and lo_bw < x < hi_bw
    assert bs.step_time_at(graph, low, 2, x) == pytest.approx(
        bs.step_time_at(graph, high, 2, x), rel=1e-9)
    assert bs.crossover(graph, 2, high, low, lo_bw, hi_bw) is None  # faster at neither end

    searched: list[float] = []
    plain = bs._taps

    def counted(g, nodes, mode, nic_Bps):
        searched.append(nic_Bps)
        return plain(g, nodes, mode, nic_Bps)

    monkeypatch.setattr(bs, "_taps", counted)
    budget = [2]
    found = bs.locate(graph, 2, "train", (lo_bw, low), (hi_bw, high), steps=6, budget=budget)
    assert len(searched) == 2 and found[0].low_Bps < x < found[0].high_Bps
    assert budget == [0] and not found[0].budget_out and not found[0].rearranged
    assert found[0].high_Bps / found[0].low_Bps <= (hi_bw / lo_bw) ** (1 / 64) * (1 + 1e-9)
    at_low, at_high = (plain(graph, 2, "train", bw) for bw in (found[0].low_Bps,
                                                               found[0].high_Bps))
    assert bs._signature(at_low) == bs._signature(low)
    assert bs._signature(at_high) != bs._signature(low)


def test_sweep_change_the_unproven_search_explains_is_reported_not_bisected(monkeypatch):
    """Where the plan below, re-costed at the interval's top, beats the unproven (memory-bound)
    plan the search returned there, the change is where that search stops, not a switch of
    the best plan: it is reported with what was missed and never bisected. The same plans,
    with the top's search proven optimal, are narrowed down as before."""
    from dataclasses import replace

    from benchmarks import bandwidth_sweep as bs

    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=8, seq_length=256))
    topo = cluster(2, PRESET_NIC_Bps)
    low = search(graph, topo, pipeline=False)
    high = search(graph, topo, pipeline=False, memory_limit_bytes=0.7 * low.memory.total)
    high = replace(high, search=replace(high.search, status="feasible"))
    assert bs._signature(low) != bs._signature(high)

    def priced(g, plan, nodes, nic_Bps):  # low is dearer at the bottom, 10% cheaper at the top
        if plan is low:
            return high.total_time_s * (0.9 if nic_Bps > 2e9 else 1.1)
        return low.total_time_s * (1.2 if nic_Bps < 2e9 else 1.0)

    def refuse(*args, **kwargs):
        raise AssertionError("bisected")

    monkeypatch.setattr(bs, "step_time_at", priced)
    monkeypatch.setattr(bs, "_taps", refuse)
    found = bs.locate(graph, 2, "train", (1e9, low), (4e9, high), steps=6)
    assert len(found) == 1 and not found[0].tie
    assert found[0].missed_s == pytest.approx(0.1 * high.total_time_s)
    assert (found[0].low_Bps, found[0].high_Bps) == (1e9, 4e9)
    proven = replace(high, search=replace(high.search, status="optimal"))
    assert bs.search_missed(low, priced(graph, proven, 2, 1e9), proven,
                            priced(graph, low, 2, 4e9)) == 0.0


def test_sweep_rearrangement_within_one_structure_is_reported_not_bisected(monkeypatch):
    """Two ends whose plans share their structure in Megatron terms (TP / PP / DP sizes, ZeRO,
    micro-batches, kinds of recomputation) and differ only in which equal-shaped split some
    ops take are a rearrangement: reported between the grid points with no search. Plans of
    different structure (replicated nodes at 1 GB/s, data parallel across them at 400) are
    told apart."""
    from benchmarks import bandwidth_sweep as bs
    from benchmarks.config import workload

    graph, _, _ = workload("gpt2", 2)
    low, high = (bs._taps(graph, 2, "train", bw) for bw in (1e9, 400e9))
    assert low is not None and high is not None
    assert bs.structure(low) != bs.structure(high) and bs.structure(low) == bs.structure(low)

    def priced(g, plan, nodes, nic_Bps):  # each end's own plan is the faster there
        own = plan is (low if nic_Bps < 2e9 else high)
        return plan.total_time_s * (1.0 if own else 1.05)

    def refuse(*args, **kwargs):
        raise AssertionError("bisected")

    monkeypatch.setattr(bs, "step_time_at", priced)
    monkeypatch.setattr(bs, "_taps", refuse)
    monkeypatch.setattr(bs, "structure", lambda plan: ("one structure",))
    found = bs.locate(graph, 2, "train", (1e9, low), (4e9, high), steps=6)
    assert len(found) == 1 and found[0].rearranged and not found[0].tie
    assert (found[0].low_Bps, found[0].high_Bps) == (1e9, 4e9)
    assert found[0].gap_s == pytest.approx(1.05 * low.total_time_s - high.total_time_s)


def test_sweep_change_met_when_the_locating_budget_is_spent_keeps_its_bracket(monkeypatch):
    """With no locating searches left, a change between two grid points is reported at the
    grid's bracket, marked as not narrowed down, and no search runs."""
    from benchmarks import bandwidth_sweep as bs
    from benchmarks.config import workload

    graph, _, _ = workload("gpt2", 2)
    low, high = (bs._taps(graph, 2, "train", bw) for bw in (1e9, 400e9))

    def refuse(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(bs, "_taps", refuse)
    found = bs.locate(graph, 2, "train", (1e9, low), (400e9, high), steps=6, budget=[0])
    assert len(found) == 1 and found[0].budget_out and not found[0].tie
    assert (found[0].low_Bps, found[0].high_Bps) == (1e9, 400e9)
