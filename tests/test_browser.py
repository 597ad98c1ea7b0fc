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
import zipfile
from pathlib import Path

import pytest

from benchmarks.dashboard_speed import stop_server

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
PACK_TIMEOUT_MS = 120_000

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
        stop_server(proc)
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
    tab.wait_for_timeout(300)
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    quiet = 0
    while time.monotonic() < deadline and quiet < 3:
        running = tab.locator('[data-testid="stStatusWidget"]').count()
        spinner = tab.locator('[data-testid="stSpinner"]').count()
        quiet = 0 if running or spinner else quiet + 1
        tab.wait_for_timeout(150)
    tab.wait_for_selector(".js-plotly-plot .main-svg", timeout=RUN_TIMEOUT_MS)
    tab.wait_for_timeout(500)  # plotly finishes laying out text


def main_text(tab) -> str:
    return tab.locator('[data-testid="stMain"]').inner_text()


def wait_text(tab, text: str) -> None:
    tab.wait_for_function(
        "t => document.querySelector('[data-testid=\"stMain\"]')?.innerText.includes(t)",
        arg=text,
        timeout=RUN_TIMEOUT_MS,
    )


def check_clean(tab, name: str) -> None:
    shoot(tab, name)
    assert tab.locator('[data-testid="stException"]').count() == 0, f"{name}: exception shown"
    errors = tab.locator('[data-testid="stAlertContentError"]')
    assert errors.count() == 0, f"{name}: error shown: {errors.all_inner_texts()}"
    assert tab.locator(".js-plotly-plot").count() >= 1, f"{name}: no chart"


def shoot(tab, name: str) -> None:
    """Screenshot of the whole main area (Streamlit scrolls inside its own container)."""
    main = tab.locator('[data-testid="stMain"]')
    main.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def chart_titles(tab) -> list[str]:
    return [t.strip() for t in tab.locator(".js-plotly-plot .gtitle").all_text_contents()]


def test_every_page_renders_with_titles_naming_model_and_cluster(server, tab):
    for path, title in PAGES.items():
        tab.goto(f"{server}/{path}{QUERY}")
        settle(tab)
        if path == "sweep":
            wait_text(tab, "TAPS plan regimes")  # the sweep has finished filling in
            settle(tab)
        name = path or "plan"
        assert tab.locator("h1").first.inner_text().strip() == title, name
        check_clean(tab, name)
        titles = chart_titles(tab)
        assert titles, name
        for t in titles:  # the subtitle line names model, cluster, mode and batch
            assert "gpt2" in t and "dgx-a100:2" in t and "training" in t and "batch 8" in t, t


def test_sweep_shows_step_time_without_a_click(server, tab):
    tab.goto(f"{server}/sweep?model=gpt2&topo=dgx-a100:2&points=4")
    tab.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
        ".some(e => e.textContent.includes('Step time vs inter-node bandwidth'))",
        timeout=RUN_TIMEOUT_MS,
    )
    assert tab.get_by_role("button", name="Run the sweep").count() == 0
    wait_text(tab, "Because")  # the first plan change, located and explained in words
    wait_text(tab, "TAPS plan regimes")
    settle(tab)
    text = main_text(tab)
    assert "GB/s per host" in text and "Because" in text
    legend = " ".join(tab.locator(".js-plotly-plot .legendtext").all_text_contents())
    assert "TAPS" in legend and "Megatron" in legend
    shoot(tab, "sweep-explained")


def _point_xy(tab, kind: str, *names: str) -> tuple[float, float]:
    """Screen position of the drawing's point whose customdata is ``[kind, *names]``."""
    xy = tab.evaluate(
        """([kind, names]) => {
          for (const gd of document.querySelectorAll('.js-plotly-plot')) {
            for (const tr of gd._fullData || []) {
              if (!tr.customdata) continue;
              for (let i = 0; i < tr.customdata.length; i++) {
                const cd = tr.customdata[i];
                if (cd[0] === kind && names.every((n, j) => cd[j + 1] === n)) {
                  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
                  const r = gd.getBoundingClientRect();
                  return [r.left + xa._offset + xa.l2p(tr.x[i]),
                          r.top + ya._offset + ya.l2p(tr.y[i])];
                }
              }
            }
          }
          return null;
        }""",
        [kind, list(names)],
    )
    assert xy, f"no point {kind} {names} on the drawing"
    return xy[0], xy[1]


