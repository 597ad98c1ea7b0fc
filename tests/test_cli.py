"""The CLI: stable JSON, compact tables, one-line errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from taps_core.cli.main import main

PLAN_KEYS = {"model", "topology", "mode", "cost_model", "totals", "ops", "links", "search"}
TOTAL_KEYS = {
    "comm_time_s",
    "compute_time_s",
    "comm_bytes",
    "intra_node_bytes",
    "inter_node_bytes",
    "memory_per_device_bytes",
}


def _run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_models_and_topologies_list(capsys):
    code, out, _ = _run(["models"], capsys)
    assert code == 0 and "gpt3-175b" in out and "174604" in out
    code, out, _ = _run(["topologies"], capsys)
    assert code == 0 and "dgx-a100:N" in out and "ethernet:N" in out


def test_plan_json_schema(capsys):
    code, out, _ = _run(["plan", "mlp-2layer", "--topology", "dgx-a100:1", "--json", "-"], capsys)
    assert code == 0
    data = json.loads(out)
    assert set(data) >= PLAN_KEYS
    assert set(data["totals"]) >= TOTAL_KEYS
    assert set(data["model"]) >= {"name", "parameters"}
    assert set(data["topology"]) >= {"name", "nodes", "gpus_per_node"}
    assert {"name", "kind", "layer", "strategy", "comm_time_s", "comm_bytes"} <= set(data["ops"][0])
    assert {"algorithm", "time_s", "num_strategies"} <= set(data["search"])
    for link in data["links"]:
        assert {"src", "dst", "kind", "bandwidth_Bps", "bytes", "busy_time_s"} <= set(link)


def test_plan_table_and_json_file(tmp_path, capsys):
    target = tmp_path / "plan.json"
    code, out, _ = _run(
        [
            "plan",
            "gpt2",
            "--topology",
            "dgx-a100:2",
            "--batch",
            "16",
            "--seq",
            "128",
            "--json",
            str(target),
        ],
        capsys,
    )
    assert code == 0 and "step time" in out and "(x12)" in out
    assert json.loads(target.read_text())["model"]["name"] == "gpt2"


def test_compare_json_has_four_plans(capsys):
    code, out, _ = _run(
        [
            "compare",
            "gpt2",
            "--topology",
            "ethernet:2",
            "--batch",
            "16",
            "--seq",
            "128",
            "--mode",
            "infer",
            "--json",
            "-",
        ],
        capsys,
    )
    assert code == 0
    plans = json.loads(out)["plans"]
    assert set(plans) == {"taps", "volume", "megatron", "data_parallel"}
    for p in plans.values():
        assert (p["fits"] is False and p["reason"]) or set(p) >= PLAN_KEYS


def test_compare_reports_baselines_that_do_not_fit(capsys):
    code, out, _ = _run(
        [
            "compare",
            "gpt2",
            "--topology",
            "dgx-a100:2",
            "--batch",
            "2",
            "--seq",
            "128",
            "--json",
            "-",
        ],
        capsys,
    )
    assert code == 0
    dp = json.loads(out)["plans"]["data_parallel"]
    assert dp == {"fits": False, "reason": dp["reason"]} and "batch (2)" in dp["reason"]


def test_solve_graph(tmp_path, capsys):
    f = tmp_path / "p.json"
    f.write_text(
        json.dumps(
            {
                "nodes": [
                    {"name": "a", "costs": [1.0, 2.0]},
                    {"name": "b", "costs": [0.0, 0.0]},
                    {"name": "c", "costs": [5.0, 0.0]},
                ],
                "edges": [
                    {"src": "a", "dst": "b", "costs": [[0, 3], [3, 0]]},
                    {"src": "b", "dst": "c", "costs": [[0, 1], [1, 0]]},
                    {"src": "c", "dst": "a", "costs": [[0, 0], [0, 0]]},
                ],
            }
        )
    )
    code, out, _ = _run(["solve-graph", str(f)], capsys)
    data = json.loads(out)
    assert code == 0 and data["cost"] == 2.0 and data["strategies"] == {"a": 0, "b": 0, "c": 1}
    assert data["time_s"] >= 0


@pytest.mark.parametrize(
    "args, field",
    [
        (["plan", "nope", "--topology", "dgx-a100:1"], "model"),
        (["plan", "gpt2", "--topology", "dgx-z:1"], "topology"),
        (["plan", "gpt2", "--topology", "missing.json"], "topology"),
        (["plan", "gpt2", "--topology", "dgx-a100:1", "--batch", "0"], "batch_size"),
        (["plan", "gpt2", "--topology", "dgx-a100:1", "--memory-limit", "-1"], "--memory-limit"),
        (["plan", "gpt2", "--topology", "dgx-a100:1", "--mode", "serve"], "arguments"),
        (["solve-graph", "missing.json"], "FILE"),
    ],
)
def test_bad_input_exits_2_with_one_line(args, field, capsys):
    code, _out, err = _run(args, capsys)
    assert code == 2
    assert err.count("\n") == 1 and field in err and "Traceback" not in err


def test_bad_files_exit_2(tmp_path, capsys):
    bad = tmp_path / "t.json"
    bad.write_text('{"format": "taps-topology/1", "gpu": {}')
    code, _, err = _run(["plan", "gpt2", "--topology", str(bad)], capsys)
    assert code == 2 and "valid JSON" in err
    neg = tmp_path / "p.json"
    neg.write_text('{"nodes":[{"name":"a","costs":[1, "x"]}]}')
    code, _, err = _run(["solve-graph", str(neg)], capsys)
    assert code == 2 and "nodes[0].costs" in err


def test_memory_limit_too_small_exits_2(capsys):
    code, _, err = _run(
        ["plan", "gpt2", "--topology", "dgx-a100:1", "--memory-limit", "0.01"], capsys
    )
    assert code == 2 and "memory" in err


def test_module_entry_point_runs():
    res = subprocess.run(
        [sys.executable, "-m", "taps_core", "plan", "x", "--topology", "y"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and res.stderr.startswith("error: model")


def test_plan_fixed_prices_a_given_configuration(capsys):
    """--fixed costs exactly the configuration, in the same JSON as a searched plan."""
    args = ["plan", "gpt2", "--topology", "dgx-a100:2", "--batch", "16"]
    code, out, _ = _run([*args, "--fixed", "tp=4,pp=2,mbs=2,zero=1,sp=1", "--json", "-"], capsys)
    assert code == 0
    data = json.loads(out)
    assert set(data) >= PLAN_KEYS
    assert data["search"]["algorithm"] == "fixed" and data["search"]["status"] == "fixed"
    assert data["pipeline"]["microbatches"] == 16 // (2 * 2)  # dp = 1 host x 8/4 GPUs, mbs 2
    assert len(data["pipeline"]["stages"]) == 2
    assert {op["zero_stage"] for op in data["ops"]} <= {0, 1}
    q = next(op for op in data["ops"] if op["name"] == "L0.attn.q")
    assert q["strategy"]["intra"] == {"n": 4, "b": 2}


@pytest.mark.parametrize(
    "spec, words",
    [
        ("tp=16", "--fixed tp must be a divisor of the 8 GPUs of a host"),
        ("tp=8,pp=3", "--fixed pp must be a divisor of the 2 hosts"),
        ("tp=8,dp=4", "--fixed dp must be 2"),
        ("tq=2", "--fixed key must be one of tp, pp"),
        ("zero=5", "--fixed zero must be 0, 1, 2 or 3"),
        ("tp=8,mbs=3", "--fixed mbs must be a divisor of the 8 samples"),
        ("tp=8,,pp=2", "--fixed must be a key=value pair"),
        ("tp=8,pp=2,first=13", "--fixed first must be a count leaving the other 1 stage"),
        ("tp=8,first=3", "--fixed first must be absent with pp=1"),
        ("tp=8,pp=2,first=3,last=3", "--fixed first must be first + last = 12"),
    ],
)
def test_plan_fixed_bad_input_names_the_key(capsys, spec, words):
    code, out, err = _run(
        ["plan", "gpt2", "--topology", "dgx-a100:2", "--batch", "16", "--fixed", spec], capsys
    )
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("space", ["megatron", "deepspeed"])
def test_plan_space_returns_the_fastest_framework_configuration(capsys, space):
    """--space megatron|deepspeed: the fastest configuration of that framework (exhaustive),
    the same JSON as any plan, and TAPS's plan is never slower."""
    args = ["plan", "gpt2", "--topology", "dgx-a100:2", "--batch", "32"]
    code, out, _ = _run([*args, "--space", space, "--json", "-"], capsys)
    assert code == 0
    data = json.loads(out)
    assert set(data) >= PLAN_KEYS
    assert data["search"]["algorithm"] == f"{space}-exhaustive"
    assert data["search"]["status"] == "optimal"  # proven: every configuration priced
    code, out, _ = _run([*args, "--json", "-"], capsys)
    taps = json.loads(out)
    assert taps["totals"]["total_time_s"] <= data["totals"]["total_time_s"] * (1 + 1e-9)


