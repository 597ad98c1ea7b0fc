"""Use the cluster that is up, or bring one up for the length of a command and remove it after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from validation import cluster


@contextmanager
def ensure_cluster(nodes: int, ranks_per_node: int, rate_mbit: float | None = None,
                   intra_rate_mbit: float | None = None) -> Iterator[cluster.ClusterState]:
    """Yield the state of a ``nodes``-node cluster.

    An existing cluster with the same node count is reused (and left up); ``rate_mbit`` and
    ``intra_rate_mbit`` (Mbit/s) must then match its rates if given. Otherwise a new cluster is
    built at ``rate_mbit`` (default :data:`validation.cluster.DEFAULT_RATE_MBIT`) with loopback
    shaped at ``intra_rate_mbit`` (default unshaped) and removed on exit, also after an error.
    """
    present = cluster.node_namespaces()
    if present:
        state = cluster.read_state()
        if len(present) != nodes or state is None:
            raise cluster.ClusterError(
                f"a cluster with {len(present)} node(s) is up; run `python -m validation "
                f"cluster down` or pass --nodes {len(present)}"
            )
        if rate_mbit is not None and abs(rate_mbit - state.rate_mbit) > 1e-9:
            raise cluster.ClusterError(
                f"the cluster that is up is shaped at {state.rate_mbit:g} Mbit/s, not "
                f"{rate_mbit:g}; run `python -m validation cluster down` first"
            )
        if intra_rate_mbit is not None and intra_rate_mbit != state.intra_rate_mbit:
            raise cluster.ClusterError(
                f"the cluster that is up has loopback rate {state.intra_rate_mbit}, not "
                f"{intra_rate_mbit:g} Mbit/s; run `python -m validation cluster down` first"
            )
        state.ranks_per_node = ranks_per_node
        yield state
        return
    state = cluster.up(nodes, ranks_per_node,
                       cluster.DEFAULT_RATE_MBIT if rate_mbit is None else rate_mbit,
                       intra_rate_mbit)
    try:
        yield state
    finally:
        cluster.down()