def _plan_words(tab, server: str, query: str) -> str:
    tab.goto(f"{server}/{query}")
    settle(tab)
    return tab.locator("p", has_text="Plan:").first.inner_text()


def test_selecting_a_link_on_the_drawing_and_changing_its_bandwidth_replans(server, tab):
    query = "?model=gpt2&topo=dgx-a100:2"  # batch 32: the hosts split the batch
    before = _plan_words(tab, server, query)
    tab.goto(f"{server}/topology{query}")
    settle(tab)
    x, y = _point_xy(tab, "link", "n0.nic0", "net")
    tab.mouse.click(x, y)
    wait_text(tab, "Link n0.nic0 – net")
    field = tab.get_by_label("New bandwidth (GB/s each way)")
    field.fill("0.05")
    field.press("Enter")
    tab.get_by_role("button", name="Apply").click()
    wait_text(tab, "n0.nic0~net 0.05 GB/s")
    settle(tab)
    assert re.search(r"edits=n0\.nic0(~|%7E)net", tab.url), tab.url
    shoot(tab, "topology-edited")
    legend = " ".join(tab.locator(".js-plotly-plot .legendtext").all_text_contents())
    assert "edited link" in legend
    tab.locator('[data-testid="stSidebarNav"] a', has_text="Plan").first.click()
    wait_text(tab, "Why this plan")
    settle(tab)
    after = tab.locator("p", has_text="Plan:").first.inner_text()
    assert after != before, "a 0.05 GB/s NIC changes the plan"
    assert "Against the unedited dgx-a100:2" in main_text(tab)


def test_lower_the_network_the_plan_changes_here_is_why(server, tab):
    """The teacher's three clicks from the landing page: the network slider, then the sweep."""
    tab.goto(f"{server}/?model=gpt2&topo=dgx-a100:2")
    settle(tab)
    before = tab.locator("p", has_text="Plan:").first.inner_text()
    slider = tab.locator('[data-testid="stSidebar"] [data-testid="stSlider"] input').first
    slider.focus()  # click 1: the network slider, all the way down
    slider.press("Home")
    wait_text(tab, "Against the unedited dgx-a100:2")
    settle(tab)
    text = main_text(tab)
    assert tab.locator("p", has_text="Plan:").first.inner_text() != before
    assert "repeats the same work" in text and "Why this plan" in text
    assert re.search(r"net=0\.5", tab.url), tab.url
    shoot(tab, "plan-slow-network")
    # click 2: the sweep shows where the change happens, without another click
    tab.locator('[data-testid="stSidebarNav"] a', has_text="Bandwidth sweep").first.click()
    wait_text(tab, "Because")
    settle(tab)
    shoot(tab, "sweep-slow-network")


def _why_text(text: str) -> str:
    """The 'Why this plan' box's words in the main area's text (it stands above the figures)."""
    start = text.find("Why this plan")
    return text[start:text.find("Step time", start)] if start >= 0 else ""


def test_stale_reasons_never_show_beside_new_figures(server, tab):
    """While a changed cluster is replanned, the previous plan's 'Why this plan' never stands
    beside the new plan's line: it is replaced by 'pricing...' until the new reasons are in."""
    tab.goto(f"{server}/?model=gpt2&topo=dgx-a100:2")
    settle(tab)
    # the box is filled last, after the charts: a decision priced against what it beats
    tab.wait_for_function(
        """() => {
            const t = document.querySelector('[data-testid="stMain"]')?.innerText || '';
            const at = t.indexOf('Why this plan');
            const saves = at < 0 ? -1 : t.indexOf(' saves ', at);
            return saves >= 0 && saves < t.indexOf('Step time', at);
        }""",
        timeout=RUN_TIMEOUT_MS,
    )
    before_plan = tab.locator("p", has_text="Plan:").first.inner_text()
    before_why = _why_text(main_text(tab))
    assert " saves " in before_why and "per step" in before_why
    slider = tab.locator('[data-testid="stSidebar"] [data-testid="stSlider"] input').first
    slider.focus()
    slider.press("Home")
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    seen_new = 0
    while time.monotonic() < deadline and seen_new < 20:
        text = main_text(tab)
        plan_line = next((ln for ln in text.splitlines() if ln.startswith("Plan:")), "")
        if plan_line and plan_line != before_plan:
            seen_new += 1
            assert _why_text(text) != before_why, "the old reasons beside the new plan"
        tab.wait_for_timeout(50)
    assert seen_new, "the plan never changed"


