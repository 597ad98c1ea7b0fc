"""Plans exported to the frameworks that run them: Megatron-LM, DeepSpeed and PyTorch DTensor.

``python -m taps_core export PLAN.json --format megatron|deepspeed|dtensor [--out PATH]`` reads
a plan JSON (``plan --json``; or one plan of ``compare --json``, chosen with ``--plan LABEL``)
and writes what the framework takes: Megatron-LM command-line arguments, a DeepSpeed config, or
a DTensor ``parallelize_module`` plan (JSON, or a runnable Python snippet when PATH ends in
``.py``).

The rule: a plan is exported only when the framework can run *that* plan, the same splits on
the same GPUs. Otherwise :class:`NotExpressibleError` gives one line naming the first op (or lever)
the framework has no words for, and the CLI exits with code 3. What maps to what, with ``t``
the GPUs that share one batch slice (the tensor-parallel group) and ``dp`` the batch ways:

- batch ``b`` split ``dp`` ways in total -> data parallelism (one size for every op);
- heads ``n`` on Q/K/V/attention -> column-parallel, on the output projection (a contraction)
  -> row-parallel; FFN ``f`` on up/gate -> column, on down -> row; vocabulary ``v`` on the
  embedding -> vocab-parallel (row), on the LM head -> column, on the loss -> vocab-parallel
  cross entropy;
- sequence ``s`` on norms, residual adds and the position embedding -> sequence parallelism
  (a row-parallel op with ``"partial": true`` then reduce-scatters into it);
- ZeRO stage, recomputed layers and micro-batches from the plan's levers; ``pipeline`` stages
  (when the plan has them) -> pipeline parallelism.

The plan JSON names the model but not the workload: the batch, sequence length and dtype come
from the sample config (or ``--model CONFIG.json``) unless ``--batch``/``--seq``/``--dtype``
say otherwise, as they did for ``plan``; the model's parameter count and op names are checked
against the plan. Nothing here imports torch: the DTensor snippet imports it when run.
"""

from __future__ import annotations

from typing import Any

from taps_core.errors import InvalidInputError
from taps_core.export.common import (
    EXIT_NOT_EXPRESSIBLE,
    FORMATS,
    FRAMEWORK,
    Export,
    NotExpressibleError,
    int_or_none,
)
from taps_core.export.deepspeed import to_deepspeed
from taps_core.export.dtensor import dtensor_python, to_dtensor
from taps_core.export.grid import Grid, grid
from taps_core.export.megatron import to_megatron
from taps_core.export.plan_json import OpSplit, PlanView, read_plan, resolve_workload, select_plan

__all__ = [
    "EXIT_NOT_EXPRESSIBLE",
    "FORMATS",
    "FRAMEWORK",
    "Export",
    "Grid",
    "NotExpressibleError",
    "OpSplit",
    "PlanView",
    "dtensor_python",
    "export_plan",
    "grid",
    "read_plan",
    "to_deepspeed",
    "to_dtensor",
    "to_megatron",
]

# ---- entry points --------------------------------------------------------------------------------

_EXPORTERS = {"megatron": to_megatron, "deepspeed": to_deepspeed, "dtensor": to_dtensor}


def export_plan(
    data: Any,
    fmt: str,
    *,
    label: str | None = None,
    model: str | None = None,
    batch: int | None = None,
    seq: int | None = None,
    dtype: str | None = None,
) -> Export:
    """Export a plan JSON dict to ``fmt`` (one of :data:`FORMATS`).

    Raises InvalidInputError for bad input (the field and the fix in one line) and
    NotExpressibleError when the framework cannot run the plan as planned.
    """
    if fmt not in _EXPORTERS:
        raise InvalidInputError("--format", fmt, f"one of {', '.join(FORMATS)}")
    view = read_plan(data, label)
    recorded = select_plan(data, label)[0].get("workload")
    if isinstance(recorded, dict):  # the plan JSON records its workload: use it by default
        batch = batch if batch is not None else int_or_none(recorded.get("batch_size"))
        seq = seq if seq is not None else int_or_none(recorded.get("seq_length"))
        if dtype is None and isinstance(recorded.get("dtype"), str):
            dtype = recorded["dtype"]
    wl = resolve_workload(view, model=model, batch=batch, seq=seq, dtype=dtype)
    return _EXPORTERS[fmt](view, wl)


