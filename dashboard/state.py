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

from taps_core.errors import InvalidInputError, TapsError, check_positive
from taps_core.models import load_model_config, sample_names
from taps_core.presets import PRESETS, preset
from taps_core.topology import A100_40GB_PCIE, A100_80GB, H100_80GB, Topology, build_cluster

GB = 1e9
GiB = 2**30
DTYPES = ("bfloat16", "float16", "float32")
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
MODES = ("train", "infer")
COST_MODELS = ("topology", "volume")
UPLOADED = "uploaded config.json"
CUSTOM = "custom"
TOPOLOGY_SOURCES = (*PRESETS, CUSTOM)
IMAGE_FORMATS = ("png", "svg")
MAX_NODES_UI = 64
GPUS = {"a100-80": A100_80GB, "a100-40-pcie": A100_40GB_PCIE, "h100-80": H100_80GB}


# ---- topology built on the Topology page ----------------------------------------------------


@dataclass(frozen=True)
class BuildSpec:
    """Parameters of :func:`taps_core.topology.build_cluster` in dashboard units (GB/s, µs)."""

    nodes: int = 2
    gpus: int = 8
    intra: str = "nvswitch"  # nvswitch | pcie
    intra_GBps: float = 300.0  # NVLink to the NVSwitch, or PCIe to the PCIe switch
    intra_lat_us: float = 1.0
    nvlink_pairs_GBps: float = 0.0  # PCIe boxes only: NVLink bridges between GPU pairs
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
        """Inverse of :meth:`text`; unknown or malformed fields raise InvalidInputError."""
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
        if not 1 <= spec.nodes <= MAX_NODES_UI:
            raise InvalidInputError("topology spec nodes", spec.nodes, f"1..{MAX_NODES_UI}")
        return spec

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
            pcie_bandwidth_Bps=32e9 if nvswitch else self.intra_GBps * GB,
            nvlink_pairs_bandwidth_Bps=(self.nvlink_pairs_GBps * GB or None)
            if not nvswitch
            else None,
            intra_latency_s=self.intra_lat_us * 1e-6,
            nics_per_node=self.nics,
            nic_bandwidth_Bps=self.nic_GBps * GB,
            inter_latency_s=self.net_lat_us * 1e-6,
        )


# ---- link edits ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkEdit:
    """One edited link: new bandwidth (GB/s) and/or latency (µs), or cut."""

    src: str
    dst: str
    bandwidth_GBps: float | None = None
    latency_us: float | None = None
    cut: bool = False

    def text(self) -> str:
        head = f"{self.src}~{self.dst}"
        if self.cut:
            return head + ":cut"
        parts = [head]
        if self.bandwidth_GBps is not None:
            parts.append(f"bw={self.bandwidth_GBps:g}")
        if self.latency_us is not None:
            parts.append(f"lat={self.latency_us:g}")
        return ":".join(parts)


