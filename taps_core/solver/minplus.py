"""The min-plus matrix product every solver here uses: ``out[i, k] = min_j a[i, j] + mid[j] +
b[j, k]``, with its argmin (:func:`min_plus`) or without (:func:`min_plus_values`).

Selection matrices (one finite entry per row or column, e.g. a layout conversion that is free
for one target only) take O(n^2) shortcuts in numpy; the dense case runs in a compiled loop
(numba), which keeps no ``[i, j, k]`` temporaries and skips infinite entries of ``a``: 3-9x
the chunked numpy product it replaced on the layer sizes of the presets (measured), and the
same values and argmins (``a[i, j] + (mid[j] + b[j, k])``, the first ``j`` reaching the
minimum, as numpy's argmin picks). Products of :data:`PARALLEL_TERMS` terms or more spread their
rows over the cores (rows are independent: the same values and argmins).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import numba
import numpy as np

T = TypeVar("T")


def min_plus(a: np.ndarray, mid: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``out[i, k] = min_j a[i, j] + mid[j] + b[j, k]`` and its argmin j (int32)."""
    out, arg = _product(a, mid, b, with_arg=True)
    assert arg is not None
    return out, arg


def min_plus_values(a: np.ndarray, mid: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``out[i, k] = min_j a[i, j] + mid[j] + b[j, k]`` (values only)."""
    return _product(a, mid, b, with_arg=False)[0]


def _product(
    a: np.ndarray, mid: np.ndarray, b: np.ndarray, *, with_arg: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """Both products: the shortcuts first, then the compiled dense loop."""
    n_i, n_j = a.shape
    n_k = b.shape[1]
    if n_j == 0:
        return np.full((n_i, n_k), np.inf), np.zeros((n_i, n_k), dtype=np.int32)
    fin_a, fin_b = np.isfinite(a), np.isfinite(b)
    if _one_each(fin_a, 1):  # each i picks one j
        j = fin_a.argmax(axis=1)
        out = (a[np.arange(n_i), j] + mid[j])[:, None] + b[j]
        return out, np.repeat(j[:, None].astype(np.int32), n_k, axis=1) if with_arg else None
    if _one_each(fin_b, 0):  # each k is reached from one j
        j = fin_b.argmax(axis=0)
        out = a[:, j] + (mid[j] + b[j, np.arange(n_k)])[None, :]
        return out, np.repeat(j[None, :].astype(np.int32), n_i, axis=0) if with_arg else None
    if _one_each(fin_b, 1):  # each j maps to one k
        return _selecting(a, mid, b, with_arg)
    if _one_each(fin_a, 0):  # each j comes from one i
        out, arg = _selecting(b.T, mid, a.T, with_arg)
        return out.T, None if arg is None else arg.T
    a = np.ascontiguousarray(a, dtype=np.float64)
    right = np.ascontiguousarray(mid[:, None] + b, dtype=np.float64)  # [j, k]
    out = np.empty((n_i, n_k))
    arg = np.empty((n_i, n_k) if with_arg else (0, 0), dtype=np.int64)
    if n_i > 1 and n_i * n_j * n_k >= PARALLEL_TERMS:
        _dense_rows(a, right, out, arg)
    else:
        _dense(a, right, out, arg)
    return out, arg.astype(np.int32) if with_arg else None


def _one_each(finite: np.ndarray, axis: int) -> bool:
    """Every row (``axis`` 1) or column (``axis`` 0) of ``finite`` holds exactly one True; the
    first line is looked at before the whole (most products are dense: one cheap test)."""
    if finite.shape[1 - axis] == 0:
        return True  # no line: vacuously one each
    first = finite[0] if axis == 1 else finite[:, 0]
    return bool(np.count_nonzero(first) == 1 and (finite.sum(axis=axis) == 1).all())


PARALLEL_TERMS = 2_000_000  # products this large split their rows over the cores (measured: 1.6x
# on two cores at 400 x 400 x 400; below ~100^3 starting the threads costs more than it saves)


@numba.njit(cache=True)
def _dense(a: np.ndarray, right: np.ndarray, out: np.ndarray, arg: np.ndarray) -> None:
    """``out[i, k] = min_j a[i, j] + right[j, k]`` and, where ``arg`` (int64) has room, the
    first ``j`` reaching it (0 where every term is infinite); row by row."""
    for i in range(a.shape[0]):
        _dense_row(a, right, out, arg, i)


@numba.njit(cache=True, parallel=True)
def _dense_rows(a: np.ndarray, right: np.ndarray, out: np.ndarray, arg: np.ndarray) -> None:
    """:func:`_dense` with its rows spread over the cores (each row is independent, so the
    values and argmins are the same)."""
    for i in numba.prange(a.shape[0]):
        _dense_row(a, right, out, arg, i)


@numba.njit(cache=True)
def _dense_row(a: np.ndarray, right: np.ndarray, out: np.ndarray, arg: np.ndarray, i: int) -> None:
    """Row ``i`` of :func:`_dense`: over the finite ``a[i, j]`` only, four rows ``j`` of
    ``right`` per pass over ``k``, branch-free, so the compiler vectorises the pass and the
    row of ``out`` is read and written once per four ``j`` (measured 4-7x the one-``j``
    branching loop at 150-600 terms a side). The ``j`` of one pass are taken in increasing
    order with a strict ``<``: the argmin stays the first ``j`` reaching the minimum."""
    row = a[i]
    finite = np.flatnonzero(row != np.inf)
    o = out[i]
    o[:] = np.inf
    if arg.shape[0] > 0:
        _row_with_arg(row, right, finite, o, arg[i])
    else:
        _row_values(row, right, finite, o)


@numba.njit(cache=True)
def _row_with_arg(
    row: np.ndarray, right: np.ndarray, finite: np.ndarray, o: np.ndarray, g: np.ndarray
) -> None:
    """``o[k] = min_j row[j] + right[j, k]`` over ``j`` in ``finite`` (increasing), ``g[k]``
    the first ``j`` reaching it (0 when none does)."""
    g[:] = 0
    n_k = right.shape[1]
    q, m = 0, finite.shape[0]
    while q + 4 <= m:
        j0, j1, j2, j3 = finite[q], finite[q + 1], finite[q + 2], finite[q + 3]
        x0, x1, x2, x3 = row[j0], row[j1], row[j2], row[j3]
        r0, r1, r2, r3 = right[j0], right[j1], right[j2], right[j3]
        for k in range(n_k):
            ok, gk = o[k], g[k]
            v = x0 + r0[k]
            b = v < ok
            ok, gk = (v if b else ok), (j0 if b else gk)
            v = x1 + r1[k]
            b = v < ok
            ok, gk = (v if b else ok), (j1 if b else gk)
            v = x2 + r2[k]
            b = v < ok
            ok, gk = (v if b else ok), (j2 if b else gk)
            v = x3 + r3[k]
            b = v < ok
            o[k], g[k] = (v if b else ok), (j3 if b else gk)
        q += 4
    while q < m:
        j0 = finite[q]
        x0, r0 = row[j0], right[j0]
        for k in range(n_k):
            v = x0 + r0[k]
            b = v < o[k]
            o[k], g[k] = (v if b else o[k]), (j0 if b else g[k])
        q += 1


@numba.njit(cache=True)
def _row_values(row: np.ndarray, right: np.ndarray, finite: np.ndarray, o: np.ndarray) -> None:
    """:func:`_row_with_arg` without the argmin."""
    n_k = right.shape[1]
    q, m = 0, finite.shape[0]
    while q + 4 <= m:
        j0, j1, j2, j3 = finite[q], finite[q + 1], finite[q + 2], finite[q + 3]
        x0, x1, x2, x3 = row[j0], row[j1], row[j2], row[j3]
        r0, r1, r2, r3 = right[j0], right[j1], right[j2], right[j3]
        for k in range(n_k):
            o[k] = min(o[k], x0 + r0[k], x1 + r1[k], x2 + r2[k], x3 + r3[k])
        q += 4
    while q < m:
        j0 = finite[q]
        x0, r0 = row[j0], right[j0]
        for k in range(n_k):
            o[k] = min(o[k], x0 + r0[k])
        q += 1


def _selecting(
    a: np.ndarray, mid: np.ndarray, b: np.ndarray, with_arg: bool
) -> tuple[np.ndarray, np.ndarray | None]:
    """The product when each row j of ``b`` has exactly one finite entry (j selects one k):
    each k is a minimum over the j selecting it."""
    col = np.isfinite(b).argmax(axis=1)
    base = a + (mid + b[np.arange(len(col)), col])[None, :]  # [i, j]
    order = np.argsort(col, kind="stable")
    cols = col[order]
    starts = np.flatnonzero(np.r_[True, cols[1:] != cols[:-1]])
    out = np.full((a.shape[0], b.shape[1]), np.inf)
    if not with_arg:
        out[:, cols[starts]] = np.minimum.reduceat(base[:, order], starts, axis=1)
        return out, None
    vals = base[:, order]  # [i, j] grouped by the k each j selects
    mins = np.minimum.reduceat(vals, starts, axis=1)
    out[:, cols[starts]] = mins
    # the first j of each group reaching its minimum (argmin's choice), for all rows at once
    sizes = np.diff(np.r_[starts, len(order)])
    hit = vals == np.repeat(mins, sizes, axis=1)
    first = np.minimum.reduceat(np.where(hit, np.arange(len(order)), len(order)), starts, axis=1)
    arg = np.zeros((a.shape[0], b.shape[1]), dtype=np.int32)
    arg[:, cols[starts]] = order[first]
    return out, arg


def repeated_squaring(base: T, k: int, join: Callable[[T, int, T, int], T]) -> T:
    """``base`` composed with itself ``k >= 1`` times in O(log k) joins. ``join(x, n_x, y, n_y)``
    composes a run of ``n_x`` copies followed by a run of ``n_y`` copies (the run lengths let a
    caller track layer offsets); it must be associative, as the min-plus product is."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    result: T | None = None
    result_len, base_len = 0, 1
    while k:
        if k & 1:
            if result is None:
                result, result_len = base, base_len
            else:
                result = join(result, result_len, base, base_len)
                result_len += base_len
        k >>= 1
        if k:
            base = join(base, base_len, base, base_len)
            base_len *= 2
    assert result is not None
    return result


def min_plus_power(m: np.ndarray, k: int) -> np.ndarray:
    """``m`` min-plus-multiplied by itself ``k >= 1`` times (k identical layers in a chain)."""
    zero = np.zeros(m.shape[0])
    return repeated_squaring(m, k, lambda a, _na, b, _nb: min_plus_values(a, zero, b))
