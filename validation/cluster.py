"""Bring the emulated cluster up and down.

Layout for N nodes: namespaces ``taps-n0..taps-n{N-1}`` and ``taps-br``. Node K has one veth
``taps-vK`` (address ``10.99.0.{K+1}/24``) whose peer ``taps-bK`` is a port of bridge
``taps-br0`` inside ``taps-br``. Both directions of every node's link are shaped with an htb
class at the given rate: egress of ``taps-vK`` (node -> bridge) and egress of ``taps-bK``
(bridge -> node). Nothing is created in the root namespace; loopback stays up in every node so
that ranks of one node talk over ``lo``. IPv6 is switched off inside the namespaces so that the
only addresses are the IPv4 ones above.

Optionally (``intra_rate_mbit``) each node's loopback is shaped too, with one htb class for all
same-node traffic in both directions: the same-node level then becomes network-bound at a
known rate (two ranks sending at once get half of it each) instead of bound by memory copies
on shared CPU cores, which are fast but scatter by 15-35% when other work runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from validation import names

STATE_FILE = Path("/run/taps-validation/cluster.json")
DEFAULT_RATE_MBIT = 200.0
COMMAND_TIMEOUT_S = 20.0
HTB_BURST = "64k"
LOOPBACK_BURST = "256k"


class ClusterError(RuntimeError):
    """A command that builds or removes the cluster failed; the message says which and why."""


@dataclass
class ClusterState:
    """What ``cluster up`` built: node count, ranks per node, shaped rate (Mbit/s, each way)."""

    nodes: int
    ranks_per_node: int
    rate_mbit: float
    namespaces: list[str] = field(default_factory=list)
    created_unix_s: float = 0.0
    intra_rate_mbit: float | None = None


def _run(args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one ip/tc command with a timeout; raise :class:`ClusterError` if ``check`` fails."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired as err:
        raise ClusterError(f"`{' '.join(args)}` timed out after {COMMAND_TIMEOUT_S} s") from err
    if check and done.returncode != 0:
        raise ClusterError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.returncode}")
    return done


def list_namespaces() -> list[str]:
    """Names of all network namespaces known to ``ip netns`` (any owner)."""
    out = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def our_namespaces() -> list[str]:
    """Namespaces this package made (``taps-nK``, ``taps-br``, a leftover probe)."""
    return [ns for ns in list_namespaces() if names.is_ours(ns)]


def node_namespaces() -> list[str]:
    """Node namespaces present now, in node order."""
    nodes = [ns for ns in our_namespaces() if ns.startswith("taps-n")]
    return sorted(nodes, key=lambda ns: int(ns[len("taps-n"):]))


def read_state() -> ClusterState | None:
    """The state file written by ``up``, or None when absent or unreadable."""
    try:
        data = json.loads(STATE_FILE.read_text())
        return ClusterState(**data)
    except (OSError, ValueError, TypeError):
        return None


def _shape(namespace: str, dev: str, rate_mbit: float, burst: str = HTB_BURST) -> None:
    """Egress htb on ``dev`` at ``rate_mbit`` Mbit/s (rate = ceil, ``burst`` bursts)."""
    rate = f"{rate_mbit:g}mbit"
    _run(["tc", "-n", namespace, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
          "default", "10"])
    _run(["tc", "-n", namespace, "class", "add", "dev", dev, "parent", "1:", "classid", "1:10",
          "htb", "rate", rate, "ceil", rate, "burst", burst, "cburst", burst])


def _no_ipv6(namespace: str) -> None:
    """Switch IPv6 off in a namespace so veths carry no link-local addresses."""
    for key in ("all", "default"):
        _run(["ip", "netns", "exec", namespace, "sysctl", "-qw",
              f"net.ipv6.conf.{key}.disable_ipv6=1"], check=False)


def up(nodes: int, ranks_per_node: int = 1, rate_mbit: float = DEFAULT_RATE_MBIT,
       intra_rate_mbit: float | None = None) -> ClusterState:
    """Create the cluster; on any failure remove what was made and raise :class:`ClusterError`.

    ``rate_mbit`` is the htb rate of each node link in each direction, in Mbit/s;
    ``intra_rate_mbit`` (None: unshaped) the rate of each node's loopback, shared by all
    same-node traffic.
    """
    if not 1 <= nodes <= names.MAX_NODES:
        raise ClusterError(f"--nodes must be in 1..{names.MAX_NODES}, got {nodes}")
    if ranks_per_node < 1:
        raise ClusterError(f"--ranks-per-node must be >= 1, got {ranks_per_node}")
    if not rate_mbit > 0:
        raise ClusterError(f"--rate-mbit must be > 0, got {rate_mbit}")
    if intra_rate_mbit is not None and not intra_rate_mbit > 0:
        raise ClusterError(f"--intra-rate-mbit must be > 0, got {intra_rate_mbit}")
    existing = our_namespaces()
    if existing:
        raise ClusterError(
            f"a cluster is already up ({', '.join(existing)}); run `python -m validation "
            "cluster down` first"
        )
    made: list[str] = []
    try:
        _run(["ip", "netns", "add", names.BRIDGE_NS])
        made.append(names.BRIDGE_NS)
        _no_ipv6(names.BRIDGE_NS)
        _run(["ip", "-n", names.BRIDGE_NS, "link", "add", names.BRIDGE_DEV, "type", "bridge"])
        _run(["ip", "-n", names.BRIDGE_NS, "link", "set", names.BRIDGE_DEV, "up"])
        for k in range(nodes):
            ns, veth, port = names.node_ns(k), names.node_veth(k), names.bridge_port(k)
            _run(["ip", "netns", "add", ns])
            made.append(ns)
            _no_ipv6(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # created directly inside the namespaces: nothing ever appears in the root one
            _run(["ip", "-n", ns, "link", "add", veth, "type", "veth", "peer", "name", port,
                  "netns", names.BRIDGE_NS])
            _run(["ip", "-n", ns, "addr", "add",
                  f"{names.node_ip(k)}/{names.SUBNET_BITS}", "dev", veth])
            _run(["ip", "-n", ns, "link", "set", veth, "up"])
            _run(["ip", "-n", names.BRIDGE_NS, "link", "set", port, "master", names.BRIDGE_DEV])
            _run(["ip", "-n", names.BRIDGE_NS, "link", "set", port, "up"])
            _shape(ns, veth, rate_mbit)
            _shape(names.BRIDGE_NS, port, rate_mbit)
            if intra_rate_mbit is not None:  # loopback frames are up to 64 KiB
                _shape(ns, "lo", intra_rate_mbit, LOOPBACK_BURST)
        state = ClusterState(nodes, ranks_per_node, rate_mbit, made, time.time(),
                             intra_rate_mbit)
        STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
        STATE_FILE.write_text(json.dumps(asdict(state), indent=1))
        return state
    except BaseException:
        down()
        raise


def _kill_namespace_processes(namespace: str, grace_s: float = 3.0) -> list[int]:
    """SIGTERM, then after ``grace_s`` seconds SIGKILL, every process inside ``namespace``."""
    out = _run(["ip", "netns", "pids", namespace], check=False).stdout
    pids = [int(tok) for tok in out.split() if tok.isdigit() and int(tok) != os.getpid()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if _alive(pid)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def down() -> dict[str, list]:
    """Remove every ``taps-`` namespace and veth and kill the ranks left inside.

    Idempotent and safe when nothing exists. Returns ``{"namespaces": [...], "killed": [...]}``.
    """
    removed: list[str] = []
    killed: list[int] = []
    for ns in our_namespaces():
        killed += _kill_namespace_processes(ns)
        _run(["ip", "netns", "del", ns], check=False)
        removed.append(ns)
    # veths live inside the namespaces and vanish with them; sweep the root one anyway
    links = _run(["ip", "-o", "link", "show"], check=False).stdout
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            dev = parts[1].strip().split("@")[0]
            if names.OUR_ROOT_LINK.match(dev):
                _run(["ip", "link", "del", dev], check=False)
    STATE_FILE.unlink(missing_ok=True)
    leftover = our_namespaces()
    if leftover:
        raise ClusterError(f"could not remove namespaces: {', '.join(leftover)}")
    return {"namespaces": removed, "killed": killed}


def status() -> dict[str, object]:
    """Namespaces present now, and what the state file says about them."""
    state = read_state()
    return {
        "namespaces": our_namespaces(),
        "state": asdict(state) if state else None,
    }
