"""Dashboard state: session keys, the URL that reproduces a view, and the topology spec.

Every setting lives under one ``st.session_state`` key (widgets own them; defaults are set
before a widget is drawn, never passed as ``value=``). On a session's first run the keys are
seeded from ``st.query_params``; every page writes the current settings back, so a copied URL
reproduces the view. A topology is spelled ``dgx-a100:2`` (preset), ``build:nodes=2,...``
(built on the Topology page) or ``json`` (uploaded; not reproducible from a URL), plus link
edits ``src~dst:bw=5:lat=2.5`` or ``src~dst:cut`` joined by ``;`` (GB/s and microseconds).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

import streamlit as st

from taps_core.cluster.edits import (
    EDIT_GBPS,
    LinkEdit,
    edits_text,
    parse_edits,
)
from taps_core.cluster.presets import MAX_PRESET_NODES, PRESETS, preset
from taps_core.cluster.topology import (
    A100_40GB_PCIE,
    A100_80GB,
    H100_80GB,
    Topology,
    build_cluster,
)
from taps_core.costs.ops import MODES
from taps_core.errors import InvalidInputError, TapsError
from taps_core.models import load_model_config, sample_names
from taps_core.search.flat import COST_MODELS
from taps_core.units import GB

DTYPES = ("bfloat16", "float16", "float32")
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
UPLOADED = "uploaded config.json"
CUSTOM = "custom"
TOPOLOGY_SOURCES = (*PRESETS, CUSTOM)
IMAGE_FORMATS = ("png", "svg")
MAX_NODES_UI = MAX_PRESET_NODES  # the engine's bound (2048 hosts)
# the build form's widget ranges: a URL may not ask for more than the form can
BUILD_RANGES: dict[str, tuple[float, float]] = {
    "nodes": (1, MAX_NODES_UI),
    "gpus": (1, 16),
    "intra_GBps": (0.1, 5000.0),
    "intra_lat_us": (0.0, 1000.0),
    "nvlink_pairs_GBps": (0.0, 5000.0),
    "pcie_GBps": (0.1, 5000.0),
    "nics": (1, 16),
    "nic_GBps": (0.01, 5000.0),
    "net_lat_us": (0.0, 1000.0),
}
# other widgets' ranges, shared by the widget and the URL parser (values outside are clamped)
RANGES: dict[str, tuple[float, float]] = {
    "batch": (1, 1 << 20),
    "seq": (1, 1 << 22),
    "mem_gib": (0.0, 1e6),
    "links_top": (4, 200),
    "sweep_lo": (0.01, 1e5),
    "sweep_hi": (0.01, 1e5),
    "sweep_points": (2, 12),
    "explain_gb": (0.01, 16.0),
    "net_GBps": (0.1, 10_000.0),
    "edit_GBps": EDIT_GBPS,
}
NET_STEPS = (0.5, 1, 2, 5, 10, 12.5, 25, 50, 100, 200, 400, 800, 1600)  # GB/s per host
GPUS = {"a100-80": A100_80GB, "a100-40-pcie": A100_40GB_PCIE, "h100-80": H100_80GB}


# ---- topology built on the Topology page ----------------------------------------------------


@dataclass(frozen=True)
class BuildSpec:
    """Parameters of ``taps_core.build_cluster`` in dashboard units (GB/s, µs)."""

    nodes: int = 2
    gpus: int = 8
    intra: str = "nvswitch"  # nvswitch | pcie
    intra_GBps: float = 300.0  # NVLink to the NVSwitch, or PCIe to the PCIe switch
    intra_lat_us: float = 1.0
    nvlink_pairs_GBps: float = 0.0  # PCIe boxes only: NVLink bridges between GPU pairs
    pcie_GBps: float = 32.0  # NVSwitch boxes only: each GPU's PCIe link to its NIC
    nics: int = 8
    nic_GBps: float = 25.0
    net_lat_us: float = 2.5
    gpu: str = "a100-80"

    def text(self) -> str:
        """``build:nodes=2,gpus=8,...`` (the URL form)."""
        return "build:" + ",".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in asdict(self).items()
        )

    @classmethod
    def parse(cls, text: str) -> BuildSpec:
        """Inverse of :meth:`text`; unknown, malformed or out-of-range fields (the build form's
        own ranges) raise InvalidInputError naming the field, before anything is built."""
        if len(text) > 400:
            raise InvalidInputError("topology spec", text, "at most 400 characters")
        body = text.removeprefix("build:")
        known = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for part in filter(None, body.split(",")):
            key, _, raw = part.partition("=")
            if key not in known:
                raise InvalidInputError("topology spec field", key, f"one of {sorted(known)}")
            kind = known[key]
            try:
                values[key] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
            except ValueError:
                raise InvalidInputError(f"topology spec {key}", raw, f"a {kind}") from None
        spec = cls(**values)
        if spec.gpu not in GPUS:
            raise InvalidInputError("topology spec gpu", spec.gpu, f"one of {sorted(GPUS)}")
        if spec.intra not in ("nvswitch", "pcie"):
            raise InvalidInputError("topology spec intra", spec.intra, "nvswitch or pcie")
        for key, (lo, hi) in BUILD_RANGES.items():
            v = getattr(spec, key)
            if not lo <= v <= hi:  # also refuses NaN
                raise InvalidInputError(f"topology spec {key}", v, f"between {lo:g} and {hi:g}")
        return spec

    @classmethod
    def from_topology(cls, topo: Topology) -> BuildSpec:
        """The build form's settings closest to ``topo`` (the builder starts from it)."""
        first = {d.name for d in topo.devices if d.host == 0}
        kinds = {d.name: d.kind for d in topo.devices}
        nvswitch = any(d.kind == "nvswitch" for d in topo.devices)
        gpu_links = [k for k in topo.links if k.src in first and kinds[k.src] == "gpu"]
        intra = [k for k in gpu_links if k.kind == ("nvlink" if nvswitch else "pcie")]
        pairs = [k for k in gpu_links if k.kind == "nvlink" and kinds[k.dst] == "gpu"]
        net = [k for k in topo.links if k.kind == "network" and (k.src in first or k.dst in first)]
        to_nic = [k for k in gpu_links if k.kind == "pcie" and kinds[k.dst] == "nic"]
        gpu = next((key for key, g in GPUS.items() if g.name == topo.gpu.name), "a100-80")

        def mean(values: list[float], default: float) -> float:
            return round(sum(values) / len(values), 6) if values else default

        base = cls()
        return cls(
            nodes=min(max(topo.nodes, 1), MAX_NODES_UI),
            gpus=min(max(topo.gpus_per_node, 1), 16),
            intra="nvswitch" if nvswitch else "pcie",
            intra_GBps=mean([k.bandwidth_Bps / GB for k in intra], base.intra_GBps),
            intra_lat_us=mean([k.latency_s * 1e6 for k in intra], base.intra_lat_us),
            nvlink_pairs_GBps=0.0 if nvswitch else mean([k.bandwidth_Bps / GB for k in pairs], 0.0),
            pcie_GBps=mean([k.bandwidth_Bps / GB for k in to_nic], base.pcie_GBps),
            nics=min(max(sum(kinds[n] == "nic" for n in first), 1), 16),
            nic_GBps=mean([k.bandwidth_Bps / GB for k in net], base.nic_GBps),
            net_lat_us=mean([k.latency_s * 1e6 for k in net], base.net_lat_us),
            gpu=gpu,
        )

    def build(self) -> Topology:
        """The validated topology (errors name the build_cluster argument)."""
        nvswitch = self.intra == "nvswitch"
        return build_cluster(
            self.nodes,
            self.gpus,
            name=f"custom:{self.nodes}x{self.gpus}",
            gpu=GPUS[self.gpu],
            intra=self.intra,
            intra_bandwidth_Bps=self.intra_GBps * GB if nvswitch else 300e9,
            pcie_bandwidth_Bps=self.pcie_GBps * GB if nvswitch else self.intra_GBps * GB,
            nvlink_pairs_bandwidth_Bps=(self.nvlink_pairs_GBps * GB or None)
            if not nvswitch
            else None,
            intra_latency_s=self.intra_lat_us * 1e-6,
            nics_per_node=self.nics,
            nic_bandwidth_Bps=self.nic_GBps * GB,
            inter_latency_s=self.net_lat_us * 1e-6,
        )


