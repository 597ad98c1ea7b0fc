"""Dashboard speed in a real browser: ``python -m benchmarks.dashboard_speed`` (minutes).

Starts ``streamlit run app.py`` on a free loopback port, drives headless Debian chromium with
Playwright and measures what a user waits for:

- **first chart**: a fresh browser session opens the landing page until the first plotly chart
  is drawn, on a server that has just started (cold: imports and the first search included)
  and again in a new browser session on the now warm server;
- **cached rerun**: a sidebar change whose plan is already cached (nodes 2 -> 4 -> 2), until
  the page shows the new cluster with its charts;
- **page switch**: moving to an already visited page through the navigation;
- **at scale** (skipped with ``--no-scale``, which takes about a minute): llama3-70b on
  dgx-a100:16 and gpt3-175b on dgx-a100:128, training at batch 1536, opened in a new browser
  session (first chart, whole page done) and reloaded warm; a 12-point bandwidth sweep of the
  llama case. Each wait gives up after PAGE_TIMEOUT_S and the row says "> 600".

Writes docs/DASHBOARD_SPEED.md (``--out``) and prints the table. Targets: first chart < 5 s,
cached rerun, page switch and warm reload < 1 s, whole page and 12-point sweep < 15 s.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("TAPS_CHROMIUM", "/usr/lib/chromium/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"]
QUERY = "?model=gpt2&topo=dgx-a100:2"
FIRST_TARGET_S, RERUN_TARGET_S = 5.0, 1.0
DONE_TARGET_S, SWEEP_TARGET_S = 15.0, 15.0  # whole page done; a 12-point sweep drawn
SCALE_CASES = {  # training at batch 1536, opened on the Plan page
    "llama3-70b · dgx-a100:16": "?model=llama3-70b&topo=dgx-a100:16&batch=1536",
    "gpt3-175b · dgx-a100:128": "?model=gpt3-175b&topo=dgx-a100:128&batch=1536",
}
SWEEP_QUERY = "sweep?model=llama3-70b&topo=dgx-a100:16&batch=1536&points=12"
LOAD = os.getloadavg()
CHART = ".js-plotly-plot .main-svg"
PAGE_TIMEOUT_S = 600.0  # a page that takes longer is reported as "> 600 s", not waited for
QUIET_S, POLL_MS = 0.3, 50  # the run counts as over after QUIET_S without running or spinner
CHART_GRACE_S = 3.0  # after the run, how long a page without a drawn chart is waited for
# Streamlit 1.67 marks the run on the app root (stStatusWidget is not drawn in this setup)
# the plan's own figures: its headline metrics (a preview shown while TAPS searches has none)
PROBE_JS = """() => [
  document.querySelector('[data-testid="stApp"]')?.getAttribute('data-test-script-state') ?? null,
  !!document.querySelector('.js-plotly-plot .main-svg'),
  !!document.querySelector('[data-testid="stSpinner"]'),
  !!document.querySelector('[data-testid="stMetric"]')]"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, log: Path) -> subprocess.Popen:
    """``streamlit run app.py`` on ``port``; returns once /_stcore/health answers."""
    out = open(log, "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1",
         "--browser.gatherUsageStats", "false"],
        cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"streamlit exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("streamlit did not answer /_stcore/health within 60 s")


def idle(page, timeout_s: float = 120) -> None:
    """Until a chart is drawn and the script run is over (see :func:`watch`)."""
    page.wait_for_selector(CHART, timeout=timeout_s * 1000)
    watch(page, time.perf_counter(), timeout_s)


@dataclass(frozen=True)
class Timing:
    """Seconds from the user's action to the first chart drawn (a preview counts), to the
    plan's own figures with a chart, and to the page done (run over, no spinner); None where
    it did not happen within the timeout."""

    chart_s: float | None
    done_s: float | None
    plan_s: float | None = None


def page_state(page) -> tuple[str | None, bool, bool, bool]:
    """(Streamlit's script state, a chart drawn, a spinner shown, the plan's metrics shown)
    in one round trip."""
    state, chart, spinner, metrics = page.evaluate(PROBE_JS)
    return state, chart, spinner, metrics


def watch(page, start: float, timeout_s: float = PAGE_TIMEOUT_S) -> Timing:
    """Times, from ``start`` (perf_counter), of the first chart and of the page being done:
    ``data-test-script-state`` "notRunning" and no spinner for QUIET_S in a row (a rerun the
    script asks for in between starts the wait again), and its charts drawn (plotly draws
    after the run; a page without a chart is done CHART_GRACE_S after its run). Gives up
    after ``timeout_s``."""
    chart_s = plan_s = quiet_since = None
    deadline = start + timeout_s
    while (now := time.perf_counter()) < deadline:
        state, chart, spinner, metrics = page_state(page)
        if chart and chart_s is None:
            chart_s = now - start
        if chart and metrics and plan_s is None:
            plan_s = now - start
        if state == "notRunning" and not spinner:
            quiet_since = quiet_since or now
            quiet_s = now - quiet_since
            if quiet_s >= QUIET_S and (chart_s is not None or quiet_s >= CHART_GRACE_S):
                return Timing(chart_s, max(quiet_since - start, chart_s or 0.0), plan_s)
        else:
            quiet_since = None
        page.wait_for_timeout(POLL_MS)
    return Timing(chart_s, None, plan_s)


