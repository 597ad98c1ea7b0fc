"""Screenshots of every dashboard page: ``python -m benchmarks.screenshots`` (minutes at scale).

Starts ``streamlit run app.py`` on a free loopback port (benchmarks.dashboard_speed's helpers),
opens every page of app.py's PAGES in headless chromium for three cases (gpt2 on dgx-a100:2,
llama3-70b on 16 and gpt3-175b on 128 DGX hosts, training), waits until the page is done (run
over, charts drawn; at most PAGE_TIMEOUT_S) and screenshots the main area with the viewport
grown to the content's height (Streamlit scrolls inside its own container, so a full-page
screenshot would stop at the fold). Writes ``<out>/<case>-<page>.png`` and SCREENSHOTS.md beside
the folder (docs/screenshots and docs/SCREENSHOTS.md by default), listing each picture with what
it shows and how long the page took.
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.dashboard_speed import (
    CHROMIUM,
    PAGE_TIMEOUT_S,
    ROOT,
    Timing,
    free_port,
    launch,
    open_timed,
    start_server,
    stop_server,
)

CASES = {  # name -> (what it is, URL query)
    "gpt2": ("gpt2 training on dgx-a100:2", "?model=gpt2&topo=dgx-a100:2"),
    "llama3-70b": (
        "llama3-70b training on dgx-a100:16 at batch 1536",
        "?model=llama3-70b&topo=dgx-a100:16&batch=1536",
    ),
    "gpt3-175b": (
        "gpt3-175b training on dgx-a100:128 at batch 1536",
        "?model=gpt3-175b&topo=dgx-a100:128&batch=1536",
    ),
}
SHOWS = {  # url path -> one line on what the page shows
    "plan": "headline figures, why this plan, memory per device, operator graph, per-op table",
    "topology": "the cluster drawn with link bandwidths, the link editor",
    "links": "per-link bytes and busy time by op kind, GPU x GPU heatmap, busiest links",
    "compare": "TAPS against the volume-based, Megatron-style and data-parallel plans",
    "sweep": "step time vs inter-node bandwidth (8 points), plan changes and regimes",
    "how-it-works": "why bytes are not time: one all-reduce priced two ways on this cluster",
}
WIDTH_PX, MIN_HEIGHT_PX, MAX_HEIGHT_PX = 1600, 1000, 8000
BOTTOM_MARGIN_PX = 48
SETTLE_MS = 500  # plotly finishes laying out text after the run is over
MAIN = '[data-testid="stMain"]'
MAIN_HEIGHT_JS = """() => {  // from the main area's top to the last element's bottom
  const main = document.querySelector('[data-testid="stMain"]');
  const body = document.querySelector('[data-testid="stMainBlockContainer"] > div');
  if (!main || !body) return 0;
  return Math.ceil(body.getBoundingClientRect().bottom - main.getBoundingClientRect().top);
}"""
ERRORS = '[data-testid="stAlertContentError"], [data-testid="stException"]'
COUNT_JS = """sel => document.querySelectorAll(sel).length"""


@dataclass(frozen=True)
class Shot:
    """One page's screenshot: where, how long the page took, what was on it."""

    case: str
    page: str
    path: Path
    timing: Timing
    charts: int
    warnings: int
    errors: int
    height_px: int


