"""Load and save topologies as JSON (format ``taps-topology/1``) so a drawn cluster round-trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from taps_core.errors import InvalidInputError
from taps_core.presets import preset
from taps_core.topology import Device, GpuSpec, Link, Topology, validate

FORMAT = "taps-topology/1"
MAX_FILE_BYTES = 8 * 2**20


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


def _field(obj: dict[str, Any], key: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise InvalidInputError(where, obj, "a JSON object")
    if key not in obj:
        raise InvalidInputError(f"{where}.{key}", None, "present")
    return obj[key]


def from_dict(data: dict[str, Any]) -> Topology:
    """Parse and validate the JSON form; errors name the offending field."""
    if not isinstance(data, dict):
        raise InvalidInputError("topology", type(data).__name__, "a JSON object")
    fmt = data.get("format", FORMAT)
    if fmt != FORMAT:
        raise InvalidInputError("format", fmt, f"'{FORMAT}'")
    g = _field(data, "gpu", "topology")
    try:
        gpu = GpuSpec(
            str(_field(g, "name", "gpu")),
            float(_field(g, "memory_bytes", "gpu")),
            float(_field(g, "peak_flops", "gpu")),
            float(_field(g, "hbm_bandwidth_Bps", "gpu")),
        )
        devices = tuple(
            Device(
                str(_field(d, "name", f"devices[{i}]")),
                str(_field(d, "kind", f"devices[{i}]")),
                None if d.get("host") is None else int(d["host"]),
            )
            for i, d in enumerate(_field(data, "devices", "topology"))
        )
        links = tuple(
            Link(
                str(_field(k, "src", f"links[{i}]")),
                str(_field(k, "dst", f"links[{i}]")),
                str(_field(k, "kind", f"links[{i}]")),
                float(_field(k, "bandwidth_Bps", f"links[{i}]")),
                float(_field(k, "latency_s", f"links[{i}]")),
            )
            for i, k in enumerate(_field(data, "links", "topology"))
        )
        eff = data.get("efficiency", {})
        if not isinstance(eff, dict):
            raise InvalidInputError("efficiency", eff, "an object of link kind -> fraction")
        topo = Topology(
            name=str(data.get("name", "custom")),
            gpu=gpu,
            devices=devices,
            links=links,
            efficiency=tuple(sorted((str(k), float(v)) for k, v in eff.items())),
            compute_efficiency=float(data.get("compute_efficiency", 0.5)),
        )
    except (TypeError, ValueError, AttributeError) as err:
        if isinstance(err, InvalidInputError):
            raise
        raise InvalidInputError("topology JSON", str(err), "well-typed fields") from err
    return validate(topo)


def dumps(topology: Topology) -> str:
    """JSON text of a topology."""
    return json.dumps(to_dict(topology), indent=1)


def loads(text: str | bytes) -> Topology:
    """Parse JSON text (bounded size) into a validated topology."""
    if len(text) > MAX_FILE_BYTES:
        raise InvalidInputError("topology file size", len(text), f"<= {MAX_FILE_BYTES} bytes")
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InvalidInputError("topology JSON", str(err).split("\n")[0], "valid JSON") from None
    return from_dict(data)


def load_topology(spec: str) -> Topology:
    """A preset spec (``dgx-a100:2``) or the path of a topology JSON file."""
    path = Path(spec)
    if spec.endswith(".json") or path.is_file():
        if not path.is_file():
            raise InvalidInputError("topology", spec, "an existing JSON file or a preset")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InvalidInputError(
                "topology file size", path.stat().st_size, f"<= {MAX_FILE_BYTES} bytes"
            )
        return loads(path.read_bytes())
    return preset(spec)
