"""Run a Python function as torch.distributed gloo ranks inside the emulated nodes.

Rank r runs on node ``r // ranks_per_node``: the process is started with
``ip netns exec taps-nK`` and ``GLOO_SOCKET_IFNAME=taps-vK``, so ranks of one node reach each
other over loopback and other nodes over the shaped veth. The master address is rank 0's veth
address. Every launch has a deadline; on return, failure or interrupt every rank process is
killed (by the process-group id of each rank the launcher started).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from validation import names
from validation.cluster import node_namespaces

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TIMEOUT_S = 600.0
POLL_S = 0.05
LOG_TAIL_CHARS = 3000


class LaunchError(RuntimeError):
    """A rank failed, the launch timed out, or the cluster is missing; message has log tails."""


@dataclass(frozen=True)
class Placement:
    """Where rank ``rank`` runs: node index, namespace, interface and address."""

    rank: int
    node: int
    namespace: str
    ifname: str
    ip: str


def placements(nodes: int, ranks_per_node: int) -> list[Placement]:
    """Rank placement for ``nodes`` x ``ranks_per_node`` ranks (rank r on node r // R)."""
    if nodes < 1 or ranks_per_node < 1:
        raise LaunchError(f"need nodes >= 1 and ranks_per_node >= 1, got {nodes}, {ranks_per_node}")
    out = []
    for rank in range(nodes * ranks_per_node):
        node = rank // ranks_per_node
        out.append(Placement(rank, node, names.node_ns(node), names.node_veth(node),
                             names.node_ip(node)))
    return out


def function_spec(fn: Callable[..., Any] | str) -> str:
    """``module:function`` for a function the rank processes can import."""
    if isinstance(fn, str):
        return fn
    module = getattr(fn, "__module__", None)
    if not module or module == "__main__" or "." in fn.__qualname__:
        raise LaunchError(f"{fn!r} is not a module-level function importable by the ranks")
    return f"{module}:{fn.__qualname__}"


def _kill(proc: subprocess.Popen[bytes], grace_s: float = 2.0) -> None:
    """Terminate one rank (its own process group), then kill it after ``grace_s`` seconds."""
    if proc.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
    except OSError:
        return ""


def launch(
    fn: Callable[..., Any] | str,
    *,
    nodes: int,
    ranks_per_node: int,
    kwargs: dict[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    python: str = sys.executable,
) -> list[Any]:
    """Run ``fn(ctx, **kwargs)`` on every rank; return the ranks' results in rank order.

    ``timeout_s`` (seconds) bounds the whole launch and is also the gloo timeout. Raises
    :class:`LaunchError` with each failed rank's traceback or log tail.
    """
    present = set(node_namespaces())
    wanted = [names.node_ns(k) for k in range(nodes)]
    missing = [ns for ns in wanted if ns not in present]
    if missing:
        raise LaunchError(
            f"cluster namespaces missing: {', '.join(missing)} (run `python -m validation "
            f"cluster up --nodes {nodes}`)"
        )
    places = placements(nodes, ranks_per_node)
    run_dir = Path(tempfile.mkdtemp(prefix="taps-launch-"))
    spec = {
        "fn": function_spec(fn),
        "kwargs": kwargs or {},
        "world_size": len(places),
        "ranks_per_node": ranks_per_node,
        "master_addr": places[0].ip,
        "master_port": random.randint(20000, 39999),
        "pg_timeout_s": timeout_s,
    }
    (run_dir / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for p in places:
            env_rank = dict(env, GLOO_SOCKET_IFNAME=p.ifname)
            with open(run_dir / f"log-{p.rank}.txt", "wb") as log:
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", p.namespace, python, "-m", "validation.worker",
                     str(run_dir), str(p.rank)],
                    env=env_rank, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                ))
        deadline = time.monotonic() + timeout_s
        while True:
            codes = [proc.poll() for proc in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                raise LaunchError(_failure_report(run_dir, failed, codes))
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                pending = [r for r, c in enumerate(codes) if c is None]
                raise LaunchError(f"timed out after {timeout_s:g} s; ranks still running: "
                                  f"{pending}\n" + _failure_report(run_dir, pending, codes))
            time.sleep(POLL_S)
        results = []
        for p in places:
            path = run_dir / f"result-{p.rank}.json"
            if not path.is_file():
                raise LaunchError(f"rank {p.rank} exited 0 without a result\n"
                                  + _tail(run_dir / f"log-{p.rank}.txt"))
            results.append(json.loads(path.read_text()))
        return results
    finally:
        for proc in procs:
            _kill(proc)
        shutil.rmtree(run_dir, ignore_errors=True)


def _failure_report(run_dir: Path, ranks: list[int], codes: list[int | None]) -> str:
    """Tracebacks (or log tails) of the given ranks, with their exit codes."""
    parts = []
    for r in ranks:
        err = _tail(run_dir / f"error-{r}.txt") or _tail(run_dir / f"log-{r}.txt")
        parts.append(f"--- rank {r} (exit {codes[r]}) ---\n{err.strip()}")
    return "rank failure\n" + "\n".join(parts)
