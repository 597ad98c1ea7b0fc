"""Google's IOPDDL format: parsing, exact evaluation, the contest example, the CLI, a slice of
the scale benchmark (generated problems against the ILP)."""

from __future__ import annotations

import itertools
import json

import pytest

from benchmarks import solver_scale
from taps_core.cli.main import main
from taps_core.errors import InvalidInputError
from taps_core.solver.iopddl.format import FORBIDDEN, evaluate, is_iopddl, parse
from taps_core.solver.iopddl.solve import solve_iopddl

# the example of the contest's format description
EXAMPLE = {
    "problem": {
        "name": "example",
        "nodes": {
            "intervals": [[30, 70], [40, 70], [50, 120], [110, 140], [110, 150]],
            "costs": [[15], [55, 65], [25, 45, 35], [85, 75], [95]],
            "usages": [[10], [25, 25], [15, 20, 15], [10, 10], [15]],
        },
        "edges": {
            "nodes": [[0, 1], [0, 2], [1, 3], [2, 4], [3, 4]],
            "costs": [[30, 40], [50, 10, 40], [90, 10, 20, 80], [60, 20, 30], [70, 60]],
        },
        "usage_limit": 50,
    }
}


def _brute(p) -> tuple[int, list[int]]:
    best = (None, None)
    for sol in itertools.product(*(range(len(c)) for c in p.costs)):
        cost, _, fits = evaluate(p, list(sol))
        if fits and (best[0] is None or cost < best[0]):
            best = (cost, list(sol))
    return best


def test_contest_example():
    p = parse(EXAMPLE)
    out = solve_iopddl(p, time_limit_s=10)
    assert out["solution"] == [0, 0, 2, 1, 0] and out["cost"] == 445 == _brute(p)[0]
    assert out["status"] == "optimal" and out["gap"] == 0.0 and out["peak_usage"] <= 50


def test_evaluate_is_exact_and_parallel_edges_add_up():
    doc = json.loads(json.dumps(EXAMPLE))
    doc["problem"]["edges"]["nodes"].append([1, 3])  # a second edge between nodes 1 and 3
    doc["problem"]["edges"]["costs"].append([2**59, 0, 0, 0])
    p = parse(doc)
    cost, peak, fits = evaluate(p, [0, 0, 2, 1, 0])
    assert cost == 445 and peak == 50 and fits  # exact integers, pair (0, 1) unused
    # node 3 at strategy 0: its cost +10, edge (1,3) +80, edge (3,4) +10, the parallel edge 2**59
    assert evaluate(p, [0, 0, 2, 0, 0])[0] == 445 + 10 + 80 + 10 + 2**59


def test_forbidden_pairs_are_avoided_and_limit_absent_means_unlimited():
    doc = json.loads(json.dumps(EXAMPLE))
    doc["problem"]["edges"]["costs"][1] = [FORBIDDEN, FORBIDDEN, 40]
    del doc["problem"]["usage_limit"]
    p = parse(doc)
    out = solve_iopddl(p, time_limit_s=10)
    assert out["solution"][2] == 2 and out["status"] == "optimal"
    assert out["cost"] == min(
        c
        for s in itertools.product(*(range(len(c)) for c in p.costs))
        for c in [evaluate(p, list(s))[0]]
    )


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d["problem"]["nodes"]["usages"].pop(), "usages length"),
        (lambda d: d["problem"]["nodes"]["intervals"].__setitem__(0, [9, 1]), "intervals[0]"),
        (lambda d: d["problem"]["edges"]["costs"].__setitem__(0, [1]), "edges.costs[0]"),
        (lambda d: d["problem"]["edges"]["nodes"].__setitem__(0, [0, True]), "edges.nodes[0]"),
        (lambda d: d["problem"].__setitem__("usage_limit", -1), "usage_limit"),
        (lambda d: d["problem"]["nodes"]["costs"].__setitem__(0, [1.5, "x"]), "costs[0]"),
    ],
)
def test_bad_fields_are_named(change, field):
    doc = json.loads(json.dumps(EXAMPLE))
    change(doc)
    with pytest.raises(InvalidInputError, match=field.replace("[", r"\[").replace("]", r"\]")):
        parse(doc)


def test_cli_detects_the_format(tmp_path, capsys):
    f = tmp_path / "example.json"
    f.write_text(json.dumps(EXAMPLE))
    assert is_iopddl(EXAMPLE)
    code = main(["solve-graph", str(f), "--time-limit", "20"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["format"] == "iopddl" and out["solution"] == [0, 0, 2, 1, 0]


def test_generated_problem_is_solved_feasibly_with_a_bound():
    data = solver_scale.generate(150, seed=7)
    p = parse(data)
    out = solve_iopddl(p, time_limit_s=30)
    cost, peak, fits = evaluate(p, out["solution"])
    assert fits and cost == out["cost"] and peak <= p.usage_limit
    assert out["lower_bound"] <= cost
    _seconds, ilp_cost, status = solver_scale.full_ilp(p, 30)
    if status == "optimal":  # the ILP over the whole problem, memory rows included
        assert out["lower_bound"] <= ilp_cost <= cost


def test_regular_graph_slice_prints_a_table(capsys):
    solver_scale.run_regular((40,))
    out = capsys.readouterr().out
    assert "True" in out and "optimal" in out
