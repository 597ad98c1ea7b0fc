"""Generic solvers for the pairwise strategy-assignment problem."""

from taps_core.solver.elimination import min_plus, reduce_to, solve
from taps_core.solver.problem import CostGraph, Solution, load_problem, problem_from_json
from taps_core.solver.reference import brute_force, ilp

__all__ = [
    "CostGraph",
    "Solution",
    "brute_force",
    "ilp",
    "load_problem",
    "min_plus",
    "problem_from_json",
    "reduce_to",
    "solve",
]
