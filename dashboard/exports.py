"""A plan exported to Megatron-LM, DeepSpeed and PyTorch DTensor (:mod:`taps_core.export`), as
the files a page offers for download, or the one-line reason a framework cannot run the plan.

Pure (no Streamlit). The plan JSON carries its workload (batch, sequence, dtype), which is
passed on to the exporter; an uploaded model config is handed over as a temporary file.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taps_core.errors import TapsError
from taps_core.export import FRAMEWORK, NotExpressibleError, export_plan

# format -> (file name part, extension, MIME type); names like gpt2_dgx-a100-2_train_dtensor-plan.py
FILES = {
    "megatron": ("megatron-args", "txt", "text/plain"),
    "deepspeed": ("deepspeed-config", "json", "application/json"),
    "dtensor": ("dtensor-plan", "py", "text/x-python"),
}
WHAT = {"megatron": "arguments", "deepspeed": "config", "dtensor": "plan"}  # button words


@dataclass(frozen=True)
class ExportFile:
    """One format's export: the file's text, or why there is none (``reason``, one line)."""

    fmt: str
    framework: str
    part: str  # the file name's last part (``dtensor-plan``), after model, cluster and mode
    ext: str
    mime: str
    text: str | None
    notes: tuple[str, ...] = ()
    reason: str | None = None


def _workload(plan_json: dict[str, Any]) -> dict[str, Any]:
    """batch / seq / dtype of the plan JSON's workload, as :func:`export_plan` takes them."""
    wl = plan_json.get("workload") or {}
    out: dict[str, Any] = {}
    if isinstance(wl.get("batch_size"), int):
        out["batch"] = wl["batch_size"]
    if isinstance(wl.get("seq_length"), int):
        out["seq"] = wl["seq_length"]
    if isinstance(wl.get("dtype"), str):
        out["dtype"] = wl["dtype"]
    return out


def workload_note(plan_json: dict[str, Any]) -> str:
    """The workload the exports assume, in words."""
    wl = plan_json.get("workload") or {}
    seq = f", sequence {wl['seq_length']}" if wl.get("seq_length") else ""
    return f"workload: batch {wl.get('batch_size')}{seq}, {wl.get('dtype')} (this view's settings)"


def plan_exports(
    plan_json: dict[str, Any], *, model_text: str | None = None
) -> tuple[ExportFile, ...]:
    """Every format's :class:`ExportFile` for one plan JSON (``plan_to_json``'s dict).

    ``model_text`` is the uploaded config.json the plan was made from (None for a sample).
    A plan a framework cannot run gets ``reason`` = ``not expressible in <framework>: ...``;
    input the exporter refuses gets ``could not export: ...``.
    """
    kwargs = _workload(plan_json)
    with tempfile.TemporaryDirectory(prefix="taps-export-") as tmp:
        if model_text is not None:
            path = Path(tmp) / "config.json"
            path.write_text(model_text, encoding="utf-8")
            kwargs["model"] = str(path)
        out = []
        for fmt, (part, ext, mime) in FILES.items():
            framework = FRAMEWORK[fmt]
            try:
                result = export_plan(plan_json, fmt, **kwargs)
            except NotExpressibleError as err:
                out.append(
                    ExportFile(
                        fmt,
                        framework,
                        part,
                        ext,
                        mime,
                        None,
                        reason=f"not expressible in {framework}: {err}",
                    )
                )
                continue
            except (TapsError, ValueError, KeyError, TypeError) as err:
                first = (str(err).splitlines() or [""])[0]
                out.append(
                    ExportFile(
                        fmt,
                        framework,
                        part,
                        ext,
                        mime,
                        None,
                        reason=f"could not export to {framework}: {first}",
                    )
                )
                continue
            text = result.python if fmt == "dtensor" and result.python else result.text
            if fmt == "dtensor" and not result.python:
                ext, mime = "json", "application/json"
            # the exporter's own workload note predates the JSON's workload field
            notes = [workload_note(plan_json)]
            notes += [n for n in result.notes if not n.startswith("workload:")]
            out.append(
                ExportFile(fmt, framework, part, ext, mime, text.rstrip() + "\n", tuple(notes))
            )
    return tuple(out)


def summary_lines(files: tuple[ExportFile, ...], names: dict[str, str]) -> list[str]:
    """One line per format for a README: the file written, or why there is none."""
    return [
        f"{f.framework}: {names[f.fmt]}" if f.text is not None else f"{f.framework}: {f.reason}"
        for f in files
    ]