@pytest.mark.parametrize(
    "extra,words",
    [(["--space", "alpa"], "--space"), (["--space", "megatron", "--fixed", "tp=2"], "--space")],
)
def test_plan_space_bad_input_is_one_line(capsys, extra, words):
    code, out, err = _run(["plan", "gpt2", "--topology", "dgx-a100:2", *extra], capsys)
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1, err


SWEEP = ["sweep", "gpt2", "--topology", "dgx-a100:2", "--batch", "8", "--seq", "128"]


def test_sweep_json_is_the_engines_sweep(capsys, tmp_path):
    """``sweep --json -``: every point's plans as ``compare --json`` prints them, the cluster's
    own bandwidth a point, equal to the engine's sweep of the same inputs."""
    from taps_core.cluster.presets import preset
    from taps_core.models import build_graph, load_model_config
    from taps_core.studies.sweep import sweep_grid, sweep_inter_bandwidth
    from taps_core.studies.sweep_json import sweep_to_json

    args = [*SWEEP, "--from", "5", "--to", "400", "--points", "2", "--plans", "volume"]
    target = tmp_path / "sweep.json"  # one run: the JSON to a file, the table to stdout
    code, out, _ = _run([*args, "--json", str(target)], capsys)
    assert code == 0
    data = json.loads(target.read_text())
    assert [p["own"] for p in data["points"]] == [False, True, False]
    assert [p["bandwidth_GBps"] for p in data["points"]] == pytest.approx([5, 200, 400])
    for p in data["points"]:
        assert set(p["plans"]) == {"taps", "volume"}
        for plan in p["plans"].values():
            assert set(plan) >= PLAN_KEYS and plan["structure"].startswith("TP ")
    graph = build_graph(load_model_config("gpt2").with_workload(batch_size=8, seq_length=128))
    topo = preset("dgx-a100:2")
    sw = sweep_inter_bandwidth(
        graph, topo, sweep_grid(5e9, 400e9, 2, 200e9), labels=("taps", "volume")
    )
    assert _timeless(json.loads(json.dumps(sweep_to_json(sw)))) == _timeless(data)
    assert "(this cluster)" in out and "TP " in out  # the table: the same step times, rounded
    taps_own = data["points"][1]["plans"]["taps"]
    assert f"{taps_own['totals']['total_time_s'] * 1e3:.4g}" in out


