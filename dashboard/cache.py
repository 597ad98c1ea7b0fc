"""Cached calls into taps_core. Arguments are plain hashable values (names, JSON text,
numbers); engine objects are rebuilt inside, so a cached result depends only on its arguments.

Plans, comparisons and sweeps are values (``st.cache_data``: each caller gets a copy). The
operator graph and topology are read-only engine objects shared between sessions
(``st.cache_resource``). A failure is cached too, as :class:`Failure`, so an infeasible
setting is not searched again on every rerun.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st

from dashboard.pipeline_view import relabel_stages
from taps_core.cluster.links import LinkModel
from taps_core.cluster.topology import Topology
from taps_core.errors import TapsError
from taps_core.ir.graph import OpGraph
from taps_core.plan.records import NotFitting, Plan
from taps_core.search.baselines import compare
from taps_core.search.planner import search

# what a loader may raise on hostile input besides TapsError: shown as one line, never a trace
LOADER_ERRORS = (TapsError, ValueError, TypeError, KeyError, OverflowError, RecursionError)
TTL = 6 * 60 * 60  # seconds; results depend only on their arguments, this just bounds memory


@dataclass(frozen=True)
class Failure:
    """A TapsError turned into a value: its one-line message."""

    message: str


Workload = tuple[str, str | None, int, int, str]  # model, uploaded text, batch, seq, dtype


@st.cache_resource(max_entries=16, show_spinner=False)
def graph(model: str, model_text: str | None, batch: int, seq: int, dtype: str) -> OpGraph:
    """Operator graph of a sample (by name) or uploaded config (by text). Raises TapsError."""
    from dashboard.bounds import check_config, check_json_text
    from taps_core.models import build_graph, config_from_text, load_model_config

    if model_text is not None:
        check_json_text(model_text, "config.json")
        cfg = config_from_text(model_text, name=model)
    else:
        cfg = load_model_config(model)
    check_config(cfg)  # before building: a million layers must not start
    return build_graph(cfg.with_workload(batch_size=batch, seq_length=seq, dtype=dtype))


def graph_or_failure(work: Workload) -> OpGraph | Failure:
    try:
        return graph(*work)
    except LOADER_ERRORS as err:
        return Failure(_message(err))


@st.cache_resource(max_entries=32, show_spinner=False)
def topology(topo_json: str) -> Topology:
    """The validated topology of its JSON text (within the dashboard's bounds)."""
    from dashboard.bounds import check_json_text, check_topology
    from taps_core.cluster.io import loads

    check_json_text(topo_json, "topology JSON")
    topo = loads(topo_json)
    check_topology(topo)
    return topo


@st.cache_resource(max_entries=32, show_spinner=False)
def link_model(topo_json: str) -> LinkModel:
    """Routed link model of a topology (patterns are cached inside and reused)."""
    return LinkModel(topology(topo_json))


@dataclass(frozen=True)
class Resolved:
    """A cluster as planned: JSON (None if invalid), base name, label, whether it was edited,
    and one message per refused edit (or the error, when ``json`` is None)."""

    json: str | None
    name: str
    label: str
    edited: bool
    messages: tuple[str, ...]


@st.cache_resource(max_entries=64, show_spinner=False)
def resolve_topology(
    source: str,
    nodes: int,
    custom: str,
    json_text: str | None,
    edits: tuple[str, ...],
    net_GBps: float = 0.0,
) -> Resolved:
    """The cluster of a source plus link edits plus an inter-node bandwidth (0: as built)."""
    from dashboard.state import base_topology
    from taps_core.cluster.edits import apply_edits_reporting, describe_edits, parse_edits
    from taps_core.cluster.io import dumps
    from taps_core.cluster.topology import scale_inter_bandwidth
    from taps_core.units import GB

    try:
        base = base_topology(source, nodes, custom, json_text)
    except LOADER_ERRORS as err:
        return Resolved(None, "invalid topology", "invalid topology", False, (_message(err),))
    topo, applied, errors = apply_edits_reporting(base, parse_edits(";".join(edits)))
    parts = [describe_edits(applied)] if applied else []
    if net_GBps and topo.nodes > 1:
        try:
            topo = scale_inter_bandwidth(topo, net_GBps * GB)
            parts.append(f"network {net_GBps:g} GB/s per host")
        except TapsError as err:
            errors.append(f"inter-node bandwidth skipped: {err}")
    label = ", ".join([base.name, *parts])
    return Resolved(dumps(topo), base.name, label, bool(parts), tuple(errors))


def _message(err: BaseException) -> str:
    """One line for an error from a loader (a TapsError is already one line)."""
    if isinstance(err, TapsError):
        return str(err)
    first = (str(err).splitlines() or [""])[0][:200]
    return f"input could not be read ({type(err).__name__}: {first})"


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def framework_plan(
    work: Workload, topo_json: str, mode: str, memory_limit_bytes: float | None
) -> Plan | None:
    """The fastest configuration Megatron-LM or DeepSpeed would run (the exhaustive search
    TAPS's own search starts from; seconds at most): what the page shows while TAPS searches,
    and the seed :func:`plan` hands on. None when the model has no such space or nothing fits."""
    from taps_core.search.planner import expert_plan

    g = graph_or_failure(work)
    if isinstance(g, Failure):
        return None
    try:
        found = expert_plan(g, topology(topo_json), mode=mode,
                            memory_limit_bytes=memory_limit_bytes, links=link_model(topo_json))
    except TapsError:
        return None
    return found


@st.cache_resource(max_entries=48, show_spinner=False)
def shared_view(what: str, key: Any, _build: Callable[[], Any]) -> Any:
    """A read-only view (a figure, or a figure and its layout) built once per ``what`` and
    ``key`` and shared by every session: ``key`` names everything ``_build`` reads (e.g.
    :func:`plan_args` and the title's tag) and nobody mutates the result. A warm rerun of a
    page then draws its charts without rebuilding them (about 0.15 s of a Plan page's 0.2 s)."""
    return _build()


@st.cache_resource(show_spinner=False)
def _planned() -> set[tuple[Any, ...]]:
    """Arguments of :func:`plan` calls that have returned (shared by sessions): a page can
    tell a cached plan from a search it would wait for. An entry outliving its cached value
    only means no preview is drawn before that search."""
    return set()


def plan_ready(*args: Any) -> bool:
    """Whether :func:`plan` with these arguments (positional, ``prove_stages`` last and
    optional) has returned before (see :func:`_planned`)."""
    return (args if len(args) == 6 else (*args, False)) in _planned()


def plan(
    work: Workload,
    topo_json: str,
    mode: str,
    cost_model: str,
    memory_limit_bytes: float | None,
    prove_stages: bool = False,
) -> Plan | Failure:
    """The searched plan (``taps`` label for the topology cost model, ``volume`` otherwise);
    ``prove_stages`` bounds every pipeline shape too (the same plan, a stronger claim).

    Every argument is passed on, defaults too: Streamlit keys a cached call by the arguments
    given, so a call leaving ``prove_stages`` out would miss the entry of one that says False
    and search again (the Plan page did, for its exports and reasons)."""
    return _plan(work, topo_json, mode, cost_model, memory_limit_bytes, bool(prove_stages))


@st.cache_data(ttl=TTL, max_entries=64, show_spinner=False)
def _plan(
    work: Workload,
    topo_json: str,
    mode: str,
    cost_model: str,
    memory_limit_bytes: float | None,
    prove_stages: bool,
) -> Plan | Failure:
    """:func:`plan`, cached under all six arguments."""
    g = graph_or_failure(work)
    if isinstance(g, Failure):
        return g
    seed = framework_plan(work, topo_json, mode, memory_limit_bytes) if (
        cost_model == "topology") else None
    try:
        found = search(
            g,
            topology(topo_json),
            mode=mode,
            cost_model=cost_model,
            memory_limit_bytes=memory_limit_bytes,
            label="taps" if cost_model == "topology" else "volume",
            links=link_model(topo_json),
            prove_stages=prove_stages,
            seed_plan=seed,
        )
    except TapsError as err:
        return Failure(str(err))
    finally:
        _planned().add((work, topo_json, mode, cost_model, memory_limit_bytes, prove_stages))
    return relabel_stages(found, g)


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def fixed(
    work: Workload, topo_json: str, mode: str, memory_limit_bytes: float | None, spec: str
) -> Plan | Failure:
    """The configuration ``spec`` (``--fixed`` syntax, a Megatron-LM argument list or a
    DeepSpeed config) priced by the same model, or Failure."""
    from taps_core.export.framework_import import fixed_from_text
    from taps_core.search.fixed_config import plan_fixed

    g = graph_or_failure(work)
    if isinstance(g, Failure):
        return g
    try:
        topo = topology(topo_json)
        config = fixed_from_text(spec, topo.num_gpus, g.meta["config"])
        return plan_fixed(
            g, topo, config, mode=mode,
            memory_limit_bytes=memory_limit_bytes, label="yours", links=link_model(topo_json),
        )
    except TapsError as err:
        return Failure(str(err))


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def comparison(
    work: Workload, topo_json: str, mode: str, memory_limit_bytes: float | None
) -> dict[str, Plan | NotFitting] | Failure:
    """TAPS against the volume, Megatron and data-parallel plans; TAPS's is the Plan page's
    (cached: not searched again)."""
    g = graph_or_failure(work)
    if isinstance(g, Failure):
        return g
    taps = plan(work, topo_json, mode, "topology", memory_limit_bytes)
    try:
        plans = compare(g, topology(topo_json), mode=mode, memory_limit_bytes=memory_limit_bytes,
                        known={"taps": taps} if isinstance(taps, Plan) else None)
    except TapsError as err:
        return Failure(str(err))
    return {k: relabel_stages(p, g) if isinstance(p, Plan) else p for k, p in plans.items()}


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def exports(
    work: Workload,
    topo_json: str,
    mode: str,
    cost_model: str,
    memory_limit_bytes: float | None,
    baseline: str | None = None,
) -> Any:
    """:func:`dashboard.exports.plan_exports` of the plan :func:`plan` returns, or of the
    ``baseline`` plan of :func:`comparison`; a Failure when there is no such plan."""
    from dashboard.exports import plan_exports
    from taps_core.plan.report import plan_to_json

    if baseline is None:
        p: Any = plan(work, topo_json, mode, cost_model, memory_limit_bytes)
    else:
        found = comparison(work, topo_json, mode, memory_limit_bytes)
        p = found if isinstance(found, Failure) else found.get(baseline)
    if isinstance(p, Failure):
        return p
    if not isinstance(p, Plan):
        return Failure(f"no {baseline} plan to export")
    return plan_exports(plan_to_json(p), model_text=work[1])


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def link_breakdown(
    work: Workload, topo_json: str, mode: str, cost_model: str, memory_limit_bytes: float | None
) -> Any:
    """Per-link bytes by op kind and the GPU x GPU matrix of the plan :func:`plan` returns.

    A pipelined plan's stages are broken down on their own hosts, and the sends between stages
    appear as the kind "pipeline send".
    """
    from taps_core.plan.traffic import gpu_traffic_matrix, link_traffic_by_op_kind

    p = plan(work, topo_json, mode, cost_model, memory_limit_bytes)
    if isinstance(p, Failure):
        return p
    links = link_model(topo_json)
    topo = topology(topo_json)
    return link_traffic_by_op_kind(p, topo, links), gpu_traffic_matrix(p, topo, links)


@st.cache_resource(max_entries=8, show_spinner=False)
def sweep_run(
    work: Workload,
    topo_json: str,
    mode: str,
    memory_limit_bytes: float | None,
    labels: tuple[str, ...],
    warm_taps: bool = False,
    parallel: bool = False,
) -> Any:
    """A :class:`taps_core.studies.sweep.SweepRun` shared by every session with these settings: the
    plans it has found survive reruns, page switches and interrupted sweeps. Or a Failure.
    ``parallel``: search grid points in worker processes (one per core; the same result)."""
    from taps_core.studies.sweep import SweepRun
    from taps_core.studies.sweep_jobs import default_workers

    g = graph_or_failure(work)
    if isinstance(g, Failure):
        return g
    try:
        return SweepRun(
            g,
            topology(topo_json),
            mode=mode,
            memory_limit_bytes=memory_limit_bytes,
            labels=labels,
            warm_taps=warm_taps,
            workers=default_workers() if parallel else 1,
        )
    except TapsError as err:
        return Failure(str(err))


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def why(
    work: Workload, topo_json: str, mode: str, cost_model: str, memory_limit_bytes: float | None
) -> Any:
    """``explain.decisions`` of the plan :func:`plan` returns (list), or Failure."""
    from taps_core.studies.explain import decisions

    p = plan(work, topo_json, mode, cost_model, memory_limit_bytes)
    if isinstance(p, Failure):
        return p
    try:
        return decisions(
            p, graph(*work), topology(topo_json), mode=mode, memory_limit_bytes=memory_limit_bytes
        )
    except TapsError as err:
        return Failure(str(err))


@st.cache_data(ttl=TTL, max_entries=32, show_spinner=False)
def explain(topo_json: str, size_bytes: float) -> Any:
    """The primer's example (:func:`taps_core.studies.explain.volume_vs_time`) or a Failure."""
    from taps_core.studies.explain import volume_vs_time

    try:
        return volume_vs_time(topology(topo_json), size_bytes)
    except TapsError as err:
        return Failure(str(err))