def test_review_pack_and_chart_exports(server, tab):
    tab.goto(f"{server}/{QUERY}")
    settle(tab)
    # the pack renders every chart twice in a fresh chromium (retried under load): allow time
    with tab.expect_download(timeout=2 * PACK_TIMEOUT_MS) as dl:
        tab.get_by_role("button", name="Review pack (zip)").click()
    assert dl.value.suggested_filename == "gpt2_dgx-a100-2_train_review-pack.zip"
    pack = ARTIFACTS / dl.value.suggested_filename
    dl.value.save_as(pack)
    names = set(zipfile.ZipFile(pack).namelist())
    readme = zipfile.ZipFile(pack).read("README.txt").decode()
    assert "Exports:" in readme and "Search: " in readme
    for part in ("memory", "graph", "topology"):
        want = {f"gpt2_dgx-a100-2_train_{part}.svg", f"gpt2_dgx-a100-2_train_{part}.png"}
        assert want <= names, readme  # the README says why images are missing
    assert {"gpt2_dgx-a100-2_train_report.html", "gpt2_dgx-a100-2_train_plan.json"} <= names
    url = zipfile.ZipFile(pack).read("URL.txt").decode()
    assert "model=gpt2" in url and "topo=dgx-a100" in url
    report = zipfile.ZipFile(pack).read("gpt2_dgx-a100-2_train_report.html").decode()
    assert report.startswith("<!DOCTYPE html>") and "Plotly.newPlot" in report
    assert not re.search(r"<script[^>]+src=", report), "the report must not load scripts"
    chart = tab.locator(".js-plotly-plot").first
    for fmt in ("png", "svg"):
        if fmt == "svg":
            tab.locator('[data-testid="stSidebar"] label', has_text="SVG").click()
            settle(tab)
            chart = tab.locator(".js-plotly-plot").first
        chart.hover()
        with tab.expect_download(timeout=RUN_TIMEOUT_MS) as dl:
            chart.locator('.modebar-btn[data-title^="Download plot"]').click(force=True)
        assert dl.value.suggested_filename == f"gpt2_dgx-a100-2_train_memory.{fmt}"
        path = ARTIFACTS / dl.value.suggested_filename
        dl.value.save_as(path)
        head = path.read_bytes()[:200]
        assert head.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in head


def test_pipeline_schedule_screenshot(server, tab):
    """gpt2 on 4 DGX hosts is pipelined: the 1F1B timeline renders, titled, as a screenshot."""
    tab.goto(f"{server}/?model=gpt2&topo=dgx-a100:4")
    tab.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
        ".some(e => e.textContent.includes('1F1B pipeline schedule'))",
        timeout=RUN_TIMEOUT_MS,
    )
    settle(tab)
    gantt = tab.locator(".js-plotly-plot", has_text="1F1B pipeline schedule").first
    title = gantt.locator(".gtitle").text_content() or ""
    assert re.search(r"\d+ stages × \d+ micro-batches of \d+ · bubble \d+%", title), title
    assert "gpt2 · dgx-a100:4 · training · batch 32" in title
    assert gantt.locator(".ytick").count() >= 2  # one row per stage
    gantt.scroll_into_view_if_needed()
    gantt.screenshot(path=str(ARTIFACTS / "pipeline-gantt.png"))
    check_clean(tab, "plan-pipelined")