# ---- link edits ------------------------------------------------------------------------------


def base_topology(source: str, nodes: int, custom: str, json_text: str | None) -> Topology:
    """The unedited topology of a source (preset name, or ``custom`` = build spec / JSON)."""
    from dashboard.bounds import check_json_text, check_topology
    from taps_core.cluster.io import loads

    if source in PRESETS:
        if not 1 <= nodes <= MAX_NODES_UI:
            raise InvalidInputError("nodes", nodes, f"between 1 and {MAX_NODES_UI}")
        return preset(f"{source}:{nodes}")
    if custom == "json":
        if not json_text:
            raise InvalidInputError("topology", "json", "an uploaded topology JSON file")
        check_json_text(json_text, "topology JSON")
        topo = loads(json_text)
        check_topology(topo)
        return topo
    return BuildSpec.parse(custom).build()


# ---- session keys and the URL -----------------------------------------------------------------


class ClampedError(InvalidInputError):
    """A URL number outside its widget's range, brought to the nearest end of it."""

    def __init__(self, value: float, raw: str, lo: float, hi: float) -> None:
        self.clamped = value
        super().__init__("value", raw, f"between {lo:g} and {hi:g}; using {value:g}")


def _number(key: str, kind: type) -> Callable[[str], Any]:
    """Parser of a URL number for the widget ``key``: refuses non-numbers, clamps to range."""
    lo, hi = RANGES[key]

    def parse(raw: str) -> Any:
        try:
            v = kind(float(raw)) if kind is int and "e" in raw.lower() else kind(raw)
        except (ValueError, OverflowError):
            raise InvalidInputError(
                "value", raw, f"{'an integer' if kind is int else 'a number'}"
            ) from None
        if v != v or v in (float("inf"), float("-inf")):
            raise InvalidInputError("value", raw, "a finite number")
        if v <= 0 < lo:  # no such thing as a negative bandwidth or batch: refused, not clamped
            raise InvalidInputError("value", raw, f"a positive number from {lo:g} to {hi:g}")
        if not lo <= v <= hi:
            raise ClampedError(kind(min(max(v, lo), hi)), raw, lo, hi)
        return v

    return parse


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw not in options:
            raise InvalidInputError("value", raw, f"one of {list(options)}")
        return raw

    return parse


