"""Emulated multi-node cluster, gloo launcher and calibration (package ``validation``).

The pure tests (formulas, fit, parsing, topology format) run anywhere. The cluster tests need
root, working ``ip netns``/``tc`` and torch with gloo; they skip with the reason otherwise. Each
cluster test builds a fresh 2-node cluster at a low rate and tears it down in a finalizer that
also checks no ``taps-`` namespace is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(REPO))

from validation import cli, cluster, names, preflight  # noqa: E402
from validation.fit import Sample, fit_level, summarize  # noqa: E402
from validation.formulas import (  # noqa: E402
    LevelParams,
    link_level_time_s,
    ring_bytes_per_rank,
    ring_time_s,
)
from validation.launcher import LaunchError, launch, placements  # noqa: E402

RATE_MBIT = 100.0  # 12.5 MB/s per link and direction: an 8 MiB cross-node all-reduce ~0.7 s
MiB = 2**20


def _taps_namespaces() -> list[str]:
    return [ns for ns in cluster.list_namespaces() if ns.startswith(names.PREFIX)]


# ---------------------------------------------------------------- pure (no root needed)


def test_ring_formulas_match_primer() -> None:
    s = 8 * MiB
    assert ring_time_s("all_reduce", 4, s, 1e-3, 1e-8) == pytest.approx(6e-3 + 1.5 * s * 1e-8)
    assert ring_bytes_per_rank("all_gather", 4, s) == pytest.approx(0.75 * s)
    assert ring_bytes_per_rank("reduce_scatter", 2, s) == pytest.approx(0.5 * s)
    assert ring_bytes_per_rank("all_to_all", 4, s) == pytest.approx(0.75 * s / 4)
    with pytest.raises(ValueError):
        ring_time_s("broadcast", 2, s, 0.0, 1e-9)


def test_link_level_model_sees_shared_nic() -> None:
    intra, inter = LevelParams(0.0, 1e-9), LevelParams(0.0, 1e-7)
    one = link_level_time_s("all_reduce", [[0, 2]], 4 * MiB, 2, intra, inter)
    two = link_level_time_s("all_reduce", [[0, 2], [1, 3]], 4 * MiB, 2, intra, inter)
    assert one == pytest.approx(4 * MiB * 1e-7)
    assert two == pytest.approx(2 * one)


def test_fit_recovers_alpha_beta_and_clamps_negative_alpha() -> None:
    alpha, beta = 3e-4, 4e-8
    samples = [Sample(k, p, s, ring_time_s(k, p, s, alpha, beta))
               for k in ("all_reduce", "all_gather", "all_to_all") for p in (2, 4)
               for s in (64 * 2**10, MiB, 8 * MiB)]
    fit = fit_level(samples)
    assert fit.params.alpha_s == pytest.approx(alpha, rel=1e-6)
    assert fit.params.beta_s_per_byte == pytest.approx(beta, rel=1e-6)
    assert fit.rms_rel_error < 1e-9
    # times below the bandwidth line would need a negative alpha: clamp to 0
    low = [Sample("all_reduce", 2, s, s * beta - 1e-3) for s in (8 * MiB, 16 * MiB, 32 * MiB)]
    assert fit_level(low).params.alpha_s == 0.0


def test_summarize_takes_slowest_rank_then_median() -> None:
    recs = [{"scenario": "x", "kind": "all_reduce", "size_bytes": 8, "p": 2, "groups": [[0, 1]],
             "repeat": rep, "rank": rank, "seconds": t}
            for rep, (a, b) in enumerate([(1.0, 2.0), (3.0, 1.0), (5.0, 6.0)])
            for rank, t in ((0, a), (1, b))]
    (row,) = summarize(recs)
    assert row["median_s"] == 3.0 and row["min_s"] == 2.0 and row["max_s"] == 6.0


def test_sizes_kinds_and_placement() -> None:
    assert cli.parse_sizes("4K,64K,1M,8MiB,1M") == [4096, 65536, MiB, 8 * MiB]
    assert cli.parse_kinds("all-reduce,all_to_all") == ["all_reduce", "all_to_all"]
    places = placements(2, 2)
    assert [(p.rank, p.namespace, p.ifname, p.ip) for p in places] == [
        (0, "taps-n0", "taps-v0", "10.99.0.1"), (1, "taps-n0", "taps-v0", "10.99.0.1"),
        (2, "taps-n1", "taps-v1", "10.99.0.2"), (3, "taps-n1", "taps-v1", "10.99.0.2")]
    assert names.is_ours("taps-n12") and names.is_ours("taps-br")
    assert not names.is_ours("taps-other") and not names.is_ours("n0")


def test_calibrated_topology_loads_in_engine(tmp_path: Path) -> None:
    from taps_core.cluster.io import load_topology
    from validation.calibrate import write_outputs

    fits = {"intra": {"alpha_s": 2e-4, "beta_s_per_byte": 1 / 8e8, "bandwidth_Bps": 8e8},
            "inter": {"alpha_s": 1e-3, "beta_s_per_byte": 1 / 2.3e7, "bandwidth_Bps": 2.3e7}}
    calib = {"meta": {"nodes": 2, "ranks_per_node": 2}, "fits": fits, "rows": []}
    topo_path, raw = write_outputs(tmp_path / "topo.json", calib)
    topo = load_topology(str(topo_path))
    assert (topo.nodes, topo.gpus_per_node) == (2, 2)
    nic = next(k for k in topo.links if k.kind == "network")
    assert nic.bandwidth_Bps == pytest.approx(2.3e7) and nic.latency_s == pytest.approx(5e-4)
    assert json.loads(raw.read_text())["topology_file"] == "topo.json"


def test_cli_says_why_and_exits_2_without_prerequisites(monkeypatch, capsys) -> None:
    monkeypatch.setattr(preflight, "missing_tools", lambda: "needs root: test")
    assert cli.main(["cluster", "up", "--nodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "validation: needs root: test"
    monkeypatch.setattr(preflight, "missing_tools", lambda: None)
    monkeypatch.setattr(preflight, "torch_missing", lambda: "needs torch: test")
    assert cli.main(["calibrate", "--out", "x.json"]) == 2


# ---------------------------------------------------------------- on the emulated cluster


@pytest.fixture(scope="module")
def cluster_ok() -> None:
    """Skip the module's cluster tests unless this machine can build the cluster."""
    reason = preflight.netns_broken() or preflight.torch_missing()
    if reason:
        pytest.skip(reason)
    if _taps_namespaces():
        pytest.skip("a taps- cluster is already up: run `python -m validation cluster down`")


