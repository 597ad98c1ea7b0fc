"""The clock a plan search's time budget reads: this thread's CPU seconds.

Wall time grows with whatever else the machine runs (other dashboard sessions, a loaded CI
runner), so a wall-clock budget cuts a search at a different point under load and can change
its answer. The thread's own CPU time does not (to the noise of caches), so within a budget the
plan is the same on an idle and on a busy machine.
"""

from __future__ import annotations

import time


def cpu_seconds() -> float:
    """CPU seconds this thread has run (``time.thread_time``): deadlines are values of it."""
    return time.thread_time()
