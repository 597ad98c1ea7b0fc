"""``python -m benchmarks.screenshots`` end to end on one small page (gpt2, How it works).

Starts its own server and headless chromium (about 10 s); the large cases are not run here.
Skips (with the reason) when playwright or chromium is missing, as tests/test_browser.py does.
"""

from __future__ import annotations

import os
import struct

import pytest

from benchmarks.dashboard_speed import CHROMIUM
from benchmarks.screenshots import WIDTH_PX, main

pytestmark = pytest.mark.browser

pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(
        f"chromium not found at {CHROMIUM} (apt-get install chromium)", allow_module_level=True
    )


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_one_page_screenshot_is_a_plausible_png(tmp_path):
    out = tmp_path / "screenshots"
    assert main(["--cases", "gpt2", "--pages", "how-it-works", "--out", str(out)]) == 0
    data = (out / "gpt2-how-it-works.png").read_bytes()
    width, height = png_size(data)
    assert WIDTH_PX / 2 <= width <= WIDTH_PX and 800 <= height <= 8000, (width, height)
    assert 20_000 < len(data) < 5_000_000, len(data)
    md = (tmp_path / "SCREENSHOTS.md").read_text()
    assert "(screenshots/gpt2-how-it-works.png)" in md and "How it works" in md
    assert (out / "shots.json").is_file()
