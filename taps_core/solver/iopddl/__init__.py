"""Google's IOPDDL contest problems: the format (:mod:`.format`), a memory-first local search
(:mod:`.feasible`) and the answer that combines it with the exact solver (:mod:`.solve`)."""

from taps_core.solver.iopddl.format import (
    FORBIDDEN,
    IopddlProblem,
    evaluate,
    is_iopddl,
    parse,
)
from taps_core.solver.iopddl.solve import solve_iopddl

__all__ = ["FORBIDDEN", "IopddlProblem", "evaluate", "is_iopddl", "parse", "solve_iopddl"]
