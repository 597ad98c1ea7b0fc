"""Reports: sharding classes for the graph legend, plans in words, CSV and tables."""

from __future__ import annotations

import csv
import io

import pytest

from taps_core.costs.ops import Memory
from taps_core.ir.strategies import Strategy
from taps_core.plan.records import OpPlan
from taps_core.plan.report import (
    SHARDING_CLASSES,
    describe,
    fmt_bytes,
    fmt_seconds,
    links_csv,
    plan_table,
    sharding_class,
    strategy_words,
)
from taps_core.search.baselines import megatron_filter
from taps_core.search.planner import search


def _op(einsum: str, inter=(), intra=()) -> OpPlan:
    return OpPlan("x", "matmul", None, einsum, Strategy(tuple(inter), tuple(intra)), 0.0, 0.0,
                  0.0, (), Memory())


@pytest.mark.parametrize("einsum, inter, intra, expected", [
    ("bsm,mf->bsf", (), (), "replicated"),
    ("bsm,mf->bsf", (("b", 2),), (("b", 8),), "data parallel"),
    ("bsm,mf->bsf", (("b", 2),), (("f", 8),), "column"),
    ("bsf,fm->bsm", (), (("f", 8),), "row"),
    ("bsf,fm->bsm", (), (("f", 4), ("m", 2)), "2-D"),
    ("ecm,emf->ecf", (), (("e", 8),), "expert"),
    ("bsm,mf->bsf", (), (("s", 8),), "sequence"),
])
def test_sharding_classes(einsum, inter, intra, expected):
    assert sharding_class(_op(einsum, inter, intra)) == expected
    assert expected in SHARDING_CLASSES


def test_strategy_in_words():
    s = Strategy((("b", 4),), (("n", 8),))
    assert strategy_words(s) == "heads 8 ways inside nodes, batch 4 ways across nodes"
    assert strategy_words(Strategy((), ())) == "replicated"


def test_megatron_plan_reads_as_tensor_parallel(mlp, dgx1):
    plan = search(mlp, dgx1, allow=megatron_filter(mlp, dgx1))
    assert "FFN 8 ways inside nodes" in describe(plan)
    assert [sharding_class(op) for op in plan.ops] == ["column", "column", "row"]
    text = plan_table(plan)
    assert "fc1" in text and "step time" in text


def test_links_csv_is_sorted_by_bytes(gpt2_small, dgx2):
    plan = search(gpt2_small, dgx2)
    rows = list(csv.DictReader(io.StringIO(links_csv(plan))))
    assert len(rows) == len(plan.links)
    sizes = [float(r["bytes"]) for r in rows]
    assert sizes == sorted(sizes, reverse=True)


def test_units_format():
    assert fmt_seconds(2.5) == "2.5 s"
    assert fmt_seconds(0.0025) == "2.5 ms"
    assert fmt_seconds(2.5e-6) == "2.5 µs"
    assert fmt_bytes(1.5e9) == "1.5 GB"
    assert fmt_bytes(12) == "12 B"


def test_describe_names_an_uneven_layer_split():
    """A pipeline whose first or last stage holds fewer layers says so (Megatron's
    --decoder-first/last-pipeline-num-layers); an even one does not."""
    from taps_core.cluster.presets import preset
    from taps_core.models import build_graph, load_model_config
    from taps_core.search.fixed_config import parse_fixed, plan_fixed

    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=16))
    topo = preset("dgx-a100:2")
    uneven = plan_fixed(graph, topo, parse_fixed("tp=4,pp=2,mbs=1,first=8,last=4"))
    even = plan_fixed(graph, topo, parse_fixed("tp=4,pp=2,mbs=1"))
    assert "2 pipeline stages x 8 micro-batches (layers 8/4, bubble " in describe(uneven)
    assert "2 pipeline stages x 8 micro-batches (bubble " in describe(even)
