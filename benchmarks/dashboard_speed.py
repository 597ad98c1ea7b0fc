"""Dashboard speed in a real browser: ``python -m benchmarks.dashboard_speed`` (about a minute).

Starts ``streamlit run app.py`` on a free loopback port, drives headless Debian chromium with
Playwright and measures what a user waits for:

- **first chart**: a fresh browser session opens the landing page until the first plotly chart
  is drawn, on a server that has just started (cold: imports and the first search included)
  and again in a new browser session on the now warm server;
- **cached rerun**: a sidebar change whose plan is already cached (nodes 2 -> 4 -> 2), until
  the page shows the new cluster with its charts;
- **page switch**: moving to an already visited page through the navigation.

Writes docs/DASHBOARD_SPEED.md (``--out``) and prints the table. Targets: first chart < 5 s,
cached rerun and page switch < 1 s.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("TAPS_CHROMIUM", "/usr/lib/chromium/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run"]
QUERY = "?model=gpt2&topo=dgx-a100:2"
FIRST_TARGET_S, RERUN_TARGET_S = 5.0, 1.0
LOAD = os.getloadavg()
CHART = ".js-plotly-plot .main-svg"


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
    """Until the script run is over (no 'running' widget twice in a row) and a chart is drawn."""
    page.wait_for_selector(CHART, timeout=timeout_s * 1000)
    quiet = 0
    deadline = time.monotonic() + timeout_s
    while quiet < 2 and time.monotonic() < deadline:
        running = page.locator('[data-testid="stStatusWidget"]').count()
        quiet = 0 if running else quiet + 1
        page.wait_for_timeout(25)


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


def measure(base: str, rounds: int) -> dict[str, list[float]]:
    from playwright.sync_api import sync_playwright

    out: dict[str, list[float]] = {"first_cold": [], "first_warm": [], "rerun": [], "switch": []}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
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


def report(res: dict[str, list[float]]) -> str:
    def row(name: str, key: str, target: float) -> str:
        v = res[key]
        worst = max(v)
        verdict = "OK" if worst < target else "OVER"
        return (
            f"| {name} | {statistics.median(v):.2f} | {worst:.2f} | {len(v)} | < {target:g} s "
            f"| {verdict} |"
        )

    return "\n".join(
        [
            "# Dashboard speed (real browser)",
            "",
            "Measured by `python -m benchmarks.dashboard_speed`: `streamlit run app.py` plus "
            "headless Debian chromium driven by Playwright, gpt2 training on dgx-a100:2 "
            f"(`{QUERY}`). Machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{time.strftime('%Y-%m-%d')}; load average {LOAD[0]:.1f} at the start and "
            f"{os.getloadavg()[0]:.1f} at the end (other processes share the cores).",
            "",
            "| what the user waits for | median (s) | worst (s) | runs | target | |",
            "|---|---|---|---|---|---|",
            row("first chart, server just started (cold caches)", "first_cold", FIRST_TARGET_S),
            row("first chart, new browser session", "first_warm", FIRST_TARGET_S),
            row("cached rerun (sidebar: nodes 2 → 4 → 2)", "rerun", RERUN_TARGET_S),
            row("page switch (Plan ↔ Links, visited before)", "switch", RERUN_TARGET_S),
            "",
            "Times run from the user's action until the page shows the new state with its "
            "charts drawn (the script run may still be finishing the sections below).",
            "",
            "The cold row includes the server's first imports (~1.3 s of Python: Streamlit, "
            "plotly, the engine) and the first search; in the browser, parsing Streamlit's "
            "plotly chunk (4.7 MB of JavaScript) dominates the rest. Figures are sent with a "
            "small template (2-25 KB of JSON each). On this shared 2-core machine the cold "
            "figure varied between 4.3 and 5.5 s across runs with the load.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "docs" / "DASHBOARD_SPEED.md"))
    args = ap.parse_args(argv)
    if not os.access(CHROMIUM, os.X_OK):
        raise SystemExit(f"chromium not found at {CHROMIUM} (apt-get install chromium)")
    global LOAD
    LOAD = os.getloadavg()
    port = free_port()
    log = ROOT / "test-artifacts" / "dashboard_speed.log"
    log.parent.mkdir(exist_ok=True)
    proc = start_server(port, log)
    try:
        res = measure(f"http://127.0.0.1:{port}", args.rounds)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    text = report(res)
    Path(args.out).write_text(text)
    print(text)
    ok = (
        max(res["first_cold"] + res["first_warm"]) < FIRST_TARGET_S
        and max(res["rerun"] + res["switch"]) < RERUN_TARGET_S
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
