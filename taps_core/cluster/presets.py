"""Named cluster presets from the primer's hardware table, spelled ``name:NODES``."""

from __future__ import annotations

from collections.abc import Callable

from taps_core.cluster.topology import A100_40GB_PCIE, A100_80GB, H100_80GB, Topology, build_cluster
from taps_core.errors import InvalidInputError
from taps_core.limits import LIMITS, check


def _dgx_a100(n: int) -> Topology:
    # NVLink3 via NVSwitch 300 GB/s each way; 8 x HDR 200 Gb/s NICs, one per GPU
    return build_cluster(
        n,
        8,
        name=f"dgx-a100:{n}",
        gpu=A100_80GB,
        intra_bandwidth_Bps=300e9,
        nics_per_node=8,
        nic_bandwidth_Bps=25e9,
        pcie_bandwidth_Bps=32e9,
    )


def _dgx_h100(n: int) -> Topology:
    # NVLink4 via NVSwitch 450 GB/s each way; 8 x NDR 400 Gb/s NICs; PCIe Gen5 to the NICs
    return build_cluster(
        n,
        8,
        name=f"dgx-h100:{n}",
        gpu=H100_80GB,
        intra_bandwidth_Bps=450e9,
        nics_per_node=8,
        nic_bandwidth_Bps=50e9,
        pcie_bandwidth_Bps=64e9,
        inter_latency_s=2e-6,
    )


def _pcie(n: int) -> Topology:
    # 4 GPUs on a PCIe Gen4 x16 switch, one 100 GbE NIC per node
    return build_cluster(
        n,
        4,
        name=f"pcie:{n}",
        gpu=A100_40GB_PCIE,
        intra="pcie",
        pcie_bandwidth_Bps=32e9,
        nics_per_node=1,
        nic_bandwidth_Bps=12.5e9,
        inter_latency_s=5e-6,
    )


def _pcie_nvlink(n: int) -> Topology:
    # as pcie, plus an NVLink bridge (3 links, 300 GB/s each way... A100 PCIe: 600 GB/s bidir)
    return build_cluster(
        n,
        4,
        name=f"pcie-nvlink:{n}",
        gpu=A100_40GB_PCIE,
        intra="pcie",
        pcie_bandwidth_Bps=32e9,
        nvlink_pairs_bandwidth_Bps=300e9,
        nics_per_node=1,
        nic_bandwidth_Bps=12.5e9,
        inter_latency_s=5e-6,
    )


def _ethernet(n: int) -> Topology:
    # the dgx-a100 boxes, but a single 100 GbE NIC per node (12.5 GB/s) shared by 8 GPUs
    return build_cluster(
        n,
        8,
        name=f"ethernet:{n}",
        gpu=A100_80GB,
        intra_bandwidth_Bps=300e9,
        nics_per_node=1,
        nic_bandwidth_Bps=12.5e9,
        pcie_bandwidth_Bps=32e9,
        inter_latency_s=5e-6,
    )


PRESETS: dict[str, tuple[Callable[[int], Topology], str]] = {
    "dgx-a100": (_dgx_a100, "8x A100-80GB, NVSwitch 300 GB/s/dir, 8x 25 GB/s InfiniBand NICs"),
    "dgx-h100": (_dgx_h100, "8x H100-80GB, NVSwitch 450 GB/s/dir, 8x 50 GB/s InfiniBand NICs"),
    "pcie": (_pcie, "4x A100-40GB on PCIe Gen4 32 GB/s, 1x 12.5 GB/s (100 GbE) NIC"),
    "pcie-nvlink": (_pcie_nvlink, "pcie plus 300 GB/s/dir NVLink bridges between GPU pairs"),
    "ethernet": (_ethernet, "dgx-a100 boxes with one 12.5 GB/s (100 GbE) NIC per node"),
}

MAX_PRESET_NODES = int(LIMITS["preset_nodes"].hi)


def preset(spec: str) -> Topology:
    """Build a preset from ``'name:NODES'`` (``'dgx-a100'`` alone means one node)."""
    name, _, count = spec.strip().partition(":")
    if name not in PRESETS:
        raise InvalidInputError(
            "topology", spec, f"a preset among {sorted(PRESETS)} or a JSON path"
        )
    try:
        nodes = int(count) if count else 1
    except ValueError:
        raise InvalidInputError("topology", spec, "'name:NODES' with NODES an integer") from None
    check("preset_nodes", nodes, field="topology nodes")
    return PRESETS[name][0](nodes)
