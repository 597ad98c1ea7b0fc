"""The primer's smallest example, computed on any cluster: bytes moved versus time taken.

Plan A all-reduces a buffer over the GPUs of one host; plan B over one GPU on each of two
hosts. Per GPU, A sends more bytes (2(p-1)/p with the larger p) but over NVLink; B sends fewer
over the network. A volume cost model ranks them by bytes, the topology-aware model by time.
Both are costed the way the planner costs them: every group of the pattern runs at once
(B pairs each GPU with its peer on the other host, all rails busy), on the link model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taps_core.collectives import Phase, TopologyCost, VolumeCost, all_reduce
from taps_core.errors import InvalidInputError, check_positive
from taps_core.linkmodel import LinkModel
from taps_core.topology import Topology


@dataclass(frozen=True)
class Case:
    """One way to all-reduce ``size_bytes``: its group, what each GPU sends, what it costs.

    ``time_s`` is the topology-aware time (``latency_s + bandwidth_s``); ``volume_s`` is what
    the volume model charges (bytes at one fixed rate). ``bottleneck`` is the most loaded link
    ``(src, dst, kind)`` and ``per_gpu_Bps`` the bandwidth each GPU effectively gets through it.
    """

    name: str
    description: str
    level: str
    group_size: int
    phases: tuple[Phase, ...]
    bytes_per_gpu: float
    time_s: float
    latency_s: float
    bandwidth_s: float
    volume_s: float
    bottleneck: tuple[str, str, str]
    per_gpu_Bps: float


def _case(
    links: LinkModel,
    name: str,
    description: str,
    level: str,
    q: int,
    size_bytes: float,
    volume: VolumeCost,
) -> Case:
    q_inter, q_intra = (q, 1) if level == "inter" else (1, q)
    phases = all_reduce(q_inter, q_intra, size_bytes)
    cost = TopologyCost(links)
    pattern = links.pattern(level, q, "ring")
    sent = sum(p.per_rank_bytes for p in phases)
    latency = sum(p.steps * pattern.alpha_s for p in phases)
    hot = int(np.argmax(pattern.loads / links.capacity_Bps))
    src, dst, link = links.links[hot]
    return Case(
        name=name,
        description=description,
        level=level,
        group_size=q,
        phases=phases,
        bytes_per_gpu=sent,
        time_s=sum(cost.seconds(p) for p in phases),
        latency_s=latency,
        bandwidth_s=sent * pattern.beta_s_per_B,
        volume_s=sum(volume.seconds(p) for p in phases),
        bottleneck=(src, dst, link.kind),
        per_gpu_Bps=1.0 / pattern.beta_s_per_B,
    )


def volume_vs_time(
    topology: Topology, size_bytes: float = 1e9, *, volume: VolumeCost | None = None
) -> tuple[Case, Case]:
    """Plan A (all GPUs of one host) and plan B (one GPU per host, two hosts) for one buffer.

    With an odd number of hosts, B spans all of them (groups must tile the hosts).

    Raises
    ------
    InvalidInputError
        If the cluster has one host or one GPU per host (one of the plans does not exist).

    Examples
    --------
    >>> from taps_core.presets import preset
    >>> a, b = volume_vs_time(preset("dgx-a100:2"))
    >>> round(a.bytes_per_gpu / 1e9, 2), round(b.bytes_per_gpu / 1e9, 2)
    (1.75, 1.0)
    >>> bool(b.time_s > 5 * a.time_s)
    True
    """
    check_positive("size_bytes", size_bytes)
    g, n = topology.gpus_per_node, topology.nodes
    if g < 2:
        raise InvalidInputError("gpus_per_node", g, ">= 2 for the same-host plan")
    if n < 2:
        raise InvalidInputError("nodes", n, ">= 2 for the cross-host plan")
    links = LinkModel(topology)
    volume = volume or VolumeCost()
    qb = 2 if n % 2 == 0 else n
    a = _case(
        links, "A", f"all-reduce over the {g} GPUs of one host", "intra", g, size_bytes, volume
    )
    b = _case(
        links,
        "B",
        f"all-reduce over {qb} GPUs, one on each of {qb} hosts",
        "inter",
        qb,
        size_bytes,
        volume,
    )
    return a, b
