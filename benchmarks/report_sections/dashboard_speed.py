"""The dashboard's real-browser timings, quoted from the file their own command writes.

``python -m benchmarks.dashboard_speed`` is a separate command (it starts a server and
chromium); this section only quotes its docs/DASHBOARD_SPEED.md with a link.
"""

from __future__ import annotations

from pathlib import Path


def dashboard_speed_section(path: Path) -> list[str]:
    """The table ``python -m benchmarks.dashboard_speed`` measured, quoted; none if never run."""
    if not path.is_file():
        return []
    text = path.read_text().splitlines()
    table_lines = [line for line in text if line.startswith("|")]
    setup = next((line for line in text if line.startswith("Measured by")), "")
    return [
        "## Dashboard speed in a real browser",
        "",
        "From [DASHBOARD_SPEED.md](DASHBOARD_SPEED.md). " + setup,
        "",
        *table_lines,
        "",
    ]
