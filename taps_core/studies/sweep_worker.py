"""A sweep's worker process: ``python -m taps_core.studies.sweep_worker`` reads jobs (the
arguments of :func:`~taps_core.studies.sweep_jobs.plan_point`, pickled by the parent
:class:`~taps_core.studies.sweep_jobs.Jobs`, never by a user) from stdin and writes each result
to stdout, until stdin closes.

A plain subprocess rather than :mod:`multiprocessing`: a spawned child re-runs the parent's main
script, which under Streamlit is the app itself.
"""

from __future__ import annotations

import pickle
import sys


def serve() -> None:
    """Answer jobs until stdin closes: ``("ok", plans)`` or ``("error", exception)`` each."""
    from taps_core.studies.sweep_jobs import plan_point

    jobs, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the answers
    while True:
        try:
            args = pickle.load(jobs)
        except EOFError:
            return
        try:
            answer: tuple[str, object] = ("ok", plan_point(*args))
        except Exception as err:  # handed to the parent, raised there
            answer = ("error", err)
        pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()


if __name__ == "__main__":
    serve()
