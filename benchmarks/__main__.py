"""``python -m benchmarks [--quick]``: run the benchmarks, write docs/RESULTS.md and figures."""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from benchmarks import (
    bandwidth_sweep,
    environment,
    figures,
    iopddl_contest,
    pipelining,
    plan_quality,
    scaling,
    search_speed,
)
from benchmarks.config import FULL, QUICK
from benchmarks.report import RunResults, render
from benchmarks.results_block import kept_block, write_block

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("quality", "speed", "sweep", "pipeline")


@dataclass(frozen=True)
class _StderrLog:
    """Progress lines on stderr, stamped with seconds since ``start`` (picklable for --jobs)."""

    start: float
    wall_start: float

    def __call__(self, msg: str) -> None:
        print(f"[{time.time() - self.wall_start:7.1f} s] {msg}", file=sys.stderr, flush=True)


def _log_to_stderr(start: float) -> _StderrLog:
    return _StderrLog(start, time.time())


def _clean(value: object) -> object:
    """JSON-safe copy: non-finite floats become None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def make_figures(run: RunResults, writer: figures.FigureWriter) -> None:
    out = run.figures
    q, sp, sw = run.quality, run.speed, run.sweeps
    if q is not None:
        out["reduction_heatmap"] = writer.save(
            figures.reduction_heatmap(q.rows, run.config.modes), "reduction_heatmap"
        )
        out["compare_time"] = writer.save(figures.compare_time_scatter(q.rows), "compare_time")
        for i, b in enumerate(q.breakdowns):
            tag = "" if i == 0 else f"_{i + 1}"
            out[f"gain_by_op{tag}"] = writer.save(figures.breakdown_ops(b), f"gain_by_op{tag}")
            out[f"gain_by_link{tag}"] = writer.save(
                figures.breakdown_links(b), f"gain_by_link{tag}"
            )
    if sp is not None:
        out["speed_vs_layers"] = writer.save(figures.speed_vs_layers(sp.rows), "speed_vs_layers")
        out["speed_vs_gpus"] = writer.save(figures.speed_vs_gpus(sp.rows), "speed_vs_gpus")
    for one in sw or []:
        name = f"bandwidth_sweep_{one.model}"
        out[name] = writer.save(figures.sweep_lines(one), name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Plan-quality, search-speed and bandwidth-sweep benchmarks of TAPS Planner; "
        "writes OUT/RESULTS.md, OUT/figures/ and OUT/results.json.",
    )
    ap.add_argument("--quick", action="store_true", help="a small slice (about a minute)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs", help="output directory (docs/)")
    ap.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all)",
    )
    ap.add_argument("--ilp-time-limit", type=float, help="HiGHS time limit per ILP (s)")
    ap.add_argument("--ilp-max-vars", type=int, help="largest ILP attempted (variables)")
    ap.add_argument("--no-images", action="store_true", help="write HTML figures, not PNG")
    ap.add_argument(
        "--quality-budget", type=float, help="seconds of compare time after which the remaining "
        "plan-quality scenarios (largest clusters last) are skipped and listed as skipped"
    )
    ap.add_argument(
        "--pipeline-budget", type=float, help="the planner's time budget (s) per pipelining "
        "scenario and planner (default 240)"
    )
    ap.add_argument(
        "--reuse", type=Path, help="a folder of section results saved by an earlier run "
        "(OUT/sections/); sections not run now are taken from it, so one section can be redone"
    )
    ap.add_argument(
        "--jobs", type=int, default=1, help="run the plan-quality section in a second process "
        "beside the others (2 on a 2-core machine); timings then share the machine"
    )
    args = ap.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose among {SECTIONS}")
    cfg = QUICK if args.quick else FULL
    if args.ilp_time_limit is not None:
        cfg = replace(cfg, ilp_time_limit_s=args.ilp_time_limit)
    if args.ilp_max_vars is not None:
        cfg = replace(cfg, ilp_max_vars=args.ilp_max_vars)
    if args.pipeline_budget is not None:
        cfg = replace(cfg, pipeline_budget_s=args.pipeline_budget)
    if args.quality_budget is not None:
        cfg = replace(cfg, quality_budget_s=args.quality_budget)
    command = "python -m benchmarks" + (" " + " ".join(argv or sys.argv[1:])).rstrip()

    start = time.perf_counter()
    log = _log_to_stderr(start)
    env = environment.collect()
    log(
        f"{cfg.name} run on {env['cpu']} ({env['usable_cores']} cores), "
        f"load {env['load_average_start']}"
    )
    pool = None
    pending = None
    if args.jobs > 1 and "quality" in sections:
        pool = ProcessPoolExecutor(max_workers=1)
        pending = pool.submit(plan_quality.run, cfg, log)
    quality = plan_quality.run(cfg, log) if "quality" in sections and pending is None else None
    speed = search_speed.run(cfg, log) if "speed" in sections else None
    sweep = bandwidth_sweep.run(cfg, log) if "sweep" in sections else None
    piped = pipelining.run(cfg, log) if "pipeline" in sections else None
    if pending is not None and pool is not None:
        quality = pending.result()
        pool.shutdown()
    saved = args.out / "sections"
    saved.mkdir(parents=True, exist_ok=True)
    results = {"quality": quality, "speed": speed, "sweep": sweep, "pipeline": piped}
    for name, value in results.items():
        if name in sections:
            (saved / f"{name}.pickle").write_bytes(pickle.dumps(value))
        elif args.reuse is not None and (args.reuse / f"{name}.pickle").is_file():
            # our own earlier output, never user input
            results[name] = pickle.loads((args.reuse / f"{name}.pickle").read_bytes())
            log(f"{name}: reused from {args.reuse}")
    quality, speed, sweep, piped = (results[k] for k in ("quality", "speed", "sweep", "pipeline"))
    run = RunResults(command, cfg, env, None, 0.0, quality, speed, sweep, {}, piped)
    args.out.mkdir(parents=True, exist_ok=True)
    with figures.FigureWriter(args.out, images=not args.no_images) as writer:
        make_figures(run, writer)
    log(f"figures: {', '.join(f.path for f in run.figures.values())}")
    run.wall_s = time.perf_counter() - start
    run.load_average_end = environment.load_average()
    results_md = args.out / "RESULTS.md"
    # the scaling and IOPDDL tables are written by their own commands: keep them
    markers = ((scaling.BEGIN, scaling.END), (iopddl_contest.BEGIN, iopddl_contest.END))
    kept = [(b, e, kept_block(results_md, b, e)) for b, e in markers]
    results_md.write_text(render(run))
    for begin, end, block in kept:
        if block:
            write_block(results_md, begin, end, block)
    raw = {
        "command": command,
        "wall_s": run.wall_s,
        "config": asdict(cfg),
        "environment": env,
        "load_average_end": run.load_average_end,
        "quality": asdict(quality) if quality else None,
        "speed": asdict(speed) if speed else None,
        "sweeps": [asdict(one) for one in sweep] if sweep else None,
        "pipelining": [asdict(one) for one in piped] if piped else None,
        "figures": {k: asdict(v) for k, v in run.figures.items()},
    }
    (args.out / "results.json").write_text(json.dumps(_clean(raw), indent=1) + "\n")
    log(f"wrote {args.out / 'RESULTS.md'} and results.json in {run.wall_s:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
