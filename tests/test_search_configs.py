"""The exhaustive configuration search: every price equals the whole-model price, the compute
floor is a lower bound, and the answer is the fastest fitting configuration of the space."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest

from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import preset
from taps_core.cluster.topology import scale_inter_bandwidth
from taps_core.errors import InfeasibleError, InvalidInputError
from taps_core.memo import clear_all
from taps_core.models import build_graph, load_model_config
from taps_core.search.configs import (
    _Pricer,
    best_configuration,
    configurations,
    divisors,
    search_configurations,
    uneven_splits,
)
from taps_core.search.fixed_config import FixedConfig, parse_fixed, plan_fixed, resolve


def _graph(name: str, layers: int, batch: int, **kw):
    cfg = replace(load_model_config(name), num_hidden_layers=layers, **kw)
    return build_graph(cfg.with_workload(batch_size=batch, seq_length=128))


CASES = [
    ("gpt2", 5, 32, "dgx-a100:4", {}),  # tied embedding, odd layer count over stages
    ("llama3-8b", 4, 16, "ethernet:2", {"hidden_size": 512, "intermediate_size": 1024}),  # GQA
]


def _priced_as_whole(graph, topology, every: int) -> int:
    """Price every ``every``-th Megatron configuration with the pricer and on the whole model
    (:func:`plan_fixed`): equal step and memory, the compute floor below; how many checked."""
    links = LinkModel(topology)
    pricer = _Pricer(graph, topology, "train", links)
    checked = 0
    configs = configurations(graph, topology, "train", "megatron")[::every]
    # pipelined ones also at the first and the last uneven split Megatron accepts
    variants = []
    for c in configs:
        every_split = _with_every_split(c, graph.num_layers)
        variants += dict.fromkeys(every_split[:2] + every_split[-1:])
    for config in variants:
        try:
            fast = pricer.price(config)
        except InvalidInputError:
            continue
        whole = plan_fixed(graph, topology, config, memory_limit_bytes=math.inf, links=links)
        assert fast.step_s == pytest.approx(whole.total_time_s, rel=1e-9), config.text()
        assert fast.memory_bytes == pytest.approx(whole.memory.total, rel=1e-9), config.text()
        floor = pricer.compute_floor_s(resolve(config, graph, topology, "train"))
        assert floor <= fast.step_s * (1 + 1e-12), config.text()
        checked += 1
    return checked


@pytest.mark.parametrize("name,layers,batch,topo,kw", CASES)
def test_every_price_equals_the_whole_model_price(name, layers, batch, topo, kw):
    """The one- and two-layer composition is exact: step and memory of every configuration
    of the space equal :func:`plan_fixed` on the whole model (to float rounding)."""
    assert _priced_as_whole(_graph(name, layers, batch, **kw), preset(topo), 3) >= 10


def test_stage_shapes_built_at_one_bandwidth_price_every_other_exactly():
    """The process's stage shapes do not depend on a bandwidth: configurations priced at 5 GB/s
    per host first, then at 300 GB/s, equal the whole model priced at 300 GB/s, and the fastest
    configuration at 300 GB/s is the one a cold search picks (the memo emptied)."""
    graph = _graph("gpt2", 4, 32)
    slow, fast = (scale_inter_bandwidth(preset("dgx-a100:4"), bw) for bw in (5e9, 300e9))
    clear_all()
    warm_at_slow = search_configurations(graph, slow)
    assert _priced_as_whole(graph, fast, 2) >= 10
    warm = search_configurations(graph, fast)
    clear_all()
    cold = search_configurations(graph, fast)
    assert warm.best == cold.best and warm.priced == cold.priced
    assert warm_at_slow.best.step_s > cold.best.step_s  # the slow network priced differently


def _megatron_splits(layers: int, p: int) -> list[tuple[int, ...]]:
    """Brute force: every split of ``layers`` over ``p`` stages of at least one layer (each
    set of p - 1 cut points between layers) whose middle stages hold the same count (what
    Megatron-LM's first/last flags express)."""
    splits = []
    for cuts in itertools.combinations(range(1, layers), p - 1):
        bounds = (0, *cuts, layers)
        split = tuple(b - a for a, b in itertools.pairwise(bounds))
        if len(set(split[1:-1])) <= 1:
            splits.append(split)
    return splits


def _with_every_split(config: FixedConfig, layers: int) -> list[FixedConfig]:
    """``config`` at its even split and at every other split Megatron-LM accepts."""
    if config.pp == 1:
        return [config]
    return [config] + [replace(config, first=s[0], last=s[-1])
                       for s in _megatron_splits(layers, config.pp) if len(set(s)) > 1]


@pytest.mark.parametrize("layers,p", [(5, 2), (6, 2), (5, 4), (12, 4), (7, 3), (9, 9)])
def test_uneven_splits_are_every_split_but_the_even_one(layers, p):
    got = {tuple(int(n) for n in row) for row in uneven_splits(layers, p)}
    want = {s for s in _megatron_splits(layers, p) if len(set(s)) > 1}
    assert got == want


def test_first_and_last_lay_out_the_stages_as_megatron_does():
    graph, topology = _graph("gpt2", 12, 32), preset("dgx-a100:4")

    def split(text: str) -> tuple[int, ...]:
        return resolve(parse_fixed(text), graph, topology, "train").split

    assert split("tp=8,pp=4") == (3, 3, 3, 3)
    assert split("tp=8,pp=4,first=2,last=4") == (2, 3, 3, 4)
    assert split("tp=8,pp=4,first=6") == (6, 2, 2, 2)  # the other three share the rest
    assert split("tp=8,pp=2,last=5") == (7, 5)
    with pytest.raises(InvalidInputError, match="--fixed last"):
        split("tp=8,pp=4,last=4")  # 8 layers left do not split evenly over 3 stages
    with pytest.raises(InvalidInputError, match="--fixed first"):
        split("tp=8,pp=4,first=5,last=6")  # one layer for two middle stages


def test_best_split_is_the_fastest_fitting_split_by_brute_force():
    """Every pipelined configuration of a 6-layer GPT on 4 hosts, its split chosen by
    :meth:`_Pricer.best_split` (all splits priced at once), against every split priced one by
    one (each equal to the whole model's price by the test above), under a limit that
    leaves some splits out."""
    graph, topology = _graph("gpt2", 6, 32), preset("dgx-a100:4")
    pricer = _Pricer(graph, topology, "train", LinkModel(topology))
    checked = 0
    for config in configurations(graph, topology, "train", "megatron")[::5]:
        if config.pp == 1:
            continue
        try:
            each = [pricer.price(c) for c in _with_every_split(config, 6)]
        except InvalidInputError:
            continue
        memories = sorted(pr.memory_bytes for pr in each)
        limit = memories[len(memories) // 3]
        fitting = [pr for pr in each if pr.memory_bytes <= limit]
        best, _ = pricer.best_split(config, limit)
        assert best.step_s == pytest.approx(min(pr.step_s for pr in fitting), rel=1e-12)
        assert best.memory_bytes <= limit and best in each
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("space", ["megatron", "deepspeed"])
def test_the_answer_is_the_fastest_fitting_configuration(space):
    """Against brute force over every configuration priced whole (every layer split Megatron
    accepts), under a limit that makes some of them too big: the search returns the fastest
    that fits."""
    graph, topology = _graph("gpt2", 5, 32), preset("dgx-a100:2")
    links = LinkModel(topology)
    whole = []
    for config in configurations(graph, topology, "train", space):
        for variant in _with_every_split(config, 5):
            try:
                whole.append(plan_fixed(graph, topology, variant, memory_limit_bytes=math.inf,
                                        links=links))
            except InvalidInputError:
                continue
    memories = sorted(p.memory.total for p in whole)
    limit = memories[len(memories) // 2]  # half of them fit
    fastest = min(p.total_time_s for p in whole if p.memory.total <= limit)
    found = search_configurations(graph, topology, space=space, memory_limit_bytes=limit)
    assert found.plan is not None and found.plan.memory.total <= limit
    assert found.plan.total_time_s == pytest.approx(fastest, rel=1e-9)
    assert found.plan.search.status == "optimal"
    assert found.plan.search.algorithm == f"{space}-exhaustive"


@pytest.mark.parametrize("name,layers,batch,topo,kw", CASES)
def test_memory_never_shrinks_as_the_micro_batch_grows(name, layers, batch, topo, kw):
    """The premise of skipping a larger micro-batch when a smaller one fits at no split: every
    configuration of both spaces at every split Megatron accepts holds at least the memory of
    the same configuration at each smaller micro-batch size (priced by the pricer, which
    equals the whole model, :func:`test_every_price_equals_the_whole_model_price`)."""
    graph, topology = _graph(name, layers, batch, **kw), preset(topo)
    pricer = _Pricer(graph, topology, "train", LinkModel(topology))
    checked = 0
    for space in ("megatron", "deepspeed"):
        for config in configurations(graph, topology, "train", space):
            if config.mbs == 1:
                continue
            for variant in _with_every_split(config, layers):
                try:
                    big = pricer.price(variant)
                except InvalidInputError:
                    continue
                for mbs in divisors(config.mbs)[:-1]:
                    small = pricer.price(replace(variant, mbs=mbs))
                    assert big.memory_bytes >= small.memory_bytes * (1 - 1e-12), variant.text()
                    checked += 1
    assert checked >= 20


def test_selective_recomputation_is_in_megatrons_space_where_it_changes_something():
    """Megatron-LM's selective recomputation is a configuration of its space when the model
    keeps attention scores (not with fused attention: it would equal none), never of
    DeepSpeed's (its checkpointing is per layer); priced, it keeps less than none and runs
    less than full."""
    topology = preset("dgx-a100:2")
    graph = _graph("gpt2", 4, 32)
    recomputes = {c.recompute for c in configurations(graph, topology, "train", "megatron")}
    assert recomputes == {"none", "selective", "full"}
    flash = _graph("gpt2", 4, 32, flash_attention=True)
    assert {c.recompute for c in configurations(flash, topology, "train", "megatron")} == {
        "none", "full"}
    assert {c.recompute for c in configurations(graph, topology, "train", "deepspeed")} == {
        "none", "full"}
    pricer = _Pricer(graph, topology, "train", LinkModel(topology))
    none, sel, full = (pricer.price(parse_fixed(f"tp=2,pp=2,mbs=2,recompute={rc}"))
                       for rc in ("none", "selective", "full"))
    assert full.memory_bytes < sel.memory_bytes < none.memory_bytes
    assert none.step_s < sel.step_s < full.step_s


def test_nothing_fits_names_the_leanest():
    graph, topology = _graph("gpt2", 4, 32), preset("dgx-a100:1")
    with pytest.raises(InfeasibleError, match="no megatron configuration fits"):
        best_configuration(graph, topology, memory_limit_bytes=1e6)


def test_bad_space_is_refused():
    graph, topology = _graph("gpt2", 2, 8), preset("dgx-a100:1")
    with pytest.raises(InvalidInputError, match="space"):
        configurations(graph, topology, "train", "alpa")


def test_divisors():
    assert divisors(1) == [1]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(49) == [1, 7, 49]


def _small_gpt(batch: int):
    cfg = replace(load_model_config("gpt2"), num_hidden_layers=4, hidden_size=256,
                  num_attention_heads=8)
    return build_graph(cfg.with_workload(batch_size=batch, seq_length=128))


@pytest.mark.parametrize("topo,batch", [("dgx-a100:2", 32), ("ethernet:4", 64), ("pcie:2", 16)])
def test_taps_is_never_slower_than_any_framework_configuration(topo, batch):
    """TAPS's space holds every Megatron-LM and DeepSpeed configuration: its plan is no
    slower than the fastest of either space, priced by the same model."""
    from taps_core.search.planner import search

    graph, topology = _small_gpt(batch), preset(topo)
    taps = search(graph, topology)
    for space in ("megatron", "deepspeed"):
        found = search_configurations(graph, topology, space=space)
        if found.plan is not None:
            assert taps.total_time_s <= found.plan.total_time_s * (1 + 1e-9), space


@pytest.mark.parametrize(
    "slow,fast", [("ethernet:4", "dgx-a100:4"), ("pcie:2", "pcie-nvlink:2"),
                  ("dgx-a100:2", "dgx-h100:2")]
)
def test_no_plan_on_a_slower_network_is_faster(slow, fast):
    """Every link of ``fast`` is at least as fast as ``slow``'s (and its GPUs too): its plan
    cannot take longer, at a small and a realistic batch."""
    from taps_core.search.planner import search

    for batch in (32, 256):
        graph = _small_gpt(batch)
        on_slow, on_fast = search(graph, preset(slow)), search(graph, preset(fast))
        assert on_fast.total_time_s <= on_slow.total_time_s * (1 + 1e-9), batch


def test_the_plan_does_not_depend_on_the_time_budget():
    """Inside the documented ranges the budget is only a guard: 1 s and 600 s give the same
    plan (same step, same strategies)."""
    from taps_core.search.planner import search

    graph, topology = _small_gpt(256), preset("dgx-a100:4")
    short, long = (search(graph, topology, time_budget_s=b) for b in (1.0, 600.0))
    assert short.total_time_s == long.total_time_s
    assert [op.strategy for op in short.ops] == [op.strategy for op in long.ops]
