"""Solvers for the pairwise strategy-assignment problem (any graph; optional memory limits).

``solve`` is exact without a time limit; ``solve_with_memory`` adds a usage limit over live
ranges; :mod:`taps_core.solver.iopddl.format` reads and answers Google's IOPDDL contest format.
"""

from taps_core.solver.elimination import min_plus, reduce_to, solve
from taps_core.solver.factors import Budget
from taps_core.solver.memory import LiveMemory, solve_with_memory
from taps_core.solver.problem import CostGraph, Solution, load_problem, problem_from_json
from taps_core.solver.reference import brute_force, ilp

__all__ = [
    "Budget",
    "CostGraph",
    "LiveMemory",
    "Solution",
    "brute_force",
    "ilp",
    "load_problem",
    "min_plus",
    "problem_from_json",
    "reduce_to",
    "solve",
    "solve_with_memory",
]
