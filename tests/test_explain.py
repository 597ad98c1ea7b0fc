"""taps_core.studies.explain: the primer's section-2 example, checked against the ring formulas."""

from __future__ import annotations

import pytest

from taps_core.cluster.presets import preset
from taps_core.errors import InvalidInputError
from taps_core.studies.explain import volume_vs_time


def test_primer_numbers_on_dgx_a100():
    a, b = volume_vs_time(preset("dgx-a100:2"), 1e9)
    # bytes each GPU sends: 2(p-1)/p * S
    assert a.bytes_per_gpu == pytest.approx(2 * 7 / 8 * 1e9)
    assert b.bytes_per_gpu == pytest.approx(1e9)
    # bandwidth term over the effective link speed (80% of 300 GB/s and of 25 GB/s)
    assert a.bandwidth_s == pytest.approx(1.75e9 / (0.8 * 300e9))
    assert b.bandwidth_s == pytest.approx(1e9 / (0.8 * 25e9))
    assert a.time_s == pytest.approx(a.latency_s + a.bandwidth_s)
    # volume prefers B, time prefers A
    assert b.volume_s < a.volume_s
    assert a.time_s < b.time_s / 5
    assert a.bottleneck[2] == "nvlink" and b.bottleneck[2] == "network"


def test_shared_nic_contention_on_ethernet():
    _, b = volume_vs_time(preset("ethernet:2"), 1e9)
    # 8 GPUs share one 12.5 GB/s NIC: each gets 1/8 of its effective speed
    assert b.per_gpu_Bps == pytest.approx(0.8 * 12.5e9 / 8)


def test_odd_hosts_use_all_hosts():
    _, b = volume_vs_time(preset("pcie:3"))
    assert b.group_size == 3


@pytest.mark.parametrize(("spec", "field"), [("dgx-a100:1", "nodes"), ("dgx-a100:2", "size")])
def test_invalid(spec, field):
    size = -1.0 if field == "size" else 1e9
    with pytest.raises(InvalidInputError, match=field):
        volume_vs_time(preset(spec), size)


# ---- plans in words ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_plans():
    from taps_core.cluster.topology import scale_inter_bandwidth
    from taps_core.models import build_graph, load_model_config
    from taps_core.search.planner import search

    graph = build_graph(load_model_config("gpt2"))
    topo = preset("dgx-a100:2")
    slow_topo = scale_inter_bandwidth(topo, 1e9)
    return (
        graph,
        topo,
        search(graph, topo, pipeline=False),
        search(graph, slow_topo, pipeline=False),
        slow_topo,
    )


def test_replication_across_hosts_is_called_out(gpt2_plans):
    from taps_core.studies.explain import replicated_share, replication_warning

    _, _, fast, slow, _ = gpt2_plans
    assert replicated_share(slow) == pytest.approx(1.0)  # 1 GB/s per host: hosts repeat it all
    assert replicated_share(fast) < 0.5
    assert "repeats the same work on 100%" in replication_warning(slow)
    assert replication_warning(fast) is None


def test_decisions_are_priced_against_a_search_without_them(gpt2_plans):
    from taps_core.search.planner import search
    from taps_core.studies.explain import decisions

    graph, topo, fast, _, _ = gpt2_plans
    found = decisions(fast, graph, topo, mode="train")
    assert 1 <= len(found) <= 4
    savings = [d.saved_s for d in found if d.saved_s is not None]
    assert savings == sorted(savings, reverse=True) and all(s >= -1e-12 for s in savings)
    top = found[0]
    assert "runner-up" in top.words and top.share > 0.05
    # the saving is exactly the runner-up search's step time minus the plan's
    assert search(graph, topo, pipeline=False).total_time_s == pytest.approx(fast.total_time_s)


def test_change_and_edit_words(gpt2_plans):
    from taps_core.studies.explain import change_words, edit_words
    from taps_core.studies.sweep import reprice

    graph, _, fast, slow, slow_topo = gpt2_plans
    words = change_words(slow, fast, 30e9, 32e9, above_at_low=reprice(fast, graph, slow_topo))
    assert words.startswith("Below 31 GB/s per host (between 30 and 32)")
    assert "across hosts, batch 2 ways becomes replicated" in words
    assert "less across hosts" in words and "Because" in words
    text = edit_words(slow, fast, unedited_here=reprice(fast, graph, slow_topo))
    assert "Against the unedited dgx-a100:2" in text and "op(s) change" in text
    assert "keeps the plan" in edit_words(fast, fast)


