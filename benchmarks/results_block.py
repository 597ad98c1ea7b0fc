"""Blocks of docs/RESULTS.md written by their own benchmark command, between HTML markers, so
the full report (``python -m benchmarks``) keeps them when it rewrites the rest."""

from __future__ import annotations

from pathlib import Path


def write_block(path: Path, begin: str, end: str, text: str) -> None:
    """Replace the block from ``begin`` to ``end`` in ``path`` with ``text`` (which carries the
    markers itself); append it when the file has no such block."""
    old = path.read_text() if path.exists() else ""
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        tail = rest.split(end, 1)[1].lstrip("\n")
        new = head + text + ("\n" + tail if tail else "")
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new)


def kept_block(path: Path, begin: str, end: str) -> str | None:
    """The block from ``begin`` to ``end`` in ``path`` (markers included), or None."""
    old = path.read_text() if path.exists() else ""
    if begin not in old or end not in old:
        return None
    return begin + old.split(begin, 1)[1].split(end, 1)[0] + end + "\n"
