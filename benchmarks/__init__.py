"""Benchmarks of TAPS Planner: plan quality, search speed and exactness, bandwidth sweep.

Run everything with ``python -m benchmarks`` (``--quick`` for a small slice). The run writes
``docs/RESULTS.md``, the figures it embeds (``docs/figures/``) and the raw numbers
(``docs/results.json``). One module per job:

- :mod:`benchmarks.config`: what to run (the full grid and the quick slice);
- :mod:`benchmarks.environment`: the machine and software the numbers come from;
- :mod:`benchmarks.plan_quality`: TAPS vs volume-based, Megatron-style and data-parallel plans;
- :mod:`benchmarks.search_speed`: DP vs the ILP reference, and the large-scale planning times;
- :mod:`benchmarks.bandwidth_sweep`: how TAPS's plan moves with the inter-node bandwidth;
- :mod:`benchmarks.figures`: plotly figures, written as PNG through kaleido;
- :mod:`benchmarks.report`: the Markdown report, assembled from one module per section in
  :mod:`benchmarks.report_sections`;
- :mod:`benchmarks.__main__`: the command line.

(``benchmarks/dashboard_rerun.py`` is a separate script for dashboard rerun times.)
"""
