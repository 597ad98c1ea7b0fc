"""Hostile input through the CLI: one line on stderr naming the field, exit 2, quickly.

A table of nasty files (deep nesting, 400-digit integers, wrong types, invalid UTF-8, NaN,
oversized models and clusters, broken problems in both solve-graph formats), run in-process
through :func:`taps_core.cli.main.main`, plus a few real subprocesses under a memory cap.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taps_core.cli import main as cli
from taps_core.cli.main import main

CASE_SECONDS = 20.0  # every hostile input is refused well within this

GPT = {
    "model_type": "gpt2",
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 4,
    "n_positions": 128,
    "vocab_size": 100,
    "batch_size": 8,
    "seq_length": 64,
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
IOP = {"problem": {"nodes": {"intervals": [[0, 1]], "costs": [[1]], "usages": [[1]]}}}


def _cfg(**changes: object) -> str:
    return json.dumps({**GPT, **changes})


def _topo(path: tuple, value: object) -> str:
    data = json.loads(json.dumps(TOPO))
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(data)


def _iop(**nodes: object) -> str:
    data = json.loads(json.dumps(IOP))
    data["problem"]["nodes"].update(nodes)
    return json.dumps(data)


# (name, which loader, file content, text the error must contain)
CASES = [
    ("deep-array", "config", "[" * 100_000, "nesting depth"),
    ("deep-object", "config", '{"a":' * 5000 + "1" + "}" * 5000, "nesting depth"),
    ("400-digit-layers", "config", _cfg(n_layer=int("9" * 400)), "num_hidden_layers"),
    ("5000-digit-int", "config", '{"model_type":"gpt2","n_layer":' + "9" * 5000 + "}", "JSON"),
    ("million-layers", "config", _cfg(n_layer=1_000_000), "num_hidden_layers"),
    ("dtype-list", "config", _cfg(torch_dtype=["bfloat16"]), "dtype"),
    ("layers-float", "config", _cfg(n_layer=2.5), "num_hidden_layers"),
    ("layers-bool", "config", _cfg(n_layer=True), "num_hidden_layers"),
    ("heads-huge", "config", _cfg(n_head=10**6), "num_attention_heads"),
    ("vocab-huge", "config", _cfg(vocab_size=10**9), "vocab_size"),
    ("width-huge", "config", _cfg(n_embd=2**40), "hidden_size"),
    ("batch-string", "config", _cfg(batch_size="8"), "batch_size"),
    ("tokens-huge", "config", _cfg(batch_size=2**24, seq_length=2**24), "seq_length"),
    ("nan", "config", '{"model_type": "gpt2", "n_embd": NaN}', "NaN"),
    ("1e999", "config", '{"model_type": "gpt2", "n_embd": 1e999}', "hidden_size"),
    ("invalid-utf8", "config", b'{"model_type": "gpt2", "name": "\xff\xfe"}', "UTF-8"),
    ("empty", "config", "", "JSON"),
    ("null", "config", "null", "model config"),
    ("model-type-list", "config", _cfg(model_type=["gpt2"]), "model_type"),
    ("dropout-1", "config", _cfg(attn_pdrop=1.0), "attention_dropout"),
    (
        "resnet-strings",
        "config",
        json.dumps({"model_type": "resnet", "hidden_sizes": ["a", "b"], "depths": [1, 1]}),
        "hidden_sizes[0]",
    ),
    (
        "resnet-deep",
        "config",
        json.dumps({"model_type": "resnet", "hidden_sizes": [64] * 4, "depths": [200] * 4}),
        "depths",
    ),
    (
        "bert-type-vocab-string",
        "config",
        json.dumps(
            {
                "model_type": "bert",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "type_vocab_size": "2",
                "seq_length": 64,
            }
        ),
        "type_vocab_size",
    ),
    (
        "experts-huge",
        "config",
        json.dumps(
            {
                "model_type": "mixtral",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_local_experts": 100_000,
                "seq_length": 64,
            }
        ),
        "num_local_experts",
    ),
    ("topo-links-5", "topology", _topo(("links",), 5), "links"),
    ("topo-links-null", "topology", _topo(("links",), None), "links"),
    (
        "topo-400-digits",
        "topology",
        _topo(("links", 0, "bandwidth_Bps"), int("9" * 400)),
        "bandwidth_Bps",
    ),
    ("topo-host-string", "topology", _topo(("devices", 0, "host"), "zero"), "host"),
    ("topo-host-float", "topology", _topo(("devices", 0, "host"), 1.5), "host"),
    ("topo-latency-nan", "topology", _topo(("links", 0, "latency_s"), "NaN"), "latency_s"),
    ("topo-efficiency", "topology", _topo(("efficiency",), {"nvlink": "x"}), "efficiency"),
    ("topo-gpu-list", "topology", _topo(("gpu",), [1]), "gpu"),
    ("topo-deep", "topology", '{"gpu": ' + "[" * 2000 + "]" * 2000 + "}", "nesting depth"),
    (
        "topo-20k-hosts",
        "topology",
        _topo(("devices",), [{"name": f"h{h}", "kind": "gpu", "host": h} for h in range(20_000)]),
        "hosts",
    ),
    (
        "topo-256-gpus-per-host",
        "topology",
        _topo(("devices",), [{"name": f"g{i}", "kind": "gpu", "host": 0} for i in range(256)]),
        "GPUs on one host",
    ),
    (
        "prob-edges-5",
        "problem",
        json.dumps({"nodes": [{"name": "a", "costs": [1]}], "edges": 5}),
        "edges",
    ),
    (
        "prob-edges-null",
        "problem",
        json.dumps({"nodes": [{"name": "a", "costs": [1]}], "edges": None}),
        "edges",
    ),
    (
        "prob-400-digits",
        "problem",
        '{"nodes":[{"name":"a","costs":[' + "9" * 400 + "]}]}",
        "nodes[0].costs",
    ),
    ("prob-nan", "problem", '{"nodes":[{"name":"a","costs":[NaN]}]}', "NaN"),
    ("prob-inf", "problem", '{"nodes":[{"name":"a","costs":[1e999]}]}', "nodes[0].costs"),
    ("prob-bool-cost", "problem", '{"nodes":[{"name":"a","costs":[true]}]}', "nodes[0].costs"),
    (
        "prob-name-list",
        "problem",
        json.dumps({"nodes": [{"name": [1], "costs": [1]}]}),
        "nodes[0].name",
    ),
    ("prob-deep", "problem", '{"nodes": ' + "[" * 3000 + "]" * 3000 + "}", "nesting depth"),
    ("prob-nodes-missing", "problem", "{}", "problem"),
    (
        "iop-edge-index",
        "problem",
        json.dumps({"problem": {**IOP["problem"], "edges": {"nodes": [[0, 5]], "costs": [[1]]}}}),
        "problem.edges.nodes[0]",
    ),
    ("iop-negative", "problem", _iop(costs=[[-1]]), "problem.nodes.costs[0]"),
    ("iop-interval", "problem", _iop(intervals=[[5, 1]]), "problem.nodes.intervals[0]"),
    ("iop-interval-type", "problem", _iop(intervals=[["a", 1]]), "problem.nodes.intervals[0]"),
    ("iop-2**64", "problem", _iop(costs=[[2**64]]), "problem.nodes.costs[0]"),
    ("iop-usages-short", "problem", _iop(costs=[[1, 2]], usages=[[1]]), "problem.nodes.usages[0]"),
    ("iop-costs-5", "problem", _iop(costs=5), "problem.nodes.costs"),
    (
        "iop-limit-string",
        "problem",
        json.dumps({"problem": {**IOP["problem"], "usage_limit": "10"}}),
        "usage_limit",
    ),
    (
        "iop-infeasible",
        "problem",
        json.dumps(
            {
                "problem": {
                    "nodes": {
                        "intervals": [[0, 2], [1, 3]],
                        "costs": [[1], [1]],
                        "usages": [[5], [6]],
                    },
                    "usage_limit": 10,
                }
            }
        ),
        "no solution",
    ),
]


def _args(kind: str, path: Path) -> list[str]:
    if kind == "config":
        return ["plan", str(path), "--topology", "dgx-a100:1"]
    if kind == "topology":
        return ["plan", "mlp-2layer", "--topology", str(path)]
    return ["solve-graph", str(path), "--time-limit", "10"]


def _one_line(code: int, err: str, expect: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and expect in err, err


@pytest.mark.parametrize("name, kind, content, expect", CASES, ids=[c[0] for c in CASES])
def test_nasty_file_gives_one_line(name, kind, content, expect, tmp_path, capsys):
    path = tmp_path / f"{name}.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    start = time.perf_counter()
    code = main(_args(kind, path))
    took = time.perf_counter() - start
    _out, err = capsys.readouterr()
    _one_line(code, err, expect)
    assert took < CASE_SECONDS


@pytest.mark.parametrize(
    "args, expect",
    [
        (["plan", "gpt2", "--topology", "dgx-a100:99999999999999999999"], "topology nodes"),
        (["plan", "gpt2", "--topology", "dgx-a100:" + "9" * 5000], "topology"),
        (["plan", "gpt2", "--topology", "x" * 5000], "topology"),
        (["plan", "gpt2\x00", "--topology", "dgx-a100:1"], "model"),
        (["plan", "a" * 5000 + ".json", "--topology", "dgx-a100:1"], "model"),
        (["plan", "gpt2", "--topology", "dgx-a100:1", "--batch", "9" * 400], "batch_size"),
        (["plan", "gpt2", "--topology", "dgx-a100:1", "--seq", "-5"], "seq_length"),
        (["plan", "gpt2", "--topology", "dgx-a100:1", "--memory-limit", "nan"], "memory-limit"),
        (["plan", "gpt2", "--topology", "dgx-a100:1", "--memory-limit", "inf"], "memory-limit"),
        (["solve-graph", "/dev/zero"], "FILE"),
        (["solve-graph", "/"], "FILE"),
        (["solve-graph", "x.json", "--time-limit", "-1"], "--time-limit"),
        (["solve-graph", "x.json", "--time-limit", "nan"], "--time-limit"),
    ],
    ids=lambda v: str(v)[:40] if isinstance(v, str) else None,
)
def test_nasty_arguments_give_one_line(args, expect, capsys):
    code = main(args)
    _out, err = capsys.readouterr()
    _one_line(code, err, expect)


def test_json_target_checked_before_the_search(tmp_path, capsys, monkeypatch):
    def no_search(*_a, **_k):
        raise AssertionError("the search ran before --json was checked")

    monkeypatch.setattr(cli, "search", no_search)
    monkeypatch.setattr(cli, "compare", no_search)
    for target, expect in (
        (str(tmp_path), "directory"),
        (str(tmp_path / "missing" / "plan.json"), "existing folder"),
    ):
        for command in ("plan", "compare"):
            code = main([command, "gpt2", "--topology", "dgx-a100:1", "--json", target])
            _out, err = capsys.readouterr()
            _one_line(code, err, expect)


def test_problem_file_size_checked_before_reading(tmp_path, capsys, monkeypatch):
    big = tmp_path / "big.json"
    with big.open("wb") as fh:  # a sparse file: huge on stat, nothing written
        fh.truncate(2 * 2**30)

    def no_read(*_a, **_k):
        raise AssertionError("the file was read")

    monkeypatch.setattr(Path, "read_bytes", no_read)
    code = main(["solve-graph", str(big)])
    _out, err = capsys.readouterr()
    _one_line(code, err, "FILE size")


def _strict(text: str) -> object:
    def refuse(name: str) -> float:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_output_is_strict_json(tmp_path, capsys):
    # a problem whose every assignment is forbidden: infinite bound, null plus a reason
    p = tmp_path / "p.json"
    p.write_text(
        json.dumps(
            {"problem": {"nodes": {"intervals": [[0, 1]], "costs": [[10**18]], "usages": [[1]]}}}
        )
    )
    code = main(["solve-graph", str(p)])
    out, err = capsys.readouterr()
    data = _strict(out)
    assert code == 2 and "no solution" in err
    assert data["cost"] is None and data["reason"]
    assert data["null_reasons"]["lower_bound"].startswith("inf")
    code = main(["plan", "mlp-2layer", "--topology", "dgx-a100:1", "--json", "-"])
    out, _ = capsys.readouterr()
    assert code == 0 and _strict(out)["model"]["name"] == "mlp-2layer"


def _limited(seconds: int, gib: int):
    def apply() -> None:  # runs in the child: a hard cap on its address space and CPU time
        resource.setrlimit(resource.RLIMIT_AS, (gib * 2**30, gib * 2**30))
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))

    return apply


@pytest.mark.parametrize(
    "content, kind, expect",
    [
        (_cfg(n_layer=1_000_000), "config", "num_hidden_layers"),
        (_cfg(n_layer=int("9" * 400)), "config", "num_hidden_layers"),
        ("[" * 1_000_000, "problem", "nesting depth"),
        (b"\xc3\x28" * 1000, "topology", "UTF-8"),
    ],
    ids=["million-layers", "400-digit-layers", "deep-problem", "invalid-utf8-topology"],
)
def test_subprocess_stays_small_and_quick(content, kind, expect, tmp_path):
    path = tmp_path / "in.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    res = subprocess.run(
        [sys.executable, "-m", "taps_core", *_args(kind, path)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limited(30, 2),
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and expect in res.stderr and "Traceback" not in res.stderr