def _flag(raw: str) -> bool:
    if raw not in ("0", "1"):
        raise InvalidInputError("value", raw, "0 or 1")
    return raw == "1"


def _curves(raw: str) -> list[str]:
    from taps_core.search.baselines import BASELINES

    items = [c for c in raw.split(",") if c]
    bad = [c for c in items if c not in BASELINES]
    if bad:
        raise InvalidInputError("value", bad, f"labels among {list(BASELINES)}")
    return list(dict.fromkeys(items))


def _fmt_float(v: float) -> str:
    return f"{v:g}"


# URL name -> (session key, parser, formatter); shared settings first, then per-page ones
PARAMS: dict[str, tuple[str, Callable[[str], Any], Callable[[Any], str]]] = {
    "batch": ("batch", _number("batch", int), str),
    "seq": ("seq", _number("seq", int), str),
    "dtype": ("dtype", _choice(DTYPES), str),
    "mode": ("mode", _choice(MODES), str),
    "cost": ("cost", _choice(COST_MODELS), str),
    "mem": ("mem_gib", _number("mem_gib", float), _fmt_float),
    "net": ("net_GBps", _number("net_GBps", float), _fmt_float),
    "fmt": ("img_format", _choice(IMAGE_FORMATS), str),
    "expand": ("plan_expand", _flag, lambda v: "1" if v else "0"),
    "prove": ("plan_prove", _flag, lambda v: "1" if v else "0"),
    "yours": ("plan_yours", str.strip, str),
    "baseline": ("cmp_baseline", _choice(("volume", "megatron", "data_parallel")), str),
    "cmp_expand": ("cmp_expand", _flag, lambda v: "1" if v else "0"),
    "top": ("links_top", _number("links_top", int), str),
    "bw_lo": ("sweep_lo", _number("sweep_lo", float), _fmt_float),
    "bw_hi": ("sweep_hi", _number("sweep_hi", float), _fmt_float),
    "points": ("sweep_points", _number("sweep_points", int), str),
    "curves": ("sweep_curves", _curves, ",".join),
    "size": ("explain_gb", _number("explain_gb", float), _fmt_float),
    "overlay": ("topo_overlay", _flag, lambda v: "1" if v else "0"),
}
OPTIONAL_PARAMS = ("yours",)  # written into the URL only when set
SHARED_PARAMS = ("model", "batch", "seq", "dtype", "mode", "cost", "mem", "topo", "edits", "fmt")
MAX_URL_VALUE = 4000  # characters; longer values are refused unread

