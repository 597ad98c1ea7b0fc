"""The DTensor export executed on the emulated 2 nodes x 2 ranks cluster (``validation``).

Needs root, ``ip netns``/``tc`` and torch with gloo, and skips with the reason otherwise. It
builds a fresh cluster and removes it (namespaces and rank processes) in a finalizer that runs
also when the test fails. About 15 s: four exported plans, one training step each.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(REPO))

from validation import cluster, names, preflight  # noqa: E402


@pytest.fixture
def emulated(request) -> cluster.ClusterState:
    """A fresh 2 x 2 cluster, removed afterwards (also on failure) with every rank process."""
    reason = preflight.netns_broken() or preflight.torch_missing()
    if reason:
        pytest.skip(reason)
    if cluster.our_namespaces():
        pytest.skip("a taps- cluster is already up: run `python -m validation cluster down`")

    def teardown() -> None:
        cluster.down()
        assert [ns for ns in cluster.list_namespaces() if ns.startswith(names.PREFIX)] == []

    request.addfinalizer(teardown)
    return cluster.up(2, 2, 400.0)


def test_dtensor_exports_match_one_process(emulated) -> None:
    """Each exported snippet, run as is with gloo on a CPU DeviceMesh: the loss and every
    parameter gradient (full tensors, on every rank) equal one process's within 1e-4."""
    from validation.dtensor_run import validate

    checks = {c.label: c for c in validate(nodes=2, ranks_per_node=2, timeout_s=90)}
    assert set(checks) == {"megatron", "data_parallel", "megatron-sp", "mixed"}
    for label, chk in checks.items():
        assert chk.ok, (label, chk)
        assert abs(chk.loss - chk.ref_loss) <= 1e-4 * abs(chk.ref_loss), (label, chk)
    assert checks["megatron"].mesh == [2, 2] and checks["data_parallel"].mesh == [4, 1]
    # the plans reach every parallel style the export writes
    used = set().union(*(c.styles for c in checks.values()))
    assert used == {"ColwiseParallel", "RowwiseParallel", "SequenceParallel",
                    "PrepareModuleInput", "PrepareModuleOutput", "PrepareModuleInputOutput"}
