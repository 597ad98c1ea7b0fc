"""Property tests: the loaders accept a value or refuse it with InvalidInputError, nothing else.

Random JSON documents, and valid documents with one field replaced by a random JSON value,
go through the model-config, topology and problem loaders (both solve-graph formats). Accepted
inputs must then build (a graph, a link model, a solved problem) quickly.
"""

from __future__ import annotations

import json
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taps_core.cluster.io import from_dict
from taps_core.cluster.io import loads as topology_loads
from taps_core.cluster.links import LinkModel
from taps_core.errors import InvalidInputError
from taps_core.models import build_graph, config_from_dict, config_from_text
from taps_core.solver import iopddl, load_problem, solve
from taps_core.strict_json import dumps, loads, max_depth

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)

GPT = {
    "model_type": "gpt2",
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 128,
    "vocab_size": 100,
    "batch_size": 8,
    "seq_length": 64,
    "torch_dtype": "float32",
}
RESNET = {
    "model_type": "resnet",
    "hidden_sizes": [64, 128],
    "depths": [1, 1],
    "embedding_size": 16,
    "image_size": 32,
    "batch_size": 4,
    "num_labels": 10,
}
TOPO = {
    "format": "taps-topology/1",
    "gpu": {"name": "x", "memory_bytes": 8e10, "peak_flops": 3e14, "hbm_bandwidth_Bps": 2e12},
    "devices": [
        {"name": "g0", "kind": "gpu", "host": 0},
        {"name": "g1", "kind": "gpu", "host": 0},
        {"name": "s", "kind": "nvswitch", "host": 0},
    ],
    "links": [
        {"src": "g0", "dst": "s", "kind": "nvlink", "bandwidth_Bps": 3e11, "latency_s": 1e-6},
        {"src": "g1", "dst": "s", "kind": "nvlink", "bandwidth_Bps": 3e11, "latency_s": 1e-6},
    ],
}
PROBLEM = {
    "nodes": [{"name": "a", "costs": [1.0, 2.0]}, {"name": "b", "costs": [0.0, 3.0]}],
    "edges": [{"src": "a", "dst": "b", "costs": [[0, 3], [3, 0]]}],
}
IOP = {
    "problem": {
        "nodes": {"intervals": [[0, 2], [1, 3]], "costs": [[1, 2], [3]], "usages": [[2, 1], [1]]},
        "edges": {"nodes": [[0, 1]], "costs": [[1, 2]]},
        "usage_limit": 3,
    }
}


def _paths(value: object, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside nested dicts and lists."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _replace(doc: object, path: tuple, new: object) -> object:
    doc = json.loads(json.dumps(doc))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return doc


def _mutants(doc: object) -> st.SearchStrategy:
    return st.tuples(st.sampled_from(_paths(doc)), JSON).map(lambda pv: _replace(doc, *pv))


def _bounded(start: float, seconds: float = 20.0) -> None:
    assert time.perf_counter() - start < seconds


@SETTINGS
@given(st.one_of(JSON, _mutants(GPT), _mutants(RESNET)))
def test_model_config_loader(doc):
    start = time.perf_counter()
    try:
        cfg = config_from_dict(doc) if isinstance(doc, dict) else config_from_text(json.dumps(doc))
    except InvalidInputError as err:
        assert "\n" not in str(err)
        return
    build_graph(cfg)  # accepted configs build, within bounded time
    _bounded(start)


@SETTINGS
@given(st.one_of(JSON, _mutants(TOPO)))
def test_topology_loader(doc):
    start = time.perf_counter()
    try:
        topo = from_dict(doc) if isinstance(doc, dict) else topology_loads(json.dumps(doc))
    except InvalidInputError as err:
        assert "\n" not in str(err)
        return
    LinkModel(topo).pattern("intra", topo.gpus_per_node, "ring")
    _bounded(start)


@SETTINGS
@given(st.one_of(JSON, _mutants(PROBLEM), _mutants(IOP)))
def test_problem_loaders(doc):
    start = time.perf_counter()
    text = json.dumps(doc)
    try:
        if iopddl.is_iopddl(doc):
            out = iopddl.solve_iopddl(iopddl.parse(doc), time_limit_s=5)
            json.loads(dumps(out), parse_constant=_refuse)  # strict JSON out
        else:
            solve(load_problem(text), time_limit_s=5)
    except InvalidInputError as err:
        assert "\n" not in str(err)
        return
    _bounded(start)


def _refuse(name: str) -> float:
    raise ValueError(name)


@SETTINGS
@given(st.binary(max_size=200))
def test_arbitrary_bytes(data):
    for field, limit in (
        ("model config", "config_file_bytes"),
        ("topology", "topology_file_bytes"),
    ):
        try:
            loads(data, field=field, limit=limit)
        except InvalidInputError as err:
            assert "\n" not in str(err)


@settings(max_examples=200, deadline=None)
@given(JSON, st.integers(0, 3))
def test_depth_scan_matches_the_parser(doc, indent):
    text = json.dumps(doc, indent=indent or None).encode()

    def depth(v: object) -> int:
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        return 0

    assert max_depth(text) == depth(doc)


def test_strict_dumps_nulls_non_finite_numbers_with_reasons():
    text = dumps({"a": float("inf"), "b": [1.0, float("nan")], "c": {"d": -float("inf")}})
    data = json.loads(text, parse_constant=_refuse)
    assert data["a"] is None and data["b"] == [1.0, None] and data["c"]["d"] is None
    assert set(data["null_reasons"]) == {"a", "b[1]", "c.d"}
