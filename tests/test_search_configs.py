"""The exhaustive configuration search: every price equals the whole-model price, the compute
floor is a lower bound, and the answer is the fastest fitting configuration of the space."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from taps_core.errors import InfeasibleError, InvalidInputError
from taps_core.fixed_config import plan_fixed, resolve
from taps_core.linkmodel import LinkModel
from taps_core.models import build_graph, load_model_config
from taps_core.presets import preset
from taps_core.search.configs import (
    _Pricer,
    best_configuration,
    configurations,
    divisors,
    search_configurations,
)


def _graph(name: str, layers: int, batch: int, **kw):
    cfg = replace(load_model_config(name), num_hidden_layers=layers, **kw)
    return build_graph(cfg.with_workload(batch_size=batch, seq_length=128))


CASES = [
    ("gpt2", 5, 32, "dgx-a100:4", {}),  # tied embedding, odd layer count over stages
    ("llama3-8b", 4, 16, "ethernet:2", {"hidden_size": 512, "intermediate_size": 1024}),  # GQA
]


@pytest.mark.parametrize("name,layers,batch,topo,kw", CASES)
def test_every_price_equals_the_whole_model_price(name, layers, batch, topo, kw):
    """The one- and two-layer composition is exact: step and memory of every configuration
    of the space equal :func:`plan_fixed` on the whole model (to float rounding)."""
    graph, topology = _graph(name, layers, batch, **kw), preset(topo)
    links = LinkModel(topology)
    pricer = _Pricer(graph, topology, "train", links)
    checked = 0
    for config in configurations(graph, topology, "train", "megatron")[::3]:
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
    assert checked >= 10


@pytest.mark.parametrize("space", ["megatron", "deepspeed"])
def test_the_answer_is_the_fastest_fitting_configuration(space):
    """Against brute force over every configuration priced whole, under a limit that makes
    some of them too big: the search returns the fastest that fits."""
    graph, topology = _graph("gpt2", 4, 32), preset("dgx-a100:2")
    links = LinkModel(topology)
    whole = []
    for config in configurations(graph, topology, "train", space):
        try:
            whole.append(plan_fixed(graph, topology, config, memory_limit_bytes=math.inf,
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
