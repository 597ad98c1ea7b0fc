"""Streamlit dashboard helpers: state and URL sharing, cached engine calls, charts, views.

Pages in ``app_pages/`` stay thin: they read the shared :class:`~dashboard.state.Context`, call
:mod:`dashboard.cache` (which calls ``taps_core``) and draw with :mod:`dashboard.charts`,
:mod:`dashboard.graph_view` and :mod:`dashboard.topology_view`. ``taps_core`` never imports
anything from here.
"""
