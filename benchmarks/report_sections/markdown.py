"""Formatting shared by every section: numbers with units, Markdown tables and figure links."""

from __future__ import annotations

from benchmarks.figures import FigureFile
from taps_core.plan.report import fmt_seconds


def pct(x: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (0.25 -> 25.0%); ``n/a`` when there is none."""
    return "n/a" if x is None else f"{100 * x:.{digits}f}%"


def sec(x: float | None) -> str:
    """Seconds with a unit; exact zero as 0, negatives with a sign."""
    if x is None:
        return "n/a"
    if x == 0:
        return "0"
    return ("-" if x < 0 else "") + fmt_seconds(abs(x))


def num(x: float | None, fmt: str = ".3f") -> str:
    """A bare number in format ``fmt`` (the unit is in the column header); ``n/a`` if none."""
    return "n/a" if x is None else format(x, fmt)


def prose_sec(x: float) -> str:
    """Seconds for running text: zero reads as "nothing" rather than "0"."""
    return "nothing" if x == 0 else sec(x)


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A Markdown table; ``align`` is one character per column (l or r)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)


def figure(figs: dict[str, FigureFile], name: str, caption: str) -> str:
    """A figure as a Markdown image (PNG) or link (HTML fallback), or a note it is missing."""
    f = figs.get(name)
    if f is None:
        return f"*(figure {name} was not produced)*"
    if f.format == "png":
        return f"![{caption}]({f.path})"
    return f"[{caption} (interactive HTML; PNG rendering failed: {f.error})]({f.path})"