DEFAULTS: dict[str, Any] = {
    "model": "gpt2",
    "mode": "train",
    "cost": "topology",
    "mem_gib": 0.0,
    "topo": "dgx-a100",
    "nodes": 2,
    "topo_custom": BuildSpec().text(),
    "topo_json": None,
    "edits": (),
    "edits_base": "",
    "net_GBps": 0.0,  # 0: the cluster's own inter-node bandwidth
    "net_base": "",
    "net_for": "",  # the cluster the slider was last drawn for
    "img_format": "png",
    "model_upload": None,
    "plan_expand": False,
    "plan_prove": False,
    "plan_yours": "",
    "cmp_baseline": "volume",
    "cmp_expand": False,
    "links_top": 24,
    "links_metric": "busy",
    "sweep_lo": 1.0,
    "sweep_hi": 400.0,
    "sweep_points": 8,
    "sweep_curves": ["volume", "megatron", "data_parallel"],
    "explain_gb": 1.0,
    "topo_overlay": True,
    "editor_gen": 0,
    "model_has_seq": True,
}
# keys that must survive pages that do not draw their widget (Streamlit drops those otherwise)
PERSISTENT = (*DEFAULTS, "batch", "seq", "dtype")


def model_defaults(name: str, upload: dict[str, str] | None = None) -> dict[str, Any]:
    """batch / seq / dtype keys from a sample's (or the uploaded) config."""
    from taps_core.models import config_from_text

    if name == UPLOADED and upload:
        cfg = config_from_text(upload["text"], name=upload["name"])
    else:
        cfg = load_model_config(name if name in sample_names() else DEFAULTS["model"])
    dtype = DTYPE_ALIASES.get(cfg.dtype, cfg.dtype)
    lo_b, hi_b = RANGES["batch"]
    lo_s, hi_s = RANGES["seq"]
    return {
        "batch": int(min(max(cfg.batch_size, lo_b), hi_b)),
        "seq": int(min(max(cfg.seq_length, lo_s), hi_s)),
        "dtype": dtype if dtype in DTYPES else "bfloat16",
        "model_has_seq": getattr(cfg, "model_type", "") != "resnet",
    }


def topology_url(ss: Any) -> str:
    """The ``topo`` URL value of the current source."""
    if ss["topo"] in PRESETS:
        return f"{ss['topo']}:{ss['nodes']}"
    return "json" if ss["topo_custom"] == "json" else ss["topo_custom"]


def _apply_topology_param(ss: Any, raw: str) -> None:
    name, _, count = raw.partition(":")
    if name in PRESETS:
        try:
            nodes = int(count or "1")
        except ValueError:
            raise InvalidInputError("value", raw, "'name:NODES' with NODES an integer") from None
        if not 1 <= nodes <= MAX_NODES_UI:
            raise InvalidInputError("nodes", nodes, f"between 1 and {MAX_NODES_UI}")
        ss["topo"], ss["nodes"] = name, nodes
    elif raw.startswith("build:"):
        ss["topo"], ss["topo_custom"] = CUSTOM, BuildSpec.parse(raw).text()
    elif raw == "json":
        raise InvalidInputError(
            "value",
            raw,
            "a preset or build spec (uploaded JSON topologies "
            "cannot travel in a URL; download and share the file)",
        )
    else:
        raise InvalidInputError("value", raw, f"'name:NODES' with name in {sorted(PRESETS)}")


