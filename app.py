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

st.set_page_config(page_title="TAPS Planner", page_icon=":material/account_tree:", layout="wide")

PAGES = [  # (file, title, icon, url path); the first is the home page
    ("app_pages/plan.py", "Plan", "account_tree", "plan"),
    ("app_pages/topology.py", "Topology", "hub", "topology"),
    ("app_pages/links.py", "Links", "conversion_path", "links"),
    ("app_pages/compare.py", "Compare", "compare_arrows", "compare"),
    ("app_pages/sweep.py", "Bandwidth sweep", "show_chart", "sweep"),
    ("app_pages/how_it_works.py", "How it works", "school", "how-it-works"),
]

page = st.navigation(
    [st.Page(path, title=title, icon=f":material/{icon}:", url_path=url, default=i == 0)
     for i, (path, title, icon, url) in enumerate(PAGES)],
    position="sidebar")

warnings = state.init_session()
st.session_state["_ctx"] = sidebar()
for message in warnings:
    st.warning(f"URL: {message}")
page.run()
