"""The "review pack": one zip with everything a design review needs from the current view.

Charts as SVG and PNG (rendered by kaleido through the system chromium; when that is missing
the pack says so and keeps the interactive HTML report, whose charts export themselves), the
self-contained HTML report, the plan JSON and the URL that reproduces the view.
"""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio


def render_images(figures: Mapping[str, go.Figure]) -> tuple[dict[str, bytes], str | None]:
    """``{"<name>.svg": bytes, "<name>.png": bytes, ...}`` in one browser session, or an
    empty dict and the reason static export is unavailable."""
    names = [f"{name}.{fmt}" for fmt in ("svg", "png") for name in figures]
    figs = [fig for _ in ("svg", "png") for fig in figures.values()]
    try:
        with tempfile.TemporaryDirectory(prefix="taps-pack-") as tmp:
            paths = [os.path.join(tmp, n) for n in names]
            pio.write_images(figs, paths, scale=2)
            return {n: Path(p).read_bytes() for n, p in zip(names, paths)}, None
    except Exception as err:  # kaleido or chromium missing or failing: the pack still works
        return {}, f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"


def review_pack(
    figures: Mapping[str, go.Figure],
    *,
    files: Mapping[str, str | bytes],
    url: str,
    summary: str,
) -> bytes:
    """The zip as bytes: every figure as ``<name>.svg`` / ``<name>.png``, the ``files`` as
    given (report, JSON), ``URL.txt`` and a ``README.txt`` listing the contents."""
    images, problem = render_images(figures)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in {**images, **files}.items():
            z.writestr(name, data)
        z.writestr("URL.txt", url + "\n")
        listing = "\n".join(f"  {n}" for n in (*images, *files, "URL.txt"))
        note = (
            f"\nStatic images could not be rendered ({problem}); open the HTML report, whose "
            "charts export PNG and SVG from their camera button.\n"
            if problem
            else ""
        )
        z.writestr("README.txt", f"TAPS Planner review pack\n\n{summary}\n\n{listing}\n{note}")
    return buf.getvalue()