def init_session() -> list[str]:
    """Seed session keys: defaults, then the URL (first run of a session only).

    Returns one warning per URL parameter that was ignored or clamped into its widget's range.
    Nothing from the URL is used before it is checked, and nothing in it raises.
    """
    ss = st.session_state
    warnings: list[str] = []
    if ss.get("_initialised"):
        for key in PERSISTENT:  # re-assigning keeps widget values across page switches
            if key in ss:
                ss[key] = ss[key]
        return warnings
    for key, value in DEFAULTS.items():
        ss.setdefault(key, list(value) if isinstance(value, list) else value)
    qp = {k: v for k, v in st.query_params.items() if len(v) <= MAX_URL_VALUE}
    for k in set(st.query_params) - set(qp):
        warnings.append(f"{k} ignored: longer than {MAX_URL_VALUE} characters")
    model = qp.get("model")
    workload_params = ("batch", "seq", "dtype")
    if model == "upload":  # the workload fields belonged to a config.json that did not travel
        warnings.append(
            "this link was made with an uploaded config.json, which cannot travel in a URL: "
            "upload it again in the sidebar (showing the default model meanwhile)"
        )
        qp = {k: v for k, v in qp.items() if k not in workload_params}
    elif model is not None:
        if model in sample_names():
            ss["model"] = model
        else:
            warnings.append(f"model={model!r} ignored: must be one of {sample_names()}")
    ss.update(model_defaults(ss["model"]))
    if "topo" in qp:
        try:
            _apply_topology_param(ss, qp["topo"])
        except TapsError as err:
            warnings.append(f"topo={qp['topo']!r} ignored: {err}")
    if "edits" in qp:
        try:
            ss["edits"] = parse_edits(qp["edits"])
            ss["edits_base"] = topology_url(ss)
        except TapsError as err:
            warnings.append(f"edits ignored: {err}")
    for name, (key, parse, _) in PARAMS.items():
        if name in qp:
            try:
                ss[key] = parse(qp[name])
            except ClampedError as err:
                ss[key] = err.clamped
                warnings.append(f"{name}={qp[name]!r} clamped: {err}")
            except TapsError as err:
                warnings.append(f"{name}={qp[name]!r} ignored: {err}")
    if ss["net_GBps"]:
        ss["net_base"] = ss["net_for"] = topology_url(ss)
    ss["_initialised"] = True
    return warnings


def set_url(*page_params: str) -> None:
    """Write the shared settings plus the named page parameters into the URL."""
    ss = st.session_state
    want = {"model": "upload" if ss["model"] == UPLOADED else ss["model"], "topo": topology_url(ss)}
    if active_edits(ss):
        want["edits"] = edits_text(ss["edits"])
    if active_net(ss):
        want["net"] = _fmt_float(active_net(ss))
    for name in (*SHARED_PARAMS, *page_params):
        if name in PARAMS:
            key, _, fmt = PARAMS[name]
            if key in ss and (ss[key] or name not in OPTIONAL_PARAMS):
                want[name] = fmt(ss[key])
    if dict(st.query_params) != want:
        st.query_params.from_dict(want)


def active_edits(ss: Any) -> tuple[LinkEdit, ...]:
    """Link edits of the current base topology (edits made on another base are dropped)."""
    return tuple(ss["edits"]) if ss.get("edits_base") == topology_url(ss) else ()


def active_net(ss: Any) -> float:
    """The inter-node bandwidth (GB/s per host) set for the current base topology, or 0."""
    return float(ss.get("net_GBps") or 0.0) if ss.get("net_base") == topology_url(ss) else 0.0


# ---- what pages read ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """The shared settings of this run, in engine units, ready for :mod:`dashboard.cache`.

    ``model_error`` / ``topology_error`` hold a one-line message when the sidebar inputs do not
    make a model or a cluster; pages that need the missing piece show it and stop.
    """

    model: str
    model_text: str | None
    batch: int
    seq: int
    dtype: str
    mode: str
    cost_model: str
    memory_limit_bytes: float | None
    topo_json: str | None
    topo_label: str
    topo_url: str
    model_error: str | None = None
    topology_error: str | None = None
    edit_errors: tuple[str, ...] = ()
    topo_name: str = ""  # the base cluster's name (``dgx-a100:2``), before any edit
    edited: bool = False  # links edited, hosts added or the inter-node bandwidth changed

    @property
    def tag(self) -> str:
        """What a chart shows, for its title: model, cluster (with its edits by value), mode,
        batch."""
        mode = "training" if self.mode == "train" else "inference"
        cluster = self.topo_label if self.edited else self.topo_name
        return f"{self.model} · {cluster} · {mode} · batch {self.batch}"

    def file_stem(self, chart: str) -> str:
        """Export file name without extension: ``gpt2_dgx-a100-2_train_links``."""
        import re

        topo = self.topo_name + ("-edited" if self.edited else "")
        parts = (self.model, topo, self.mode, chart)
        return "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", p).strip("-") for p in parts)[:120]

    @property
    def workload(self) -> tuple[str, str | None, int, int, str]:
        """(model, uploaded text, batch, seq, dtype): the graph's cache key."""
        return self.model, self.model_text, self.batch, self.seq, self.dtype
