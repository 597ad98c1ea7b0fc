"""The bounded memo shared by a process's searches: it keeps the most recently used results,
computes each missing key once per call and refuses a size that holds nothing."""

from __future__ import annotations

import pytest

from taps_core.memo import LruMemo


def test_keeps_the_most_recently_used_entries():
    memo: LruMemo[int] = LruMemo(2)
    calls = []

    def compute(x: int):
        return lambda: calls.append(x) or x * 10

    assert memo.get_or("a", compute(1)) == 10
    assert memo.get_or("b", compute(2)) == 20
    assert memo.get_or("a", compute(99)) == 10  # kept: not computed again
    memo.get_or("c", compute(3))  # evicts "b", the least recently used
    assert len(memo) == 2
    assert memo.get_or("b", compute(4)) == 40
    assert calls == [1, 2, 3, 4]


def test_refuses_a_memo_that_holds_nothing():
    with pytest.raises(ValueError, match="max_entries"):
        LruMemo(0)


def test_clear_all_empties_every_memo_of_the_process():
    """What a benchmark calls to time a search as a fresh process runs it."""
    from taps_core.memo import clear_all

    memo: LruMemo[int] = LruMemo(4)
    memo.get_or("a", lambda: 1)
    clear_all()
    assert len(memo) == 0