def open_timed(page, url: str, timeout_s: float = PAGE_TIMEOUT_S) -> Timing:
    """Open ``url`` in ``page`` and time its first chart and its end (see :func:`watch`)."""
    start = time.perf_counter()
    page.goto(url, timeout=timeout_s * 1000)
    return watch(page, start, timeout_s)


def first_chart(browser, url: str) -> float:
    """Seconds from opening ``url`` in a new browser session to the first chart drawn."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    start = time.perf_counter()
    page.goto(url)
    page.wait_for_selector(CHART, timeout=120_000)
    elapsed = time.perf_counter() - start
    idle(page)
    ctx.close()
    return elapsed


def timed_until(page, action, text: str) -> float:
    """Seconds from ``action()`` until the main area shows ``text`` and a chart, run over."""
    start = time.perf_counter()
    action()
    page.wait_for_function(
        "t => document.querySelector('[data-testid=\"stMain\"]')?.innerText.includes(t)",
        arg=text,
        timeout=120_000,
    )
    page.wait_for_selector(CHART, timeout=120_000)
    elapsed = time.perf_counter() - start
    idle(page)
    return elapsed


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so ``finally`` blocks still stop the server we started."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def launch(p):
    """Headless system chromium (Playwright cannot download its own browser here)."""
    return p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def stop_server(proc: subprocess.Popen) -> None:
    """Stop the server started by :func:`start_server`, by its PID (kill after 10 s)."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def measure(base: str, rounds: int) -> dict[str, list[float]]:
    """gpt2 on dgx-a100:2: first chart (cold, then warm server), cached reruns, page switches."""
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {"first_cold": [], "first_warm": [], "rerun": [], "switch": []}
    with sync_playwright() as p:
        browser = launch(p)
        out["first_cold"].append(first_chart(browser, f"{base}/{QUERY}"))
        for _ in range(rounds):
            out["first_warm"].append(first_chart(browser, f"{base}/{QUERY}"))
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        page.goto(f"{base}/{QUERY}")
        idle(page)
        nodes = page.locator('[data-testid="stSidebar"] input[aria-label="Nodes"]')

        def set_nodes(n: int):
            return lambda: (nodes.fill(str(n)), nodes.press("Enter"))

        timed_until(page, set_nodes(4), "dgx-a100:4")  # warms the 4-node plan
        timed_until(page, set_nodes(2), "dgx-a100:2")
        nav = page.locator('[data-testid="stSidebarNav"] a')
        timed_until(page, lambda: nav.filter(has_text="Links").first.click(), "Link traffic")
        timed_until(page, lambda: nav.filter(has_text="Plan").first.click(), "Why this plan")
        for _ in range(rounds):
            out["rerun"].append(timed_until(page, set_nodes(4), "dgx-a100:4"))
            out["rerun"].append(timed_until(page, set_nodes(2), "dgx-a100:2"))
            click = nav.filter(has_text="Links").first.click
            out["switch"].append(timed_until(page, click, "Link traffic"))
            click = nav.filter(has_text="Plan").first.click
            out["switch"].append(timed_until(page, click, "Why this plan"))
        ctx.close()
        browser.close()
    return out


def seconds(t: float | None) -> list[float]:
    """One measurement as a row's values: a timeout counts as infinitely slow."""
    return [math.inf if t is None else t]


def measure_scale(base: str, timeout_s: float = PAGE_TIMEOUT_S) -> dict[str, list[float]]:
    """The large cases, once each: a new browser session opens the Plan page (its search
    included), then reloads it (server and browser caches warm); then the 12-point sweep.
    A reload is not measured when the first opening did not finish (its search still runs)."""
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {}
    with sync_playwright() as p:
        browser = launch(p)
        for case, query in SCALE_CASES.items():
            ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = ctx.new_page()
            first = open_timed(page, f"{base}/{query}", timeout_s)
            out[f"{case}:chart"] = seconds(first.chart_s)
            out[f"{case}:plan"] = seconds(first.plan_s)
            out[f"{case}:done"] = seconds(first.done_s)
            out[f"{case}:reload"] = []
            if first.done_s is not None:
                start = time.perf_counter()
                page.reload(timeout=timeout_s * 1000)
                out[f"{case}:reload"] = seconds(watch(page, start, timeout_s).done_s)
            ctx.close()
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        sweep = open_timed(ctx.new_page(), f"{base}/{SWEEP_QUERY}", timeout_s)
        out["sweep:chart"], out["sweep:done"] = seconds(sweep.chart_s), seconds(sweep.done_s)
        ctx.close()
        browser.close()
    return out


