"""Names and addresses of everything the emulated cluster creates.

Every namespace and interface starts with ``taps-`` so that ``cluster down`` can find what a
crashed run left behind without any state file. Addresses live only on the node-side veths, in
``10.99.0.0/24``.
"""

from __future__ import annotations

import re

PREFIX = "taps-"
BRIDGE_NS = "taps-br"
BRIDGE_DEV = "taps-br0"
SUBNET_PREFIX = "10.99.0."
SUBNET_BITS = 24
MAX_NODES = 200
OUR_NAMESPACE = re.compile(r"^taps-(n\d+|br|probe\d+)$")
OUR_ROOT_LINK = re.compile(r"^taps-[vb]\d+$")


def node_ns(node: int) -> str:
    """Network namespace of node ``node`` (0-based)."""
    return f"taps-n{node}"


def node_veth(node: int) -> str:
    """The node-side veth inside :func:`node_ns`; ranks set ``GLOO_SOCKET_IFNAME`` to it."""
    return f"taps-v{node}"


def bridge_port(node: int) -> str:
    """The bridge-side peer of :func:`node_veth`, inside :data:`BRIDGE_NS`."""
    return f"taps-b{node}"


def node_ip(node: int) -> str:
    """IPv4 address of node ``node``'s veth (no prefix length)."""
    if not 0 <= node < MAX_NODES:
        raise ValueError(f"node index {node} outside 0..{MAX_NODES - 1}")
    return f"{SUBNET_PREFIX}{node + 1}"


def is_ours(namespace: str) -> bool:
    """True for a namespace name this package creates (nodes, bridge, preflight probe)."""
    return bool(OUR_NAMESPACE.match(namespace))