def _timeless(data):
    """``data`` without the searches' wall-clock times (all else is deterministic)."""
    if isinstance(data, dict):
        return {k: _timeless(v) for k, v in data.items() if k != "time_s"}
    return [_timeless(v) for v in data] if isinstance(data, list) else data


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--from", "0", "--to", "10"], "--from"),
        (["--from", "nan", "--to", "10"], "--from"),
        (["--from", "10", "--to", "1"], "--to"),
        (["--from", "1", "--to", "10", "--points", "41"], "--points"),
        (["--from", "1", "--to", "10", "--plans", "alpa"], "--plans"),
        (["--from", "1", "--to", "10", "--workers", "0"], "--workers"),
    ],
)
def test_sweep_bad_input_names_the_flag(capsys, extra, flag):
    code, out, err = _run([*SWEEP, *extra], capsys)
    assert code == 2 and not out and err.count("\n") == 1 and err.startswith(f"error: {flag}")


def test_sweep_single_host_is_refused(capsys):
    code, _, err = _run(["sweep", "gpt2", "--topology", "dgx-a100:1", "--from", "1", "--to",
                         "2"], capsys)
    assert code == 2 and "--topology" in err and "2 or more hosts" in err


def test_sweep_table_says_why_a_plan_does_not_fit(capsys):
    code, out, _ = _run(["sweep", "gpt2", "--topology", "dgx-a100:2", "--batch", "3", "--seq",
                         "128", "--from", "100", "--to", "400", "--points", "1", "--plans",
                         "data_parallel"], capsys)
    assert code == 0 and "data_parallel does not fit at 2 of 2 bandwidths: data parallelism " \
        "needs the batch (3)" in out


def test_plan_prove_stages_states_the_proof(capsys):
    args = ["plan", "gpt2", "--topology", "dgx-a100:2", "--batch", "8", "--seq", "64"]
    code, plain, _ = _run([*args, "--json", "-"], capsys)
    assert code == 0
    code, proved, _ = _run([*args, "--prove-stages", "--json", "-"], capsys)
    assert code == 0
    plain, proved = json.loads(plain), json.loads(proved)
    assert proved["totals"] == plain["totals"]  # the same plan, a stronger claim
    assert "every pipeline shape bounded" in proved["search"]["note"]
    assert "not proven" not in proved["search"]["note"]
    assert proved["search"]["lower_bound_s"] <= proved["totals"]["total_time_s"]
    assert "not proven" in plain["search"]["claim"]
    assert "not proven" not in proved["search"]["claim"]
    code, table, _ = _run([*args, "--prove-stages"], capsys)
    assert code == 0 and ("optimal (proven)" in table or "of the proven bound" in table)
