"""The min-plus matrix product every solver here uses: ``out[i, k] = min_j a[i, j] + mid[j] +
b[j, k]``, with its argmin (:func:`min_plus`) or without (:func:`min_plus_values`).

One compiled call (numba) per product, keeping no ``[i, j, k]`` temporaries and skipping
infinite entries of ``a``. Where ``mid + b`` is mostly infinite (a selection: a layout
conversion free for one target only), only its finite entries are visited; otherwise four
rows ``j`` go through a vectorised pass over ``k``. Values are ``a[i, j] + (mid[j] + b[j, k])``
and the argmin is the first ``j`` reaching the minimum, as numpy's argmin picks. Products of
:data:`PARALLEL_TERMS` terms or more spread their rows over the cores (rows are independent:
the same values and argmins).
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
    """Both products in one compiled call, visiting only the finite entries of ``a`` and, where
    ``right = mid + b`` is mostly infinite, of ``right``: a selection (one finite entry per
    line, e.g. a layout conversion free for one target only) costs what its finite terms cost,
    and a dense product runs the vectorised row loop. One call instead of numpy shortcuts
    and their structure tests keeps small products (most of a small graph's elimination)
    cheap; the threads start only for products whose finite terms are many."""
    n_i, n_j = a.shape
    n_k = b.shape[1]
    arg = np.zeros((n_i, n_k) if with_arg else (0, 0), dtype=np.int32)
    if n_j == 0:
        return np.full((n_i, n_k), np.inf), arg if with_arg else None
    # a transposed view of a (as an elimination passes) is read through its transpose, not
    # copied; the kernels see C-ordered arrays only (one compiled version of each)
    flipped = a.flags.f_contiguous and not a.flags.c_contiguous
    stored = np.ascontiguousarray(a.T if flipped else a, dtype=np.float64)
    right = np.ascontiguousarray(mid[:, None] + b, dtype=np.float64)  # [j, k]
    left = _finite_entries(stored, 1, flipped)  # dense only when every entry is finite
    rows = _finite_entries(right, SPARSE_SHARE, False)
    out = np.empty((n_i, n_k))
    if n_i > 1 and _terms(left, rows, n_k) >= PARALLEL_TERMS:
        _rows_parallel(stored, flipped, right, left, rows, out, arg)
    else:
        _rows(stored, flipped, right, left, rows, out, arg)
    return out, arg if with_arg else None


PARALLEL_TERMS = 2_000_000  # products this large split their rows over the cores (measured: 1.6x
# on two cores at 400 x 400 x 400; below ~100^3 starting the threads costs more than it saves)


SPARSE_SHARE = 4  # below 1 / SPARSE_SHARE finite entries of mid + b, only those are visited


@numba.njit(cache=True)
def _finite_entries(
    x: np.ndarray, share: int, transposed: bool
) -> tuple[np.ndarray, np.ndarray, bool]:
    """The finite entries of ``x`` (of ``x.T`` when ``transposed``: read in ``x``'s memory
    order) row by row (CSR: row ``j``'s columns are ``cols[ptr[j]:ptr[j + 1]]``, increasing)
    and whether the dense loop should run instead: at least ``1 / share`` of the entries
    finite (the vectorised pass is ~4x a branching indexed one, and an infinite entry never
    wins a strict ``<``); ``cols`` is then ``0..columns - 1``, every row's."""
    n_rows, n_cols = (x.shape[1], x.shape[0]) if transposed else (x.shape[0], x.shape[1])
    count = np.zeros(n_rows, dtype=np.int64)
    for p in range(x.shape[0]):
        for q in range(x.shape[1]):
            if x[p, q] != np.inf:
                count[q if transposed else p] += 1
    ptr = np.zeros(n_rows + 1, dtype=np.int64)
    ptr[1:] = np.cumsum(count)
    if ptr[n_rows] * share >= n_rows * n_cols:
        return ptr, np.arange(n_cols), True
    cols = np.empty(ptr[n_rows], dtype=np.int64)
    at = ptr[:-1].copy()  # where each row's next column goes
    for p in range(x.shape[0]):
        for q in range(x.shape[1]):
            if x[p, q] != np.inf:
                row, col = (q, p) if transposed else (p, q)
                cols[at[row]] = col
                at[row] += 1
    return ptr, cols, False


Index = tuple[np.ndarray, np.ndarray, bool]  # (ptr, cols, dense) of :func:`_finite_entries`


@numba.njit(cache=True)
def _terms(left: Index, rows: Index, n_k: int) -> int:
    """Terms the product visits: each finite ``a[i, j]`` times row ``j``'s entries."""
    l_ptr, l_cols, l_dense = left
    r_ptr, _, r_dense = rows
    if r_dense:
        return (l_ptr.shape[0] - 1) * l_cols.shape[0] * n_k if l_dense else l_ptr[-1] * n_k
    if l_dense:
        return (l_ptr.shape[0] - 1) * r_ptr[-1]
    total = 0
    for q in range(l_ptr[-1]):
        j = l_cols[q]
        total += r_ptr[j + 1] - r_ptr[j]
    return total


@numba.njit(cache=True)
def _rows(
    a: np.ndarray, flipped: bool, right: np.ndarray, left: Index, rows: Index,
    out: np.ndarray, arg: np.ndarray,
) -> None:
    """``out[i, k] = min_j a[i, j] + right[j, k]`` (``a`` stored transposed when ``flipped``)
    and, where ``arg`` (int32) has room, the first ``j`` reaching it (0 where every term is
    infinite); row by row."""
    for i in range(out.shape[0]):
        _row(a, flipped, right, left, rows, out, arg, i)


@numba.njit(cache=True, parallel=True)
def _rows_parallel(
    a: np.ndarray, flipped: bool, right: np.ndarray, left: Index, rows: Index,
    out: np.ndarray, arg: np.ndarray,
) -> None:
    """:func:`_rows` with its rows spread over the cores (each row is independent, so the
    values and argmins are the same)."""
    for i in numba.prange(out.shape[0]):
        _row(a, flipped, right, left, rows, out, arg, i)


@numba.njit(cache=True)
def _row(
    a: np.ndarray, flipped: bool, right: np.ndarray, left: Index, rows: Index,
    out: np.ndarray, arg: np.ndarray, i: int,
) -> None:
    """Row ``i`` of :func:`_rows`, over the finite ``a[i, j]`` only, in increasing ``j`` with
    a strict ``<`` (the argmin is the first ``j`` reaching the minimum, as numpy's argmin)."""
    l_ptr, l_cols, l_dense = left
    r_ptr, r_cols, r_dense = rows
    finite = l_cols if l_dense else l_cols[l_ptr[i]:l_ptr[i + 1]]
    if flipped:  # gather the row's finite entries (only those are read)
        row = np.empty(a.shape[0])
        for j in finite:
            row[j] = a[j, i]
    else:
        row = a[i]
    o = out[i]
    o[:] = np.inf
    with_arg = arg.shape[0] > 0
    if r_dense:
        if with_arg:
            _row_with_arg(row, right, finite, o, arg[i])
        else:
            _row_values(row, right, finite, o)
        return
    for j in finite:
        x = row[j]
        for q in range(r_ptr[j], r_ptr[j + 1]):
            k = r_cols[q]
            v = x + right[j, k]
            if v < o[k]:
                o[k] = v
                if with_arg:
                    arg[i, k] = j


@numba.njit(cache=True)
def _row_with_arg(
    row: np.ndarray, right: np.ndarray, finite: np.ndarray, o: np.ndarray, g: np.ndarray
) -> None:
    """``o[k] = min_j row[j] + right[j, k]`` over ``j`` in ``finite`` (increasing), ``g[k]``
    the first ``j`` reaching it (0 when none does): four rows ``j`` of ``right`` per pass over
    ``k``, branch-free, so the compiler vectorises the pass and ``o`` is read and written once
    per four ``j`` (measured 4-7x the one-``j`` branching loop at 150-600 terms a side)."""

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
