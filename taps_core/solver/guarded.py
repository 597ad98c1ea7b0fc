"""Run a computation in a forked child with a hard deadline (HiGHS can overrun its own limit).

HiGHS checks its time limit between iterations; a single large LP solve or presolve can run
several times longer. Where ``fork`` exists the call runs in a child process that is killed
at the deadline, so a solve with a time limit really ends near it; elsewhere it runs inline.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
GRACE_S = 5.0  # beyond the solver's own limit, before the child is killed


def _child(fn: Callable[..., Any], args: tuple, conn: Any) -> None:  # pragma: no cover
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as err:  # report anything to the parent, which decides
        conn.send(("error", f"{type(err).__name__}: {err}"))
    finally:
        conn.close()


def run_guarded(fn: Callable[..., T], args: tuple, timeout_s: float) -> T | None:
    """``fn(*args)``, or None when it is still running after ``timeout_s + GRACE_S`` seconds.

    Exceptions raised by ``fn`` in the child come back as RuntimeError.
    """
    if "fork" not in mp.get_all_start_methods():
        return fn(*args)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, args, child), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout_s + GRACE_S):
            return None
        kind, value = parent.recv()
    except (EOFError, OSError):  # the child died (e.g. out of memory)
        return None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()
    if kind == "error":
        raise RuntimeError(value)
    return value
