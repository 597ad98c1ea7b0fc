"""End to end in a real browser: ``streamlit run app.py`` plus headless Debian chromium.

Opens every page, changes the topology from the sidebar, checks that plotly charts render and
no exception or error box shows, and saves screenshots into ``test-artifacts/``. Skips (with
the reason) when playwright or chromium is missing; CI installs both.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("TAPS_CHROMIUM", "/usr/lib/chromium/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
QUERY = "?model=gpt2&topo=dgx-a100:2&batch=8&seq=256"
PAGES = {  # url path -> page title
    "": "TAPS Planner",
    "topology": "Topology",
    "links": "Link traffic",
    "compare": "Compare plans",
    "sweep": "Inter-node bandwidth sweep",
    "how-it-works": "How it works: bytes are not time",
}
RUN_TIMEOUT_MS = 120_000

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(
        f"chromium not found at {CHROMIUM} (apt-get install chromium)", allow_module_level=True
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(request) -> str:
    """A Streamlit server on a free loopback port; killed (by its PID) when the module ends."""
    port = _free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "streamlit.log", "w")  # noqa: SIM115 - closed in the finalizer
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()

    request.addfinalizer(stop)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"streamlit exited with {proc.returncode}; see {ARTIFACTS}/streamlit.log")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return url
        except OSError:
            time.sleep(0.3)
    pytest.fail("streamlit did not answer /_stcore/health within 60 s")


@pytest.fixture(scope="module")
def tab(server):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        # a tall viewport: Streamlit scrolls inside its own container, so full-page
        # screenshots would stop at the fold
        page = browser.new_page(viewport={"width": 1400, "height": 2400})
        yield page
        browser.close()


def settle(tab) -> None:
    """Wait until the script run is over and the charts are drawn."""
    tab.wait_for_selector('[data-testid="stAppViewContainer"]', timeout=RUN_TIMEOUT_MS)
    tab.wait_for_timeout(500)
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        running = tab.locator('[data-testid="stStatusWidget"]').count()
        spinner = tab.locator('[data-testid="stSpinner"]').count()
        if not running and not spinner:
            break
        tab.wait_for_timeout(300)
    tab.wait_for_selector(".js-plotly-plot .main-svg", timeout=RUN_TIMEOUT_MS)
    tab.wait_for_timeout(800)  # plotly finishes laying out text


def check_clean(tab, name: str) -> None:
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    assert tab.locator('[data-testid="stException"]').count() == 0, f"{name}: exception shown"
    errors = tab.locator('[data-testid="stAlertContentError"]')
    assert errors.count() == 0, f"{name}: error shown: {errors.all_inner_texts()}"
    assert tab.locator(".js-plotly-plot").count() >= 1, f"{name}: no chart"


def test_every_page_renders(server, tab):
    for path, title in PAGES.items():
        tab.goto(f"{server}/{path}{QUERY}")
        settle(tab)
        name = path or "plan"
        assert tab.locator("h1").first.inner_text().strip() == title, name
        check_clean(tab, name)
        chart_titles = tab.locator(".js-plotly-plot .gtitle").all_text_contents()
        assert all(t.strip() for t in chart_titles), f"{name}: an untitled chart"


def test_changing_the_topology_replans_everywhere(server, tab):
    tab.goto(f"{server}/topology{QUERY}")
    settle(tab)
    nodes = tab.locator('[data-testid="stSidebar"] input[aria-label="Nodes"]')
    nodes.fill("4")
    nodes.press("Enter")
    tab.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
        ".some(e => e.textContent.includes('dgx-a100:4'))",
        timeout=RUN_TIMEOUT_MS,
    )
    settle(tab)
    check_clean(tab, "topology-4-nodes")
    assert re.search(r"topo=dgx-a100(%3A|:)4", tab.url), tab.url
    # the session keeps the new cluster when moving to another page through the navigation
    tab.locator('[data-testid="stSidebarNav"] a', has_text="Plan").first.click()
    tab.wait_for_function(
        "() => document.body.innerText.includes('dgx-a100:4')", timeout=RUN_TIMEOUT_MS
    )
    settle(tab)
    check_clean(tab, "plan-4-nodes")
    assert "dgx-a100:4" in tab.locator('[data-testid="stMain"]').inner_text()


def test_downloads_report_png_and_svg(server, tab):
    tab.goto(f"{server}/{QUERY}")
    settle(tab)
    with tab.expect_download(timeout=RUN_TIMEOUT_MS) as dl:
        tab.get_by_role("button", name="HTML report (self-contained)").click()
    report = ARTIFACTS / "report.html"
    dl.value.save_as(report)
    text = report.read_text()
    assert text.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in text
    assert not re.search(r"<script[^>]+src=", text), "the report must not load scripts"
    chart = tab.locator(".js-plotly-plot").first
    for fmt in ("png", "svg"):
        if fmt == "svg":
            tab.locator('[data-testid="stSidebar"] label', has_text="SVG").click()
            settle(tab)
            chart = tab.locator(".js-plotly-plot").first
        chart.hover()
        with tab.expect_download(timeout=RUN_TIMEOUT_MS) as dl:
            chart.locator('.modebar-btn[data-title^="Download plot"]').click(force=True)
        assert dl.value.suggested_filename == f"taps-memory.{fmt}"
        path = ARTIFACTS / dl.value.suggested_filename
        dl.value.save_as(path)
        head = path.read_bytes()[:200]
        assert head.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in head
