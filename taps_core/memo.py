"""A bounded memo of pure results shared by the searches of one process.

Some results do not depend on a bandwidth (an op's phases, a stage's shape): a sweep, an edited
link or a second page asks for them again. :class:`LruMemo` keeps the most recently used ones,
so memory stays bounded, and is safe to share between threads (two threads computing one key
store equal values). The answers are the same with it cold: it is a memo, not state.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
_EVERY_MEMO: weakref.WeakSet[LruMemo] = weakref.WeakSet()


def clear_all() -> None:
    """Empty every process memo (a benchmark timing searches as a fresh process runs them)."""
    for memo in list(_EVERY_MEMO):
        memo.clear()


class LruMemo(Generic[V]):
    """At most ``max_entries`` results by key and, given ``size`` (bytes of a value), at most
    ``max_bytes`` of them; the least recently used are dropped first."""

    def __init__(
        self,
        max_entries: int,
        *,
        max_bytes: float = float("inf"),
        size: Callable[[V], int] | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries, self.max_bytes, self._size = max_entries, max_bytes, size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._bytes: dict[Hashable, int] = {}
        self._total = 0  # sum of _bytes, kept as values come and go
        self._lock = threading.Lock()
        _EVERY_MEMO.add(self)

    def get_or(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``compute()`` kept and returned."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()  # outside the lock: other keys are served meanwhile
        self.put(key, value)
        return value

    def get(self, key: Hashable) -> V | None:
        """The value kept for ``key``, or None."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key]

    def put(self, key: Hashable, value: V) -> None:
        """Keep ``value`` for ``key`` (the least recently used go past the bounds)."""
        nbytes = self._size(value) if self._size is not None else 0
        with self._lock:
            self._total += nbytes - self._bytes.get(key, 0)
            self._items[key] = value
            self._bytes[key] = nbytes
            self._items.move_to_end(key)
            while len(self._items) > 1 and (
                len(self._items) > self.max_entries or self._total > self.max_bytes
            ):
                old, _ = self._items.popitem(last=False)
                self._total -= self._bytes.pop(old)

    @property
    def nbytes(self) -> int:
        """Bytes of the values kept (0 without a ``size``)."""
        return self._total

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes.clear()
            self._total = 0