def parse_edits(text: str) -> tuple[LinkEdit, ...]:
    """``a~b:bw=5:lat=2;c~d:cut`` -> edits (InvalidInputError names the bad entry)."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(";"))):
        head, *opts = item.split(":")
        src, sep, dst = head.partition("~")
        if not sep or not src or not dst:
            raise InvalidInputError("edits", item, "'src~dst:bw=GBps:lat=us' or 'src~dst:cut'")
        kw: dict[str, Any] = {}
        for opt in opts:
            key, _, raw = opt.partition("=")
            if key == "cut" and not raw:
                kw["cut"] = True
            elif key in ("bw", "lat"):
                try:
                    value = float(raw)
                except ValueError:
                    raise InvalidInputError(f"edits {head} {key}", raw, "a number") from None
                kw["bandwidth_GBps" if key == "bw" else "latency_us"] = value
            else:
                raise InvalidInputError(f"edits {head}", opt, "bw=..., lat=... or cut")
        out.append(LinkEdit(src, dst, **kw))
    return tuple(out)


def edits_text(edits: tuple[LinkEdit, ...]) -> str:
    return ";".join(e.text() for e in edits)


def apply_edits(topology: Topology, edits: tuple[LinkEdit, ...]) -> tuple[Topology, list[str]]:
    """Apply edits one by one; an edit the engine rejects is skipped and its error returned."""
    errors = []
    for e in edits:
        try:
            if e.cut:
                topology = topology.without_link(e.src, e.dst)
            else:
                bw = None if e.bandwidth_GBps is None else e.bandwidth_GBps * GB
                lat = None if e.latency_us is None else e.latency_us * 1e-6
                if bw is not None:
                    check_positive(f"link {e.src}-{e.dst} bandwidth (GB/s)", bw)
                if lat is not None:
                    check_positive(f"link {e.src}-{e.dst} latency (µs)", lat, allow_zero=True)
                topology = topology.with_link(e.src, e.dst, bandwidth_Bps=bw, latency_s=lat)
        except TapsError as err:
            errors.append(f"edit {e.text()} skipped: {err}")
    return topology, errors


def base_topology(source: str, nodes: int, custom: str, json_text: str | None) -> Topology:
    """The unedited topology of a source (preset name, or ``custom`` = build spec / JSON)."""
    from taps_core.topology_io import loads

    if source in PRESETS:
        return preset(f"{source}:{nodes}")
    if custom == "json":
        if not json_text:
            raise InvalidInputError("topology", "json", "an uploaded topology JSON file")
        return loads(json_text)
    return BuildSpec.parse(custom).build()


# ---- session keys and the URL -----------------------------------------------------------------


def _int(lo: int, hi: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            v = int(raw)
        except ValueError:
            raise InvalidInputError("value", raw, "an integer") from None
        if not lo <= v <= hi:
            raise InvalidInputError("value", v, f"between {lo} and {hi}")
        return v

    return parse


def _float(lo: float, hi: float) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            v = float(raw)
        except ValueError:
            raise InvalidInputError("value", raw, "a number") from None
        if not lo <= v <= hi:
            raise InvalidInputError("value", v, f"between {lo:g} and {hi:g}")
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
    from taps_core.planner import BASELINES

    items = [c for c in raw.split(",") if c]
    bad = [c for c in items if c not in BASELINES]
    if bad:
        raise InvalidInputError("value", bad, f"labels among {list(BASELINES)}")
    return items


# URL name -> (session key, parser, formatter); shared settings first, then per-page ones
PARAMS: dict[str, tuple[str, Callable[[str], Any], Callable[[Any], str]]] = {
    "batch": ("batch", _int(1, 1 << 20), str),
    "seq": ("seq", _int(1, 1 << 22), str),
    "dtype": ("dtype", _choice(DTYPES), str),
    "mode": ("mode", _choice(MODES), str),
    "cost": ("cost", _choice(COST_MODELS), str),
    "mem": ("mem_gib", _float(0, 1e6), lambda v: f"{v:g}"),
    "fmt": ("img_format", _choice(IMAGE_FORMATS), str),
    "expand": ("plan_expand", _flag, lambda v: "1" if v else "0"),
    "baseline": ("cmp_baseline", _choice(("volume", "megatron", "data_parallel")), str),
    "cmp_expand": ("cmp_expand", _flag, lambda v: "1" if v else "0"),
    "top": ("links_top", _int(4, 400), str),
    "bw_lo": ("sweep_lo", _float(0.01, 1e5), lambda v: f"{v:g}"),
    "bw_hi": ("sweep_hi", _float(0.01, 1e5), lambda v: f"{v:g}"),
    "points": ("sweep_points", _int(2, 12), str),
    "curves": ("sweep_curves", _curves, ",".join),
    "size": ("explain_gb", _float(0.001, 1000), lambda v: f"{v:g}"),
    "overlay": ("topo_overlay", _flag, lambda v: "1" if v else "0"),
}
SHARED_PARAMS = ("model", "batch", "seq", "dtype", "mode", "cost", "mem", "topo", "edits", "fmt")

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
    "img_format": "png",
    "model_upload": None,
    "plan_expand": False,
    "cmp_baseline": "volume",
    "cmp_expand": False,
    "links_top": 24,
    "sweep_lo": 1.0,
    "sweep_hi": 400.0,
    "sweep_points": 5,
    "sweep_curves": ["volume", "megatron", "data_parallel"],
    "explain_gb": 1.0,
    "topo_overlay": True,
    "editor_gen": 0,
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
    return {
        "batch": cfg.batch_size,
        "seq": cfg.seq_length,
        "dtype": dtype if dtype in DTYPES else "bfloat16",
    }


def topology_url(ss: Any) -> str:
    """The ``topo`` URL value of the current source."""
    if ss["topo"] in PRESETS:
        return f"{ss['topo']}:{ss['nodes']}"
    return "json" if ss["topo_custom"] == "json" else ss["topo_custom"]


def _apply_topology_param(ss: Any, raw: str) -> None:
    name, _, count = raw.partition(":")
    if name in PRESETS:
        nodes = _int(1, MAX_NODES_UI)(count or "1")
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

    Returns one warning per URL parameter that was ignored.
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
    qp = st.query_params
    model = qp.get("model")
    if model is not None:
        if model in sample_names():
            ss["model"] = model
        else:
            warnings.append(
                f"model={model!r} ignored: must be one of {sample_names()} "
                "(an uploaded config cannot travel in a URL)"
            )
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
            except TapsError as err:
                warnings.append(f"{name}={qp[name]!r} ignored: {err}")
    ss["_initialised"] = True
    return warnings


def set_url(*page_params: str) -> None:
    """Write the shared settings plus the named page parameters into the URL."""
    ss = st.session_state
    want = {"model": "upload" if ss["model"] == UPLOADED else ss["model"], "topo": topology_url(ss)}
    if active_edits(ss):
        want["edits"] = edits_text(ss["edits"])
    for name in (*SHARED_PARAMS, *page_params):
        if name in PARAMS:
            key, _, fmt = PARAMS[name]
            if key in ss:
                want[name] = fmt(ss[key])
    if dict(st.query_params) != want:
        st.query_params.from_dict(want)


def active_edits(ss: Any) -> tuple[LinkEdit, ...]:
    """Link edits of the current base topology (edits made on another base are dropped)."""
    return tuple(ss["edits"]) if ss.get("edits_base") == topology_url(ss) else ()


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

    @property
    def workload(self) -> tuple[str, str | None, int, int, str]:
        """(model, uploaded text, batch, seq, dtype): the graph's cache key."""
        return self.model, self.model_text, self.batch, self.seq, self.dtype


def current() -> Context:
    """The context the sidebar built on this run (``app.py`` sets it before the page runs)."""
    ctx = st.session_state.get("_ctx")
    if ctx is None:  # a page run on its own: build the frame first
        from dashboard.widgets import sidebar

        init_session()
        ctx = sidebar()
    return ctx
