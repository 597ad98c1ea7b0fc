"""Screenshots of every dashboard page: ``python -m benchmarks.screenshots`` (minutes at scale).

Starts ``streamlit run app.py`` on a free loopback port (benchmarks.dashboard_speed's helpers),
opens every page of app.py's PAGES in headless chromium for three cases (gpt2 on dgx-a100:2,
llama3-70b on 16 and gpt3-175b on 128 DGX hosts, training), waits until the page is done (run
over, charts drawn; at most PAGE_TIMEOUT_S) and screenshots the main area with the viewport
grown to the content's height (Streamlit scrolls inside its own container, so a full-page
screenshot would stop at the fold). Writes ``<out>/<case>-<page>.png`` and SCREENSHOTS.md beside
the folder (docs/screenshots and docs/SCREENSHOTS.md by default), listing each picture with what
it shows and how long the page took. A run with ``--cases`` / ``--pages`` retakes only those;
the page lists every shot recorded in ``<out>/shots.json``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.dashboard_speed import (
    CHROMIUM,
    PAGE_TIMEOUT_S,
    ROOT,
    Timing,
    exit_on_sigterm,
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
    "topology": "the cluster drawn with link bandwidths (past 2 DGX hosts: hosts in blocks, links "
    "per block and class), the link editor",
    "links": "per-link bytes and busy time by op kind (links with the same load in one bar), GPU "
    "x GPU or past 64 GPUs host x host traffic, busiest links",
    "compare": "TAPS against the volume-based, Megatron-style and data-parallel plans",
    "sweep": "step time vs inter-node bandwidth (8 points), plan changes and regimes",
    "how-it-works": "why bytes are not time: one all-reduce priced two ways on this cluster",
}
WIDTH_PX, MIN_HEIGHT_PX, MAX_HEIGHT_PX = 1600, 1000, 8000
BOTTOM_MARGIN_PX = 48
SETTLE_MS = 500  # plotly finishes laying out text after the run is over
MAIN = '[data-testid="stMain"]'
RECORDS = "shots.json"  # beside the PNGs: what each was seen to hold, its timing, when taken
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
    """One page's screenshot: its file, how long the page took (None: not done within
    ``timeout_s``), what was on it and when it was taken; kept in RECORDS beside the PNGs."""

    case: str
    page: str
    file: str
    done_s: float | None
    chart_s: float | None
    charts: int
    warnings: int
    errors: int
    height_px: int
    timeout_s: float
    taken: str  # local time, YYYY-MM-DD HH:MM


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
                path.name,
                timing.done_s,
                timing.chart_s,
                charts=count(page, ".js-plotly-plot"),
                warnings=count(page, '[data-testid="stAlertContentWarning"]'),
                errors=count(page, ERRORS),
                height_px=height_px,
                timeout_s=timeout_s,
                taken=time.strftime("%Y-%m-%d %H:%M"),
            )
    finally:
        ctx.close()


def load_records(out: Path) -> dict[str, Shot]:
    """The shots recorded in ``out`` by earlier runs (by file name); none if never run."""
    path = out / RECORDS
    if not path.is_file():
        return {}
    return {r["file"]: Shot(**r) for r in json.loads(path.read_text())}


def save_records(out: Path, shots: dict[str, Shot]) -> list[Shot]:
    """Write ``shots`` to ``out``/RECORDS, in CASES x pages order; returns them in that order."""
    pages = list(app_pages())
    order = sorted(
        shots.values(),
        key=lambda s: (list(CASES).index(s.case), pages.index(s.page) if s.page in pages else 99),
    )
    (out / RECORDS).write_text(json.dumps([asdict(s) for s in order], indent=1) + "\n")
    return order


def done_text(shot: Shot) -> str:
    """'6.1 s', or '> 600 s (not done)' when the page did not finish."""
    return f"> {shot.timeout_s:g} s (not done)" if shot.done_s is None else f"{shot.done_s:.1f} s"


def shot_line(shot: Shot, link_dir: str, titles: dict[str, str]) -> str:
    """One table row: page, picture link, what it shows (and what was seen), time to done."""
    seen = [f"{shot.charts} chart{'s' * (shot.charts != 1)}"]
    seen += [f"{shot.warnings} warning box(es)"] if shot.warnings else []
    seen += [f"**{shot.errors} error box(es)**"] if shot.errors else []
    if shot.height_px > MAX_HEIGHT_PX:
        seen.append(f"cut at {MAX_HEIGHT_PX} px of {shot.height_px}")
    return (
        f"| {titles.get(shot.page, shot.page)} | [{shot.file}]({link_dir}/{shot.file}) "
        f"| {SHOWS.get(shot.page, '')} ({', '.join(seen)}) | {done_text(shot)} | {shot.taken} |"
    )


def markdown(shots: list[Shot], link_dir: str, load: tuple[float, float]) -> str:
    """SCREENSHOTS.md: the command, date and machine, then a table per case."""
    titles = app_pages()
    lines = [
        "# Dashboard screenshots",
        "",
        "Taken by `python -m benchmarks.screenshots` (`--cases`, `--pages`, `--out DIR`): "
        "`streamlit run app.py` and headless Debian chromium (Playwright), viewport "
        f"{WIDTH_PX} px wide and as tall as the page (at most {MAX_HEIGHT_PX} px), main area "
        f"only. Machine: {os.cpu_count()} cores, Python {platform.python_version()}; load "
        f"average {load[0]:.1f} at the start of the last run and {load[1]:.1f} at its end "
        "(the cores are shared with other work: times are noisy).",
        "",
        "\"Done\" is the time from opening the page's URL in a new Streamlit session until "
        "its script run is over (no running state, no spinner), at most the run's timeout "
        "per page. One run opens a case's pages in the order below on a freshly started "
        "server, so the Plan page includes the search and later pages reuse the cached plan; "
        "a page taken alone (`--pages`) includes its own searches.",
    ]
    for case in dict.fromkeys(s.case for s in shots):
        what, query = CASES[case]
        lines += [
            "",
            f"## {what} (`{query}`)",
            "",
            "| page | picture | what it shows | done | taken |",
            "|---|---|---|---|---|",
            *(shot_line(s, link_dir, titles) for s in shots if s.case == case),
        ]
    return "\n".join([*lines, ""])


def run(cases: list[str], pages: list[str], out: Path, timeout_s: float) -> list[Shot]:
    """Start a server, take every (case, page) screenshot into ``out``, stop the server.
    RECORDS and SCREENSHOTS.md (beside ``out``) are rewritten after every shot, merged with
    the shots of earlier runs that this one does not retake."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    md = out.parent / "SCREENSHOTS.md"
    records = load_records(out)
    load_start = os.getloadavg()[0]
    log = ROOT / "test-artifacts" / "screenshots.log"
    log.parent.mkdir(exist_ok=True)
    port = free_port()
    proc = start_server(port, log)
    shots: list[Shot] = []
    try:
        with sync_playwright() as p:
            browser = launch(p)
            for case in cases:
                base = f"http://127.0.0.1:{port}"
                for shot in shoot_case(browser, base, case, pages, out, timeout_s):
                    print(f"{shot.file}: {done_text(shot)}", flush=True)
                    shots.append(shot)
                    records[shot.file] = shot
                    ordered = save_records(out, records)
                    link_dir = os.path.relpath(out, md.parent)
                    md.write_text(markdown(ordered, link_dir, (load_start, os.getloadavg()[0])))
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
        help="folder of the PNGs and their records; SCREENSHOTS.md is written in its parent",
    )
    ap.add_argument("--timeout", type=float, default=PAGE_TIMEOUT_S, help="seconds per page")
    args = ap.parse_args(argv)
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    exit_on_sigterm()
    shots = run(args.cases, args.pages, args.out, args.timeout)
    print(f"wrote {len(shots)} screenshots into {args.out}; the list: SCREENSHOTS.md beside it")
    return 0 if all(s.done_s is not None and not s.errors for s in shots) else 1


if __name__ == "__main__":
    raise SystemExit(main())