def app_pages() -> dict[str, str]:
    """{url path: title} of app.py's PAGES, read from its source (importing it runs the app)."""
    tree = ast.parse((ROOT / "app.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "PAGES" for t in node.targets
        ):
            return {url: title for _, title, _, url, _ in ast.literal_eval(node.value)}
    raise SystemExit("app.py has no PAGES list")


def page_url(base: str, url_path: str, query: str, home: str) -> str:
    """The page's address; the home page (first of PAGES) is served at the root."""
    return f"{base}/{'' if url_path == home else url_path}{query}"


def count(page, selector: str) -> int:
    """Elements matching ``selector`` on the page."""
    return int(page.evaluate(COUNT_JS, selector))


def shoot(page, url: str, path: Path, timeout_s: float) -> tuple[Timing, int]:
    """Open ``url``, wait until done (or ``timeout_s``), screenshot the main area into
    ``path`` at the content's height (capped at MAX_HEIGHT_PX); returns timing and height."""
    timing = open_timed(page, url, timeout_s)
    page.wait_for_timeout(SETTLE_MS)
    height_px = int(page.evaluate(MAIN_HEIGHT_JS)) + BOTTOM_MARGIN_PX
    page.set_viewport_size(
        {"width": WIDTH_PX, "height": min(max(height_px, MIN_HEIGHT_PX), MAX_HEIGHT_PX)}
    )
    page.wait_for_timeout(SETTLE_MS)
    page.locator(MAIN).screenshot(path=str(path))
    page.set_viewport_size({"width": WIDTH_PX, "height": MIN_HEIGHT_PX})
    return timing, height_px


def shoot_case(browser, base: str, case: str, pages: list[str], out: Path, timeout_s: float):
    """Screenshots of ``pages`` for one case, in one browser session (a new Streamlit session
    per page, as when a link is opened); yields a Shot per page as it is taken."""
    query = CASES[case][1]
    home = next(iter(app_pages()))
    ctx = browser.new_context(viewport={"width": WIDTH_PX, "height": MIN_HEIGHT_PX})
    page = ctx.new_page()
    try:
        for name in pages:
            path = out / f"{case}-{name}.png"
            timing, height_px = shoot(page, page_url(base, name, query, home), path, timeout_s)
            yield Shot(
                case,
                name,
                path,
                timing,
                charts=count(page, ".js-plotly-plot"),
                warnings=count(page, '[data-testid="stAlertContentWarning"]'),
                errors=count(page, ERRORS),
                height_px=height_px,
            )
    finally:
        ctx.close()


def done_text(t: Timing, timeout_s: float) -> str:
    """'6.1 s', or '> 600 s (not done)' when the page did not finish."""
    return f"> {timeout_s:g} s (not done)" if t.done_s is None else f"{t.done_s:.1f} s"


def shot_line(shot: Shot, md_dir: Path, titles: dict[str, str], timeout_s: float) -> str:
    """One table row: page, picture link, what it shows (and what was seen), time to done."""
    seen = [f"{shot.charts} chart{'s' * (shot.charts != 1)}"]
    seen += [f"{shot.warnings} warning box(es)"] if shot.warnings else []
    seen += [f"**{shot.errors} error box(es)**"] if shot.errors else []
    if shot.height_px > MAX_HEIGHT_PX:
        seen.append(f"cut at {MAX_HEIGHT_PX} px of {shot.height_px}")
    link = os.path.relpath(shot.path, md_dir)
    return (
        f"| {titles[shot.page]} | [{shot.path.name}]({link}) | {SHOWS.get(shot.page, '')} "
        f"({', '.join(seen)}) | {done_text(shot.timing, timeout_s)} |"
    )


def markdown(shots: list[Shot], md_dir: Path, timeout_s: float, load: tuple[float, ...]) -> str:
    """SCREENSHOTS.md: the command, date and machine, then a table per case."""
    titles = app_pages()
    lines = [
        "# Dashboard screenshots",
        "",
        "Taken by `python -m benchmarks.screenshots` (`--cases`, `--pages`, `--out DIR`): "
        "`streamlit run app.py` and headless Debian chromium (Playwright), viewport "
        f"{WIDTH_PX} px wide and as tall as the page (at most {MAX_HEIGHT_PX} px), main area "
        f"only. {time.strftime('%Y-%m-%d')}; machine: {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {load[0]:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end (the cores are shared: times are noisy).",
        "",
        "\"Done\" is the time from opening the page's URL in a new Streamlit session until "
        "its script run is over (no running state, no spinner). Pages are opened in the order "
        "below, so the Plan page includes the search and later pages reuse the server's "
        f"cached plan; each wait gives up after {timeout_s:g} s.",
    ]
    for case in dict.fromkeys(s.case for s in shots):
        what, query = CASES[case]
        lines += [
            "",
            f"## {what} (`{query}`)",
            "",
            "| page | picture | what it shows | done |",
            "|---|---|---|---|",
            *(shot_line(s, md_dir, titles, timeout_s) for s in shots if s.case == case),
        ]
    return "\n".join([*lines, ""])


def run(cases: list[str], pages: list[str], out: Path, timeout_s: float) -> list[Shot]:
    """Start a server, take every (case, page) screenshot into ``out``, stop the server."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    log = ROOT / "test-artifacts" / "screenshots.log"
    log.parent.mkdir(exist_ok=True)
    port = free_port()
    proc = start_server(port, log)
    base = f"http://127.0.0.1:{port}"
    shots: list[Shot] = []
    try:
        with sync_playwright() as p:
            browser = launch(p)
            for case in cases:
                for shot in shoot_case(browser, base, case, pages, out, timeout_s):
                    print(f"{shot.path.name}: {done_text(shot.timing, timeout_s)}", flush=True)
                    shots.append(shot)
            browser.close()
    finally:
        stop_server(proc)
    return shots


def main(argv: list[str] | None = None) -> int:
    pages = list(app_pages())
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--pages", nargs="+", choices=pages, default=pages)
    ap.add_argument(
        "--out",
        type=Path,
        default=ROOT / "docs" / "screenshots",
        help="folder of the PNGs; SCREENSHOTS.md is written beside it (in its parent)",
    )
    ap.add_argument("--timeout", type=float, default=PAGE_TIMEOUT_S, help="seconds per page")
    args = ap.parse_args(argv)
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    load = os.getloadavg()
    shots = run(args.cases, args.pages, args.out, args.timeout)
    md = args.out.parent / "SCREENSHOTS.md"
    md.write_text(markdown(shots, md.parent, args.timeout, load))
    print(f"wrote {len(shots)} screenshots into {args.out} and {md}")
    return 0 if all(s.timing.done_s is not None and not s.errors for s in shots) else 1


if __name__ == "__main__":
    raise SystemExit(main())