@pytest.fixture
def emulated(cluster_ok, request) -> cluster.ClusterState:
    """A fresh 2 nodes x 2 ranks cluster at RATE_MBIT, always removed afterwards."""

    def teardown() -> None:
        cluster.down()
        assert _taps_namespaces() == []

    request.addfinalizer(teardown)
    return cluster.up(2, 2, RATE_MBIT)


def test_cluster_layout(emulated) -> None:
    assert sorted(_taps_namespaces()) == ["taps-br", "taps-n0", "taps-n1"]
    for k in range(2):
        ns = names.node_ns(k)
        addrs = subprocess.run(["ip", "-n", ns, "-o", "addr", "show"], capture_output=True,
                               text=True, check=True).stdout
        inet = [line.split()[1:4] for line in addrs.splitlines() if " inet" in line]
        assert ["lo", "inet", "127.0.0.1/8"] in inet
        assert [f"taps-v{k}", "inet", f"10.99.0.{k + 1}/24"] in inet
        assert all(dev in ("lo", f"taps-v{k}") for dev, _, _ in inet)
        for where, dev in ((ns, f"taps-v{k}"), ("taps-br", f"taps-b{k}")):
            cls = subprocess.run(["tc", "-n", where, "class", "show", "dev", dev],
                                 capture_output=True, text=True, check=True).stdout
            assert "htb" in cls and "rate 100Mbit" in cls and "ceil 100Mbit" in cls


def test_launcher_places_ranks_in_node_namespaces(emulated) -> None:
    got = launch("validation.rank_jobs:whereami", nodes=2, ranks_per_node=2, timeout_s=60)
    assert [g["ifname"] for g in got] == ["taps-v0", "taps-v0", "taps-v1", "taps-v1"]
    inodes = [g["netns_inode"] for g in got]
    assert inodes[0] == inodes[1] != inodes[2] == inodes[3]


def test_rank_failure_and_timeout_leave_no_process(emulated) -> None:
    with pytest.raises(LaunchError, match="failed on purpose"):
        launch("validation.rank_jobs:stall", nodes=2, ranks_per_node=2, timeout_s=60,
               kwargs={"seconds": 60, "fail_rank": 3})
    started = time.monotonic()
    with pytest.raises(LaunchError, match="timed out"):
        launch("validation.rank_jobs:stall", nodes=2, ranks_per_node=2, timeout_s=8,
               kwargs={"seconds": 60})
    assert time.monotonic() - started < 25
    for ns in ("taps-n0", "taps-n1"):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        assert pids.stdout.split() == []


def test_allreduce_is_right_and_cross_node_time_follows_shaped_rate(emulated) -> None:
    from validation.benchmark import run_benchmark

    size = 8 * MiB
    bench = run_benchmark(
        nodes=2, ranks_per_node=2, repeats=3, timeout_s=120, kinds=["all_reduce"],
        sizes=[64 * 2**10, size],
        scenarios=[{"name": "world", "groups": [[0, 1, 2, 3]]},
                   {"name": "cross-node", "groups": [[0, 2]]}])
    # every rank verified its result (values filled before, exact float32 sums compared after)
    assert len(bench["checks"]) == 2 * (4 + 2) and all(c["ok"] for c in bench["checks"])
    row = next(r for r in bench["rows"]
               if r["scenario"] == "cross-node" and r["size_bytes"] == size)
    shaped = ring_time_s("all_reduce", 2, size, 0.0, 8 / (RATE_MBIT * 1e6))
    assert 0.8 * shaped < row["median_s"] < 2.0 * shaped, (row, shaped)


def test_down_is_idempotent_and_kills_leftover_ranks(cluster_ok) -> None:
    cluster.down()
    assert cluster.down() == {"namespaces": [], "killed": []}
    try:
        cluster.up(2, 1, RATE_MBIT)
        leftover = subprocess.Popen(["ip", "netns", "exec", "taps-n1", "sleep", "300"])
        time.sleep(0.3)
        done = subprocess.run([sys.executable, "-m", "validation", "cluster", "down"],
                              cwd=REPO, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert leftover.wait(timeout=10) != 0
    finally:
        cluster.down()
    assert _taps_namespaces() == []
