"""Validate the TAPS cost model on a real run: an emulated multi-node cluster and calibration.

The cluster is made of Linux network namespaces (one per node) joined by rate-shaped veth pairs
to a bridge; torch.distributed gloo ranks run inside those namespaces. Calibration fits the
alpha-beta ring formulas of the primer (alpha in seconds per step, beta in seconds per byte)
for the same-node and the cross-node level and writes a topology JSON the engine loads. Engine
plans then run there as PyTorch (loss and gradients checked against one process), and their
communication is timed against the engine's prediction (docs/VALIDATION.md).

Modules, one job each:

- :mod:`validation.names` -- names and addresses of the namespaces and veths.
- :mod:`validation.preflight` -- is this machine able to build the cluster (root, ip, tc, torch)?
- :mod:`validation.cluster` -- ``cluster up`` / ``cluster down`` / status.
- :mod:`validation.session` -- reuse the cluster that is up, or bring one up for one command.
- :mod:`validation.launcher` and :mod:`validation.worker` -- run a function as gloo ranks.
- :mod:`validation.rank_jobs` -- the functions the ranks run (timed, verified collectives).
- :mod:`validation.benchmark` -- launch the timed collectives and summarise them.
- :mod:`validation.formulas` -- ring alpha-beta formulas and a link-level prediction.
- :mod:`validation.fit` -- medians of repeats and the least-squares alpha/beta fit.
- :mod:`validation.calibrate` -- calibration run, topology JSON and raw measurements.
- :mod:`validation.measure` -- measured vs predicted collective times.
- :mod:`validation.engine_predict` -- the engine's own prediction where it applies.
- :mod:`validation.comm` -- collectives over rank lists (receive-first point-to-point rings or
  gloo's own), each phase recorded and optionally timed.
- :mod:`validation.layout` -- which global indices of every tensor each rank holds under a plan,
  and the reshard steps between ops (symbolic, no torch).
- :mod:`validation.executor` -- a taps_core plan as SPMD PyTorch with autograd.
- :mod:`validation.reference` -- seeded weights and an independent single-process model.
- :mod:`validation.plans` -- engine plans executed on the cluster and checked.
- :mod:`validation.plan_timing` -- measured vs predicted communication of whole plans.
- :mod:`validation.report` -- the whole validation run and docs/VALIDATION.md.
- :mod:`validation.cli` -- ``python -m validation ...``.
"""

from __future__ import annotations
