"""The "review pack": one zip with everything a design review needs from the current view.

Charts as SVG and PNG (rendered by kaleido through the system chromium; when that is missing
the pack says so and keeps the interactive HTML report, whose charts export themselves), the
self-contained HTML report, the plan JSON and the URL that reproduces the view.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

ATTEMPTS = 3  # a browser that fails to start or render under load gets another chance
CHROMIUM = "/usr/lib/chromium/chromium"  # Debian's chromium binary (kaleido's browser)


def render_images(
    figures: Mapping[str, go.Figure], *, attempts: int = ATTEMPTS
) -> tuple[dict[str, bytes], str | None]:
    """``{"<name>.svg": bytes, "<name>.png": bytes, ...}`` in one browser session, or an
    empty dict and the reason static export is unavailable.

    kaleido starts a fresh chromium per call; on a loaded machine that start (or a render)
    sometimes fails, so a failed call is retried, after a pause, with a new browser.
    Missing kaleido or chromium is not retried.
    """
    names = [f"{name}.{fmt}" for fmt in ("svg", "png") for name in figures]
    figs = [fig for _ in ("svg", "png") for fig in figures.values()]
    chromium = os.environ.get("TAPS_CHROMIUM", CHROMIUM)
    if "BROWSER_PATH" not in os.environ and os.access(chromium, os.X_OK):
        # the browser itself, not Debian's /usr/bin/chromium shell wrapper (as the tests do)
        os.environ["BROWSER_PATH"] = chromium
    problems: list[str] = []
    for attempt in range(attempts):
        try:
            with tempfile.TemporaryDirectory(prefix="taps-pack-") as tmp:
                paths = [os.path.join(tmp, n) for n in names]
                pio.write_images(figs, paths, scale=2)
                images = {n: Path(p).read_bytes() for n, p in zip(names, paths)}
            if all(images.values()):
                return images, None
            problems.append("an image came back empty")
        except Exception as err:  # kaleido or chromium missing or failing: the pack still works
            first = next((ln.strip() for ln in str(err).splitlines() if ln.strip()), "")
            problems.append(f"{type(err).__name__}: {first}")
            if _missing(err):
                break
        if attempt + 1 < attempts:
            time.sleep(1.0 + attempt)
    return {}, "; ".join(problems)


def _missing(err: Exception) -> bool:
    """True when static export cannot work here at all (no kaleido, or no browser for it):
    plotly then raises ImportError, or RuntimeError with "... requires ..." advice."""
    return isinstance(err, ImportError) or (
        isinstance(err, RuntimeError) and "requires" in str(err).lower()
    )


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
