"""TAPS Planner dashboard: the frame shared by every page (run ``streamlit run app.py``).

It seeds the session from the URL, draws the shared sidebar settings and hands the resulting
context to the page chosen in the navigation. Pages live in ``app_pages/``, not ``pages/``:
Streamlit treats a ``pages/`` folder beside the entrypoint as legacy multipage mode and may then
run a page file on its own, without this frame (no sidebar, no shared state).
"""

from __future__ import annotations

import streamlit as st

from dashboard import state
from dashboard.widgets import sidebar

st.set_page_config(page_title="TAPS Planner", page_icon="🧭", layout="wide")

PAGES = [  # file, title, icon, url path, the page's own URL parameters; first = home page
    ("app_pages/plan.py", "Plan", "account_tree", "plan", ("expand", "yours", "prove")),
    ("app_pages/topology.py", "Topology", "hub", "topology", ("overlay",)),
    ("app_pages/links.py", "Links", "conversion_path", "links", ("top",)),
    ("app_pages/compare.py", "Compare", "compare_arrows", "compare", ("baseline", "cmp_expand")),
    (
        "app_pages/sweep.py",
        "Bandwidth sweep",
        "show_chart",
        "sweep",
        ("bw_lo", "bw_hi", "points", "curves"),
    ),
    ("app_pages/how_it_works.py", "How it works", "school", "how-it-works", ("size",)),
]

page = st.navigation(
    [
        st.Page(path, title=title, icon=f":material/{icon}:", url_path=url, default=i == 0)
        for i, (path, title, icon, url, _) in enumerate(PAGES)
    ],
    position="sidebar",
)

warnings = state.init_session()
st.session_state["_ctx"] = sidebar()
# widget changes are in the session before the script runs, so the URL can be written now
# (and stays right when a page stops early on an error)
state.set_url(*next(params for _, title, _, _, params in PAGES if title == page.title))
for message in warnings:
    st.warning(f"URL: {message}")
page.run()