def test_slow_baseline_is_blamed_on_compute_when_it_is(gpt2_plans):
    from taps_core.search.baselines import compare, megatron_filter
    from taps_core.search.planner import search
    from taps_core.studies.explain import slow_baseline_warning

    graph, topo, _, _, _ = gpt2_plans
    plans = compare(graph, topo)
    # TP 8 inside every host on a model of 12 heads: the attention stays replicated
    forced = search(graph, topo, allow=megatron_filter(graph, topo), label="megatron")
    text = slow_baseline_warning(plans["taps"], forced, graph, "Megatron-style")
    assert text is not None and "compute, not communication" in text
    assert "heads (12) do not divide by 8" in text
    assert slow_baseline_warning(plans["taps"], plans["taps"], graph, "TAPS") is None


def test_a_pipelined_plans_changed_ops_are_at_most_all_of_its_compute():
    import re
    from dataclasses import replace

    from taps_core.models import build_graph, load_model_config
    from taps_core.search.planner import search
    from taps_core.studies.explain import _diff

    graph = build_graph(replace(load_model_config("gpt2"), batch_size=8))
    topo = preset("dgx-a100:2")
    staged = search(graph, topo, pipeline=True)
    flat = search(graph, topo, pipeline=False)
    assert staged.pipeline is not None
    what, _ = _diff(staged, flat, 3)
    share = float(re.search(r"; (\d+)% of compute", what).group(1))
    assert 0 < share <= 100, what


def test_a_change_of_layer_split_alone_is_named_as_such():
    """Two pipelines whose ops keep their choices but whose layers sit in other stages: the
    words name the split, not an empty list of changed ops."""
    from dataclasses import replace

    from taps_core.models import build_graph, load_model_config
    from taps_core.search.planner import search
    from taps_core.studies.explain import change_words, edit_words

    graph = build_graph(replace(load_model_config("gpt2"), batch_size=8))
    staged = search(graph, preset("dgx-a100:2"), pipeline=True)
    assert staged.pipeline is not None
    first, last = staged.pipeline.stages
    cut = 5 if staged.pipeline.layer_split[0] != 6 else 6  # another split than the plan's
    stages = (replace(first, layers=(0, cut)), replace(last, layers=(cut + 1, 11)))
    moved = replace(staged, pipeline=replace(staged.pipeline, stages=stages))
    words = change_words(moved, staged, 30e9, 32e9)
    split = "/".join(map(str, staged.pipeline.layer_split))
    assert f"layers per stage {split} become {cut + 1}/{11 - cut}" in words, words
    assert "0 op(s)" not in words
    edited = edit_words(moved, staged)  # the same after a cluster edit: not "keeps the plan"
    assert "keeps the plan" not in edited, edited
    assert f"layers per stage {split} become {cut + 1}/{11 - cut}" in edited, edited
    assert "keeps the plan" in edit_words(staged, staged)


def test_edit_words_lead_with_dropped_pipeline_stages():
    """Lowering the network drops the unedited cluster's stages: the note says so first, in
    Megatron-LM's terms, before the per-op changes."""
    from taps_core.cluster.presets import preset
    from taps_core.cluster.topology import scale_inter_bandwidth
    from taps_core.models import build_graph, load_model_config
    from taps_core.search.planner import search
    from taps_core.studies.explain import edit_words

    g = build_graph(load_model_config("gpt2").with_workload(batch_size=32, seq_length=1024))
    base = search(g, preset("dgx-a100:4"))
    slow = search(g, scale_inter_bandwidth(preset("dgx-a100:4"), 5e9))
    assert base.pipeline is not None and slow.pipeline is None
    text = edit_words(slow, base)
    stages = len(base.pipeline.stages)
    assert text.startswith(f"Against the unedited dgx-a100:4: PP {stages} -> 1: pipeline "
                           "stages dropped"), text
    assert "Per op, " in text and ".." not in text


def test_runner_ups_hold_the_plans_other_levers(gpt2_plans):
    """A choice is priced with every other lever held: the runner-up keeps the plan's
    micro-batch count and ZeRO stage, and never beats the plan (the plan is optimal there)."""
    from taps_core.studies.explain import runner_up

    graph, topo, fast, _, _ = gpt2_plans

    def no_batch_across(g, op, s):
        return all(c != "b" for c, _ in s.inter)

    other = runner_up(fast, graph, topo, "train", None, no_batch_across)
    assert other is not None and other.microbatches == fast.microbatches
    assert {op.zero for op in other.ops} <= {0, max(op.zero for op in fast.ops)}
    assert all(all(c != "b" for c, _ in op.strategy.inter) for op in other.ops)
    assert other.total_time_s >= fast.total_time_s * (1 - 1e-9)
