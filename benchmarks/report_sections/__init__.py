"""The sections of docs/RESULTS.md, one module each; :mod:`benchmarks.report` assembles them.

- :mod:`.inputs`: :class:`RunResults`, everything one report is rendered from;
- :mod:`.markdown`: number formatting (seconds, percentages) and Markdown tables and figures;
- :mod:`.summary`: the bullet list at the top;
- :mod:`.quality`: section 1, TAPS vs the baselines, and where the gain comes from;
- :mod:`.speed`: section 2, the DP vs the ILP reference;
- :mod:`.sweep`: section 3, TAPS's plan as the NIC bandwidth changes;
- :mod:`.pipeline`: pipeline stages vs plans without stages;
- :mod:`.dashboard_speed`: the real-browser table quoted from docs/DASHBOARD_SPEED.md;
- :mod:`.notes`: limits and notes, and the machine table.
"""
