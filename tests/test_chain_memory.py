"""The chain-of-layers memory DP against brute force: exact at byte resolution, a proven
bound and a fitting plan at coarse resolution, None when nothing fits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from taps_core.search.chain_memory import ChainPoints, cheapest_chain


def _random(seed: int) -> tuple[ChainPoints, ChainPoints, int]:
    rng = np.random.default_rng(seed)
    states = int(rng.integers(1, 4))
    n_layer, n_rest = int(rng.integers(3, 8)), int(rng.integers(1, 5))
    layer = ChainPoints(
        rng.integers(0, states, n_layer),
        rng.integers(0, states, n_layer),
        rng.uniform(1.0, 2.0, n_layer),
        rng.integers(10, 40, n_layer).astype(float),
    )
    rest = ChainPoints(
        rng.integers(0, states, n_rest),
        rng.integers(0, states, n_rest),
        rng.uniform(0.5, 1.5, n_rest),
        rng.integers(5, 20, n_rest).astype(float),
    )
    return layer, rest, int(rng.integers(1, 5))


def _brute(layer: ChainPoints, rest: ChainPoints, repeats: int, limit: float) -> float:
    """Least seconds over every rest point and sequence of layer points that joins up."""
    best = math.inf
    for q in range(len(rest.time_s)):
        for seq in itertools.product(range(len(layer.time_s)), repeat=repeats):
            state = rest.entry[q]
            ok = True
            for p in seq:
                ok = ok and layer.entry[p] == state
                state = layer.exit[p]
            if not ok or state != rest.exit[q]:
                continue
            mem = rest.memory_bytes[q] + sum(layer.memory_bytes[p] for p in seq)
            if mem <= limit:
                best = min(best, rest.time_s[q] + sum(layer.time_s[p] for p in seq))
    return best


def _check_path(layer: ChainPoints, rest: ChainPoints, answer) -> None:  # type: ignore[no-untyped-def]
    state = rest.entry[answer.rest]
    for p in answer.layers:
        assert layer.entry[p] == state
        state = layer.exit[p]
    assert state == rest.exit[answer.rest]


@pytest.mark.parametrize("seed", range(40))
def test_exact_at_byte_resolution(seed):
    layer, rest, repeats = _random(seed)
    least = repeats * layer.memory_bytes.min() + rest.memory_bytes.min()
    most = repeats * layer.memory_bytes.max() + rest.memory_bytes.max()
    limit = float(np.floor((least + most) / 2))
    best = _brute(layer, rest, repeats, limit)
    steps = int(limit - least)  # one step per byte: no rounding at all
    answer = cheapest_chain(layer, rest, repeats, limit, steps=max(steps, 1))
    if math.isinf(best):
        assert answer is None
        return
    assert answer is not None and answer.proven
    assert answer.time_s == pytest.approx(best, rel=1e-12)
    assert answer.memory_bytes <= limit and len(answer.layers) == repeats
    _check_path(layer, rest, answer)


@pytest.mark.parametrize("seed", range(40))
def test_coarse_steps_give_a_fitting_plan_and_a_true_bound(seed):
    layer, rest, repeats = _random(seed)
    least = repeats * layer.memory_bytes.min() + rest.memory_bytes.min()
    most = repeats * layer.memory_bytes.max() + rest.memory_bytes.max()
    limit = float(least + 0.37 * (most - least))
    best = _brute(layer, rest, repeats, limit)
    answer = cheapest_chain(layer, rest, repeats, limit, steps=3)
    if answer is None:
        assert math.isinf(best)
        return
    assert answer.memory_bytes <= limit
    _check_path(layer, rest, answer)
    assert answer.lower_bound_s <= best * (1 + 1e-12) <= answer.time_s * (1 + 1e-12)
    if answer.proven:
        assert answer.time_s == pytest.approx(best, rel=1e-12)


def test_nothing_fits():
    layer, rest, repeats = _random(3)
    least = repeats * layer.memory_bytes.min() + rest.memory_bytes.min()
    assert cheapest_chain(layer, rest, repeats, least - 1.0) is None


def test_a_limit_at_the_least_chain_keeps_only_the_leanest_points():
    layer = ChainPoints(np.zeros(2, int), np.zeros(2, int), np.array([2.0, 1.0]),
                        np.array([10.0, 11.0]))
    rest = ChainPoints(np.zeros(1, int), np.zeros(1, int), np.array([0.5]), np.array([3.0]))
    answer = cheapest_chain(layer, rest, 3, 33.0)
    assert answer is not None and answer.layers == (0, 0, 0) and answer.proven
    answer = cheapest_chain(layer, rest, 3, 34.0)  # room for exactly one faster layer
    assert answer is not None and sorted(answer.layers) == [0, 0, 1]
    assert answer.time_s == pytest.approx(5.5)
