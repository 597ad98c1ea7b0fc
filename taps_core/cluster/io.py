"""Load and save topologies as JSON (format ``taps-topology/1``) so a drawn cluster round-trips."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from taps_core import strict_json
from taps_core.cluster.presets import preset
from taps_core.cluster.topology import Device, GpuSpec, Link, Topology, validate
from taps_core.errors import InvalidInputError
from taps_core.limits import LIMITS, check, check_size

FORMAT = "taps-topology/1"
MAX_FILE_BYTES = int(LIMITS["topology_file_bytes"].hi)


def to_dict(topology: Topology) -> dict[str, Any]:
    """Plain-JSON form of a topology."""
    return {
        "format": FORMAT,
        "name": topology.name,
        "gpu": {
            "name": topology.gpu.name,
            "memory_bytes": topology.gpu.memory_bytes,
            "peak_flops": topology.gpu.peak_flops,
            "hbm_bandwidth_Bps": topology.gpu.hbm_bandwidth_Bps,
        },
        "efficiency": dict(topology.efficiency),
        "compute_efficiency": topology.compute_efficiency,
        "devices": [{"name": d.name, "kind": d.kind, "host": d.host} for d in topology.devices],
        "links": [
            {
                "src": k.src,
                "dst": k.dst,
                "kind": k.kind,
                "bandwidth_Bps": k.bandwidth_Bps,
                "latency_s": k.latency_s,
            }
            for k in topology.links
        ],
    }


def _field(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise InvalidInputError(where, obj, "a JSON object")
    if key not in obj:
        raise InvalidInputError(f"{where}.{key}", None, "present")
    return obj[key]


def _text(obj: Any, key: str, where: str) -> str:
    value = _field(obj, key, where)
    if not isinstance(value, str) or not 0 < len(value) <= LIMITS["name_length"].hi:
        raise InvalidInputError(f"{where}.{key}", value, "a string of 1 to 256 characters")
    return value


def _number(obj: Any, key: str, where: str, limit: str) -> float:
    return float(check(limit, _field(obj, key, where), field=f"{where}.{key}"))


def _items(data: dict[str, Any], key: str, limit: str) -> list[Any]:
    value = _field(data, key, "topology")
    if not isinstance(value, list):
        raise InvalidInputError(key, value, "a list")
    check_size(limit, len(value), field=f"{key} length")
    return value


def _device(d: Any, i: int) -> Device:
    where = f"devices[{i}]"
    host = d.get("host") if isinstance(d, dict) else None
    if host is not None and (isinstance(host, bool) or not isinstance(host, int)):
        raise InvalidInputError(f"{where}.host", host, "an integer host index (or null)")
    if host is not None and not 0 <= host < 2**31:
        raise InvalidInputError(f"{where}.host", host, "an integer in [0, 2**31)")
    return Device(_text(d, "name", where), _text(d, "kind", where), host)


def _link(k: Any, i: int) -> Link:
    where = f"links[{i}]"
    return Link(
        _text(k, "src", where),
        _text(k, "dst", where),
        _text(k, "kind", where),
        _number(k, "bandwidth_Bps", where, "bandwidth_Bps"),
        _number(k, "latency_s", where, "latency_s"),
    )


def _check_cluster_size(devices: tuple[Device, ...]) -> None:
    """Hosts, GPUs per host and GPUs within :mod:`taps_core.limits`, before any graph work."""
    per_host = Counter(d.host for d in devices if d.kind == "gpu")
    check_size("hosts", len(per_host), field="hosts (distinct GPU host indices)")
    check_size("gpus", sum(per_host.values()), field="GPUs")
    if per_host:
        check_size("gpus_per_host", max(per_host.values()), field="GPUs on one host")


def from_dict(data: dict[str, Any]) -> Topology:
    """Parse and validate the JSON form; errors name the offending field."""
    if not isinstance(data, dict):
        raise InvalidInputError("topology", type(data).__name__, "a JSON object")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise InvalidInputError("format", fmt, f"'{FORMAT}'")
    raw_devices = _items(data, "devices", "devices")
    raw_links = _items(data, "links", "links")
    g = _field(data, "gpu", "topology")
    gpu = GpuSpec(
        _text(g, "name", "gpu"),
        _number(g, "memory_bytes", "gpu", "gpu.memory_bytes"),
        _number(g, "peak_flops", "gpu", "gpu.peak_flops"),
        _number(g, "hbm_bandwidth_Bps", "gpu", "gpu.hbm_bandwidth_Bps"),
    )
    devices = tuple(_device(d, i) for i, d in enumerate(raw_devices))
    _check_cluster_size(devices)
    links = tuple(_link(k, i) for i, k in enumerate(raw_links))
    eff = data.get("efficiency", {})
    if not isinstance(eff, dict):
        raise InvalidInputError("efficiency", eff, "an object of link kind -> fraction")
    for kind, value in eff.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
            raise InvalidInputError(f"efficiency.{kind}", value, "a fraction in (0, 1]")
    compute = data.get("compute_efficiency", 0.5)
    if isinstance(compute, bool) or not isinstance(compute, (int, float)) or not 0 < compute <= 1:
        raise InvalidInputError("compute_efficiency", compute, "a fraction in (0, 1]")
    name = data.get("name", "custom")
    if not isinstance(name, str):
        raise InvalidInputError("name", name, "a string")
    topo = Topology(
        name=" ".join(name.split())[: int(LIMITS["name_length"].hi)] or "custom",
        gpu=gpu,
        devices=devices,
        links=links,
        efficiency=tuple(sorted((str(k), float(v)) for k, v in eff.items())),
        compute_efficiency=float(compute),
    )
    return validate(topo)


def dumps(topology: Topology) -> str:
    """JSON text of a topology."""
    return json.dumps(to_dict(topology), indent=1)


def loads(text: str | bytes) -> Topology:
    """Parse JSON text (bounded size and depth, strict JSON) into a validated topology."""
    return from_dict(strict_json.loads(text, field="topology", limit="topology_file_bytes"))


def load_topology(spec: str) -> Topology:
    """A preset spec (``dgx-a100:2``) or the path of a topology JSON file."""
    if spec.endswith(".json") or strict_json.is_file(spec):
        data = strict_json.read_file(spec, field="topology", limit="topology_file_bytes")
        return loads(data)
    return preset(spec)
