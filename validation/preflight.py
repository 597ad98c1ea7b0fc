"""Can this machine build the emulated cluster? Each check returns a reason string, or None."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess

from validation.names import is_ours

IPROUTE_HINT = "install iproute2: apt-get install -y iproute2"


def missing_tools() -> str | None:
    """Why ``ip``/``tc`` cannot be used (not root, not installed), or None if they can."""
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "needs root: network namespaces and tc shaping need CAP_NET_ADMIN/CAP_SYS_ADMIN"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` on PATH ({IPROUTE_HINT})"
    return None


def netns_broken() -> str | None:
    """Why ``ip netns`` does not work here (after :func:`missing_tools`), or None if it does.

    Creates and deletes a probe namespace ``taps-probe<pid>``; takes a few milliseconds.
    """
    reason = missing_tools()
    if reason:
        return reason
    probe = f"taps-probe{os.getpid()}"
    assert is_ours(probe)
    try:
        add = subprocess.run(
            ["ip", "netns", "add", probe], capture_output=True, text=True, timeout=10
        )
        if add.returncode != 0:
            return f"`ip netns add` failed: {add.stderr.strip() or add.returncode}"
        link = subprocess.run(
            ["ip", "-n", probe, "link", "set", "lo", "up"], capture_output=True, text=True,
            timeout=10,
        )
        if link.returncode != 0:
            return f"`ip -n NS link` failed: {link.stderr.strip() or link.returncode}"
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"`ip netns` unusable: {err}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


def torch_missing() -> str | None:
    """Why torch.distributed with gloo cannot be used, or None if it can."""
    if importlib.util.find_spec("torch") is None:
        return "needs torch: pip install -r requirements-validation.txt (CPU build torch==2.13.0)"
    try:
        import torch.distributed as dist
    except ImportError as err:  # pragma: no cover - broken install
        return f"torch.distributed does not import: {err}"
    if not dist.is_available() or not dist.is_gloo_available():
        return "this torch build has no gloo backend"
    return None
