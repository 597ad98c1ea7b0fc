"""The ``export`` command: a plan JSON in, a framework's artifact out (exit 3: not expressible)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from taps_core import strict_json
from taps_core.errors import InvalidInputError
from taps_core.export import export_plan
from taps_core.export.common import (
    EXIT_NOT_EXPRESSIBLE,
    FORMATS,
    FRAMEWORK,
    PLAN_FILE_LIMIT,
    NotExpressibleError,
)
from taps_core.models.config import DTYPE_BYTES


def add_export_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``export`` on the CLI's subparsers (errors follow the parser class's rule)."""
    q = subparsers.add_parser(
        "export",
        help="export a plan JSON to Megatron-LM arguments, a DeepSpeed config or a DTensor plan",
    )
    q.add_argument("plan_file", metavar="PLAN.json", help="plan --json (or compare --json)")
    q.add_argument("--format", required=True, choices=FORMATS)
    q.add_argument(
        "--out",
        metavar="PATH",
        help="write here (default stdout); for dtensor a "
        "PATH ending in .py gets the Python snippet, others the JSON",
    )
    q.add_argument("--plan", metavar="LABEL", help="which plan of a compare JSON (default taps)")
    q.add_argument(
        "--model",
        metavar="CONFIG",
        help="the model config the plan was made from (default: the sample named in the plan)",
    )
    q.add_argument("--batch", type=int, help="global batch size the plan used (samples)")
    q.add_argument("--seq", type=int, help="sequence length the plan used (tokens)")
    q.add_argument("--dtype", choices=sorted(DTYPE_BYTES))
    return q


def run_export(args: argparse.Namespace) -> int:
    """The ``export`` command: 0 exported, 3 not expressible (one line on stderr).

    Bad input raises InvalidInputError, which the CLI prints in one line with exit code 2.
    """
    if args.out is not None:
        strict_json.check_output_path(args.out, field="--out")
    data = strict_json.load_file(args.plan_file, field="PLAN.json", limit=PLAN_FILE_LIMIT)
    try:
        result = export_plan(
            data,
            args.format,
            label=args.plan,
            model=args.model,
            batch=args.batch,
            seq=args.seq,
            dtype=args.dtype,
        )
    except NotExpressibleError as err:
        print(f"not expressible in {FRAMEWORK[args.format]}: {err}", file=sys.stderr)
        return EXIT_NOT_EXPRESSIBLE
    text = result.text
    if args.out is not None and result.python is not None and args.out.endswith(".py"):
        text = result.python
    if args.out is None:
        print(text)
    else:
        try:
            Path(args.out).write_text(text + "\n")
        except OSError as err:
            raise InvalidInputError(
                "--out", args.out, f"a writable path ({err.strerror})"
            ) from None
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
