"""Entry point of one gloo rank: ``python -m validation.worker RUN_DIR RANK``.

Reads ``RUN_DIR/spec.json`` (written by :mod:`validation.launcher`), joins the gloo process
group, calls the named function as ``fn(ctx, **kwargs)`` and writes its JSON-able return value
to ``RUN_DIR/result-RANK.json``. Any exception is written to ``RUN_DIR/error-RANK.txt`` and the
process exits 1.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RankContext:
    """Where a rank runs: global rank, world size, ranks per node, its node index."""

    rank: int
    world_size: int
    ranks_per_node: int

    @property
    def node(self) -> int:
        """Node index of this rank (rank // ranks_per_node)."""
        return self.rank // self.ranks_per_node


def resolve(spec: str) -> Callable[..., Any]:
    """The function named ``package.module:function``."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"function spec {spec!r} is not 'module:function'")
    return getattr(importlib.import_module(module), name)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def run(run_dir: Path, rank: int) -> None:
    """Join the group described by ``run_dir/spec.json`` as ``rank`` and run the function."""
    spec = json.loads((run_dir / "spec.json").read_text())
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{spec['master_addr']}:{spec['master_port']}",
        rank=rank,
        world_size=spec["world_size"],
        timeout=datetime.timedelta(seconds=spec["pg_timeout_s"]),
    )
    try:
        ctx = RankContext(rank, spec["world_size"], spec["ranks_per_node"])
        result = resolve(spec["fn"])(ctx, **spec["kwargs"])
        _write_atomic(run_dir / f"result-{rank}.json", json.dumps(result))
        # nobody leaves before everyone is done: an early exit would break peers still
        # connecting or communicating (a failed rank skips this and the launcher kills the rest)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """CLI wrapper around :func:`run`; returns the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    run_dir, rank = Path(args[0]), int(args[1])
    try:
        run(run_dir, rank)
    except BaseException:
        _write_atomic(run_dir / f"error-{rank}.txt", traceback.format_exc())
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
