"""Cached calls into taps_core. Arguments are plain hashable values (names, JSON text,
numbers); engine objects are rebuilt inside, so a cached result depends only on its arguments.

Plans, comparisons and sweeps are values (``st.cache_data``: each caller gets a copy). The
operator graph and topology are read-only engine objects shared between sessions
(``st.cache_resource``). A failure is cached too, as :class:`Failure`, so an infeasible
setting is not searched again on every rerun.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import streamlit as st

from taps_core.errors import TapsError
from taps_core.graph import OpGraph
from taps_core.linkmodel import LinkModel
from taps_core.plan import Plan
from taps_core.planner import NotFitting, compare, search
from taps_core.topology import Topology

TTL = 6 * 60 * 60  # seconds; results depend only on their arguments, this just bounds memory


@dataclass(frozen=True)
class Failure:
    """A TapsError turned into a value: its one-line message."""

    message: str


Workload = tuple[str, str | None, int, int, str]  # model, uploaded text, batch, seq, dtype


@st.cache_resource(max_entries=16, show_spinner=False)
def graph(model: str, model_text: str | None, batch: int, seq: int, dtype: str) -> OpGraph:
    """Operator graph of a sample (by name) or uploaded config (by text). Raises TapsError."""
    from taps_core.models import build_graph, config_from_text, load_model_config

    cfg = (
        config_from_text(model_text, name=model)
        if model_text is not None
        else load_model_config(model)
    )
    return build_graph(cfg.with_workload(batch_size=batch, seq_length=seq, dtype=dtype))


def graph_or_failure(work: Workload) -> OpGraph | Failure:
    try:
        return graph(*work)
    except TapsError as err:
        return Failure(str(err))


@st.cache_resource(max_entries=32, show_spinner=False)
def topology(topo_json: str) -> Topology:
    """The validated topology of its JSON text."""
    from taps_core.topology_io import loads

    return loads(topo_json)


@st.cache_resource(max_entries=32, show_spinner=False)
def link_model(topo_json: str) -> LinkModel:
    """Routed link model of a topology (patterns are cached inside and reused)."""
    return LinkModel(topology(topo_json))


@st.cache_resource(max_entries=64, show_spinner=False)
def resolve_topology(
    source: str, nodes: int, custom: str, json_text: str | None, edits: tuple[str, ...]
) -> tuple[str | None, str, tuple[str, ...]]:
    """(topology JSON or None, label, messages) of a source plus link edits."""
    from dashboard.state import apply_edits, base_topology, parse_edits
    from taps_core.topology_io import dumps

    try:
        base = base_topology(source, nodes, custom, json_text)
    except TapsError as err:
        return None, "invalid topology", (str(err),)
    topo, errors = apply_edits(base, parse_edits(";".join(edits)))
    label = topo.name + (
        f" with {len(edits) - len(errors)} link edit(s)" if len(edits) > len(errors) else ""
    )
    return dumps(topo), label, tuple(errors)


@st.cache_data(ttl=TTL, max_entries=64, show_spinner=False)
def plan(
    work: Workload, topo_json: str, mode: str, cost_model: str, memory_limit_bytes: float | None
) -> Plan | Failure:
    """The searched plan (``taps`` label for the topology cost model, ``volume`` otherwise)."""
    g = graph_or_failure(work)
    if isinstance(g, Failure):
        return g
    try:
        return search(
            g,
            topology(topo_json),
            mode=mode,
            cost_model=cost_model,
            memory_limit_bytes=memory_limit_bytes,
            label="taps" if cost_model == "topology" else "volume",
            links=link_model(topo_json),
        )
    except TapsError as err:
        return Failure(str(err))


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def comparison(
    work: Workload, topo_json: str, mode: str, memory_limit_bytes: float | None
) -> dict[str, Plan | NotFitting] | Failure:
    """TAPS against the volume, Megatron and data-parallel plans."""
    g = graph_or_failure(work)
    if isinstance(g, Failure):
        return g
    try:
        return compare(g, topology(topo_json), mode=mode, memory_limit_bytes=memory_limit_bytes)
    except TapsError as err:
        return Failure(str(err))


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def link_breakdown(
    work: Workload, topo_json: str, mode: str, cost_model: str, memory_limit_bytes: float | None
) -> Any:
    """Per-link bytes by op kind and the GPU x GPU matrix of the plan :func:`plan` returns."""
    from taps_core.traffic import gpu_traffic_matrix, link_traffic_by_op_kind

    p = plan(work, topo_json, mode, cost_model, memory_limit_bytes)
    if isinstance(p, Failure):
        return p
    links = link_model(topo_json)
    topo = topology(topo_json)
    return link_traffic_by_op_kind(p, topo, links), gpu_traffic_matrix(p, topo, links)


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def sweep(
    work: Workload,
    topo_json: str,
    mode: str,
    memory_limit_bytes: float | None,
    bandwidths_Bps: tuple[float, ...],
    labels: tuple[str, ...],
) -> Any:
    """:func:`taps_core.sweep.sweep_inter_bandwidth` (a ``Sweep``) or a Failure."""
    from taps_core.sweep import sweep_inter_bandwidth

    g = graph_or_failure(work)
    if isinstance(g, Failure):
        return g
    try:
        return sweep_inter_bandwidth(
            g,
            topology(topo_json),
            bandwidths_Bps,
            mode=mode,
            memory_limit_bytes=memory_limit_bytes,
            labels=labels,
        )
    except TapsError as err:
        return Failure(str(err))


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def explain(topo_json: str, size_bytes: float) -> Any:
    """The primer's example (:func:`taps_core.explain.volume_vs_time`) or a Failure."""
    from taps_core.explain import volume_vs_time

    try:
        return volume_vs_time(topology(topo_json), size_bytes)
    except TapsError as err:
        return Failure(str(err))