def rows() -> list[tuple[str, str, float | None]]:
    """(result key, what the user waits for, target in seconds or None) of every table row."""
    out: list[tuple[str, str, float | None]] = [
        ("first_cold", "first chart, server just started (cold caches)", FIRST_TARGET_S),
        ("first_warm", "first chart, new browser session", FIRST_TARGET_S),
        ("rerun", "cached rerun (sidebar: nodes 2 → 4 → 2)", RERUN_TARGET_S),
        ("switch", "page switch (Plan ↔ Links, visited before)", RERUN_TARGET_S),
    ]
    for case in SCALE_CASES:
        out += [
            (f"{case}:chart", f"{case}: first chart, new browser session", FIRST_TARGET_S),
            (f"{case}:plan", f"{case}: TAPS's plan drawn (figures and a chart)", None),
            (f"{case}:done", f"{case}: whole page done", DONE_TARGET_S),
            (f"{case}:reload", f"{case}: warm reload (same URL), page done", RERUN_TARGET_S),
        ]
    sweep = "llama3-70b · dgx-a100:16 · 12-point bandwidth sweep"
    out += [
        ("sweep:chart", f"{sweep}: first partial chart", None),
        ("sweep:done", f"{sweep}: complete chart, page done", SWEEP_TARGET_S),
    ]
    return out


def fmt_s(v: float) -> str:
    """Seconds with two decimals; a timeout as "> 600"."""
    return f"> {PAGE_TIMEOUT_S:g}" if math.isinf(v) else f"{v:.2f}"


def table_row(name: str, values: list[float], target: float | None) -> str:
    """One Markdown row: median, worst, runs, target and OK / MISSED."""
    if not values:
        return f"| {name} | not measured (the page was not done) | | 0 | | |"
    worst = max(values)
    verdict = "" if target is None else "OK" if worst < target else "MISSED"
    goal = "" if target is None else f"< {target:g} s"
    return (
        f"| {name} | {fmt_s(statistics.median(values))} | {fmt_s(worst)} | {len(values)} "
        f"| {goal} | {verdict} |"
    )


def report(res: dict[str, list[float]]) -> str:
    """docs/DASHBOARD_SPEED.md: setup, the table (rows measured), notes."""
    return "\n".join(
        [
            "# Dashboard speed (real browser)",
            "",
            "Measured by `python -m benchmarks.dashboard_speed`: `streamlit run app.py` plus "
            "headless Debian chromium driven by Playwright, gpt2 training on dgx-a100:2 "
            f"(`{QUERY}`), then training at batch 1536 at scale "
            f"(`{'`, `'.join(SCALE_CASES.values())}`, `{SWEEP_QUERY}`). "
            f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d')}; load average {LOAD[0]:.1f} at the start "
            f"and {os.getloadavg()[0]:.1f} at the end (other processes share "
            "the cores: times are noisy).",
            "",
            "| what the user waits for | median (s) | worst (s) | runs | target | |",
            "|---|---|---|---|---|---|",
            *(table_row(name, res[key], target) for key, name, target in rows() if key in res),
            "",
            "Times run from the user's action until the page shows the new state with its "
            "charts drawn (the script run may still be finishing the sections below). "
            "\"Whole page done\" and \"page done\" run until Streamlit's script run is over "
            f"(no running state, no spinner); every wait gives up after {PAGE_TIMEOUT_S:g} s "
            "(\"> 600\"). The large cases run once each on a server whose plan cache is cold for "
            "them: the first opening includes the search; the sweep follows the Plan page of "
            "the same case. While a first search runs, the page shows a preview: the fastest "
            "Megatron-LM / DeepSpeed configuration (found exhaustively, the search's own "
            "starting point) with its memory chart, marked as such; \"first chart\" counts "
            "it, \"TAPS's plan drawn\" waits for the plan's own figures.",
            "",
            "The cold row includes the server's first imports (~1.3 s of Python: Streamlit, "
            "plotly, the engine) and the first search; in the browser, parsing Streamlit's "
            "plotly chunk (4.7 MB of JavaScript) dominates the rest. Figures are sent with a "
            "small template (2-25 KB of JSON each). On this shared 2-core machine the cold "
            "figure varied between 4.3 and 5.5 s across runs with the load.",
            "",
        ]
    )


def all_met(res: dict[str, list[float]]) -> bool:
    """True when every judged row measured was under its target."""
    return all(
        res[key] and max(res[key]) < target
        for key, _, target in rows()
        if target is not None and key in res
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "docs" / "DASHBOARD_SPEED.md"))
    ap.add_argument("--no-scale", action="store_true", help="only the gpt2 rows (a minute)")
    args = ap.parse_args(argv)
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    global LOAD
    LOAD = os.getloadavg()
    exit_on_sigterm()
    port = free_port()
    log = ROOT / "test-artifacts" / "dashboard_speed.log"
    log.parent.mkdir(exist_ok=True)
    proc = start_server(port, log)
    try:
        res = measure(f"http://127.0.0.1:{port}", args.rounds)
        if not args.no_scale:
            res |= measure_scale(f"http://127.0.0.1:{port}")
    finally:
        stop_server(proc)
    text = report(res)
    Path(args.out).write_text(text)
    print(text)
    return 0 if all_met(res) else 1


if __name__ == "__main__":
    raise SystemExit(main())
