"""Work one search reuses: a micro-batch count pruned from a built divisor's problem, relaxed,
without being built (the relaxation never prices a plan above its real cost or off its memory,
and pruning with it changes no plan); builds sharing a memo (conversion and op tables) give the
problems built alone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from taps_core.cluster.links import LinkModel
from taps_core.cluster.presets import preset
from taps_core.costs.collectives import TopologyCost
from taps_core.models import build_graph, load_model_config
from taps_core.search import flat
from taps_core.search.planner import search
from taps_core.search.problem import BuildMemo, build_problem


def _graph(batch: int, layers: int = 2, seq: int = 64):
    cfg = replace(load_model_config("gpt2"), num_hidden_layers=layers, batch_size=batch,
                  seq_length=seq)
    return build_graph(cfg)


def _index(small: list, large: list) -> np.ndarray:
    """Positions in ``large`` of each item of ``small`` (every item must be there)."""
    at = {x: i for i, x in enumerate(large)}
    return np.array([at[x] for x in small])


@pytest.mark.parametrize("topo, k0, k, through", [
    ("dgx-a100:2", 1, 2, 2), ("dgx-a100:2", 1, 4, 4), ("dgx-a100:2", 2, 4, 4),
    ("ethernet:2", 1, 8, 8),
    # one relaxation for several counts: time as at the least, memory as at the most
    ("dgx-a100:2", 1, 2, 8), ("dgx-a100:2", 1, 4, 8), ("dgx-a100:2", 1, 8, 8),
])
def test_relaxation_prices_every_plan_at_most_its_cost_with_its_exact_memory(
    topo, k0, k, through
):
    t = preset(topo)
    comm = TopologyCost(LinkModel(t))
    batch = 16
    base = build_problem(_graph(batch // k0), t, "train", comm, microbatches=k0)
    real = build_problem(_graph(batch // k), t, "train", comm, microbatches=k)
    lowest = min(c for c in (2, 4, 8) if c >= k0 and c % k0 == 0 and through % c == 0)
    relaxed = base.relaxed(lowest, through=through)
    exact_memory = lowest == k == through
    assert list(relaxed.option_time) == list(real.option_time)
    checked_slopes = False
    for n in real.option_time:
        cols = real.strategies.get(n, real.layouts.get(n))
        idx = _index(cols, base.strategies.get(n, base.layouts.get(n)))
        assert relaxed.option_zero[n] == real.option_zero[n]
        for rc in real.variant_keys:
            want_t, want_m = real.option_time[n][rc], real.option_memory[n][rc]
            got_t, got_m = relaxed.option_time[n][rc][idx], relaxed.option_memory[n][rc][idx]
            finite = np.isfinite(want_t)
            assert np.array_equal(finite, np.isfinite(got_t)), n
            assert np.all(got_t[finite] <= want_t[finite] * (1 + 1e-12)), n
            assert np.all(got_t[finite] >= base.option_time[n][rc][idx][finite]), n
            assert np.all(got_m[finite] <= want_m[finite] * (1 + 1e-12) + 1.0), n
            if exact_memory:
                assert np.allclose(got_m[finite], want_m[finite], rtol=1e-9, atol=1.0), n
        if exact_memory and n in real.sync_per_microbatch and real.sync_per_microbatch[n].any():
            # ZeRO-2/3's per-micro-batch phases are priced exactly for the extra micro-batches
            checked_slopes = True
            sync = relaxed.option_time[n][False][idx] - relaxed.own_time[n][idx][:, None]
            want = real.option_time[n][False] - real.own_time[n][:, None]
            assert np.allclose(sync[finite], want[finite], rtol=1e-9), n
    assert checked_slopes or not exact_memory
    assert len(relaxed.edges) == len(real.edges)
    for mine, theirs in zip(relaxed.edges, real.edges):
        assert (mine.u, mine.v) == (theirs.u, theirs.v)
        rows = _index(real.strategies.get(theirs.u, real.layouts.get(theirs.u)),
                      base.strategies.get(mine.u, base.layouts.get(mine.u)))
        cols = _index(real.strategies.get(theirs.v, real.layouts.get(theirs.v)),
                      base.strategies.get(mine.v, base.layouts.get(mine.v)))
        for got, want in ((mine.keep, theirs.keep), (mine.recompute, theirs.recompute)):
            sub = got[np.ix_(rows, cols)]
            finite = np.isfinite(want)
            assert np.array_equal(finite, np.isfinite(sub))
            assert np.all(sub[finite] <= want[finite] * (1 + 1e-12) + 1e-15)


def test_relaxation_only_to_a_multiple():
    t = preset("dgx-a100:2")
    problem = build_problem(_graph(8), t, "train", TopologyCost(LinkModel(t)), microbatches=2)
    with pytest.raises(ValueError, match="not a multiple"):
        problem.relaxed(3)
    with pytest.raises(ValueError, match="through is smaller"):
        problem.relaxed(4, through=2)


@pytest.mark.parametrize("frac", [0.4, 0.5, 0.8])
def test_pruning_counts_by_relaxation_changes_no_plan(frac, monkeypatch):
    """The same plan, time, proof and bound with and without the relaxation, and fewer
    problems built with it where the memory limit binds."""
    graph = _graph(16, layers=6, seq=256)
    topo = preset("dgx-a100:2")
    limit = frac * search(graph, topo, time_budget_s=None, pipeline=False).memory.total
    builds: list[int] = []
    plain = flat.build_problem

    def counted(*args, **kwargs):
        builds.append(kwargs["microbatches"])
        return plain(*args, **kwargs)

    monkeypatch.setattr(flat, "build_problem", counted)

    def run():
        return search(graph, topo, memory_limit_bytes=limit, time_budget_s=None,
                      pipeline=False, expert_seed=False)

    pruned = run()
    with_relaxation = list(builds)
    builds.clear()
    monkeypatch.setattr(flat, "_relaxation_prunes", lambda *a, **k: None)
    full = run()
    assert pruned.choices == full.choices
    assert pruned.total_time_s == full.total_time_s
    assert pruned.search.status == full.search.status
    assert pruned.search.lower_bound_s == pytest.approx(full.search.lower_bound_s, rel=1e-12)
    assert len(with_relaxation) <= len(builds)
    if frac < 0.6:  # the limit binds at several counts: some are pruned unbuilt
        assert len(with_relaxation) < len(builds)


def test_builds_sharing_a_memo_equal_builds_alone():
    """Every count's build and every stage's build reuse one memo's tables: the same arrays as
    a build from scratch, for any tensor size and activation copies."""
    t = preset("dgx-a100:2")
    comm = TopologyCost(LinkModel(t))
    memo = BuildMemo(t, comm)
    for k, copies in ((1, 1), (2, 1), (4, 3), (2, 2)):
        graph = _graph(16 // k)
        shared = build_problem(graph, t, "train", comm, microbatches=k,
                               activation_copies=copies, memo=memo)
        alone = build_problem(graph, t, "train", comm, microbatches=k, activation_copies=copies)
        for n in alone.option_time:
            for rc in alone.variant_keys:
                assert np.allclose(shared.option_time[n][rc], alone.option_time[n][rc],
                                   rtol=1e-12, atol=0), n
                assert np.array_equal(shared.option_memory[n][rc], alone.option_memory[n][rc])
        for mine, theirs in zip(shared.edges, alone.edges, strict=True):
            assert np.allclose(mine.keep, theirs.keep, rtol=1e-12, atol=1e-18)
            for rc in alone.variant_keys:
                assert np.allclose(mine.matrix(rc), theirs.matrix(rc), rtol=1e-12, atol=1e-18)
    assert memo.op_tables  # filled once, used by every build after
    other = preset("dgx-a100:1")
    with pytest.raises(ValueError, match="another topology"):
        build_problem(_graph(16), other, "train", TopologyCost(LinkModel(other)), memo=memo)


def test_memory_weight_zero_solves_the_kept_variant_only_when_recomputing_never_wins():
    """At memory weight 0 the recomputed variants are skipped only when they are checked to
    cost at least as much everywhere; a problem where recomputing were faster still solves
    every variant (kept, selective, full: the model keeps attention scores)."""
    from dataclasses import replace as dc_replace

    from taps_core.search.layered import solve_problem, variants
    from taps_core.search.problem import FULL, KEPT, SELECTIVE
    from taps_core.solver import solve

    t = preset("dgx-a100:1")
    problem = build_problem(_graph(8, layers=4), t, "train", TopologyCost(LinkModel(t)))
    assert problem.recompute_never_faster
    assert variants(problem, memory_weight=0.0) == (KEPT,)
    assert variants(problem, memory_weight=1e-12) == (KEPT, SELECTIVE, FULL)
    every = min(solve(problem.cost_graph(0.0, recompute=rc)).cost
                for rc in (KEPT, SELECTIVE, FULL))
    assert solve_problem(problem, 0.0).cost == pytest.approx(every, rel=1e-12)
    # recomputing made cheaper than keeping (not a real cost model): every variant solved
    cheaper = {n: {**v, FULL: v[FULL] * 0.5} if problem.layer[n] is not None else v
               for n, v in problem.option_time.items()}
    odd = dc_replace(problem, option_time=cheaper)
    assert not odd.recompute_never_faster
    assert variants(odd, memory_weight=0.0) == (KEPT, SELECTIVE, FULL)
    sol = solve_problem(odd, 0.0)
    assert sol.cost == pytest.approx(solve(odd.cost_graph(0.0, recompute=FULL)).cost, rel=1e-12)
    assert sol.recompute and all(v == FULL for v in sol.recompute.values())


def test_structure_memo_is_shared_by_derived_problems_of_the_same_structure_only():
    from taps_core.search.layered import find_chain

    t = preset("dgx-a100:1")
    problem = build_problem(_graph(8, layers=4), t, "train", TopologyCost(LinkModel(t)))
    chain = find_chain(problem)
    assert chain is not None
    for derived in (problem.restricted(1), problem.relaxed(2), problem.own_only(),
                    problem.with_copies(2)):
        assert derived.structure_memo is problem.structure_memo
        assert find_chain(derived) is chain
    first_layers = {n for n, lay in problem.layer.items() if lay is None or lay < 2}
    part = problem.subproblem(first_layers)
    assert part.structure_memo is not problem.structure_memo
    assert find_chain(part) is None  # two layers: no chain, not the whole model's


@pytest.mark.parametrize("mode, k", [("train", 1), ("train", 4), ("infer", 1)])
def test_op_tables_priced_from_shapes_equal_the_phases_priced_one_by_one(mode, k):
    """The process-wide op shapes (phases summed per level, group size and pattern) priced on
    two link speeds and the volume model give each phase's seconds summed one by one, and a
    ZeRO stage an op does not offer stays out (infinite time)."""
    from taps_core.cluster.topology import scale_inter_bandwidth
    from taps_core.costs.collectives import VolumeCost
    from taps_core.costs.ops import op_cost, weight_phases, zero_stages
    from taps_core.ir.strategies import Mesh, SearchSpace, op_strategies

    graph = _graph(16)
    base = preset("dgx-a100:4")
    stages = (0, 1, 2, 3) if mode == "train" else (0, 3)
    for topology in (base, scale_inter_bandwidth(base, 3e9)):
        for comm in (TopologyCost(LinkModel(topology)), VolumeCost()):
            memo = BuildMemo(topology, comm)
            for op in graph.ops[:12]:
                strats = op_strategies(graph, op, Mesh(topology.nodes, topology.gpus_per_node),
                                       SearchSpace())
                tab = memo.tables(graph, op, strats, mode, stages, k)
                for i, s in enumerate(strats):
                    c = op_cost(graph, op, s, topology, mode)
                    fwd = sum(comm.seconds(p) for _, p in c.fwd)
                    assert tab.fwd[i] == pytest.approx(fwd, rel=1e-12, abs=1e-18)
                    assert tab.bwd[i] == pytest.approx(
                        sum(comm.seconds(p) for _, p in c.bwd), rel=1e-12, abs=1e-18)
                    for j, z in enumerate(stages):
                        if z not in zero_stages(c, mode):
                            assert tab.weight_time[i, j] == np.inf
                            continue
                        now, more = (sum(comm.seconds(p) for w in c.weights
                                         for _, p in weight_phases(w, mode, z, m))
                                     for m in (k, k + 1))
                        assert tab.weight_time[i, j] == pytest.approx(now, rel=1e-12, abs=1e-18)
                        assert tab.weight_slope[i, j] == pytest.approx(
                            more - now, rel=1e-9, abs=1e-15)
