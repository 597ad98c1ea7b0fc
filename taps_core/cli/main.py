"""Command line: ``python -m taps_core {models,topologies,plan,compare,sweep,solve-graph,export}``.

Bad input prints one line naming the field and exits with code 2; never a traceback. Inputs
are bounded (:mod:`taps_core.limits`) before any work, ``--json`` targets are checked before
the search, and every JSON written is strict (no NaN/Infinity).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from taps_core import strict_json
from taps_core.cli.export import add_export_parser, run_export
from taps_core.cluster.io import load_topology
from taps_core.cluster.presets import PRESETS
from taps_core.cluster.topology import Topology, node_inter_bandwidth
from taps_core.errors import InfeasibleError, InvalidInputError, TapsError
from taps_core.export.framework_import import read_fixed_from
from taps_core.ir.graph import OpGraph
from taps_core.limits import check
from taps_core.models import build_graph, load_model_config, sample_names
from taps_core.models.config import DTYPE_BYTES
from taps_core.plan.records import NotFitting
from taps_core.plan.report import compare_to_json, fmt_bytes, fmt_seconds, plan_table, plan_to_json
from taps_core.search.baselines import compare, reduction
from taps_core.search.configs import SPACES, best_configuration
from taps_core.search.fixed_config import parse_fixed, plan_fixed
from taps_core.search.flat import COST_MODELS
from taps_core.search.planner import search
from taps_core.solver import iopddl, problem_from_json, solve
from taps_core.studies.sweep import (
    MAX_POINTS,
    Sweep,
    sweep_grid,
    sweep_inter_bandwidth,
)
from taps_core.studies.sweep_jobs import check_workers, default_workers
from taps_core.studies.sweep_json import sweep_to_json

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 1
DEFAULT_TIME_LIMIT_S = 60.0


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line with exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InvalidInputError("arguments", message, "valid options (see --help)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m taps_core", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("models", help="list sample models with their parameter counts")
    sub.add_parser("topologies", help="list topology presets")
    for name in ("plan", "compare"):
        q = sub.add_parser(name, help=f"{name} a model on a topology")
        q.add_argument("model", help=f"sample name ({', '.join(sample_names())}) or config.json")
        q.add_argument("--topology", required=True, help="preset like dgx-a100:2 or a JSON path")
        if name == "plan":
            q.add_argument("--cost-model", default="topology", choices=COST_MODELS)
        q.add_argument("--mode", default="train", choices=("train", "infer"))
        q.add_argument("--batch", type=int, help="global batch size (samples)")
        q.add_argument("--seq", type=int, help="sequence length (tokens)")
        q.add_argument("--dtype", choices=sorted(DTYPE_BYTES))
        q.add_argument(
            "--flash-attention",
            action="store_true",
            default=None,
            help="fused attention: keep no softmax/dropout tensors for backward",
        )
        q.add_argument(
            "--memory-limit",
            type=float,
            metavar="GB",
            help="memory per device in GiB (default: the GPU's memory)",
        )
        q.add_argument(
            "--time-budget",
            type=float,
            default=60.0,
            metavar="S",
            help="seconds the exact memory-bound search may take before it reports its gap",
        )
        if name == "plan":
            q.add_argument(
                "--pipeline",
                choices=("auto", "on", "off"),
                default="auto",
                help="pipeline stages across hosts: auto and on plan every stage of the fastest "
                "framework configuration's shape per op when it has stages (models "
                "with differing layers: auto tries stages when the plan without them is "
                "memory-bound or communication-heavy); on, with --prove-stages, also plans the "
                "open shapes of least bound; off keeps to plans without stages",
            )
            q.add_argument(
                "--prove-stages",
                action="store_true",
                help="bound every pipeline shape (stages x micro-batches, any layer split and "
                "per-op stage plan) to prove the plan optimal or certify its gap; seconds to "
                "a minute on large models",
            )
            q.add_argument(
                "--space",
                choices=("taps", *SPACES),
                default="taps",
                help="taps: TAPS's search; megatron / deepspeed: the fastest configuration that "
                "framework accepts, searched exhaustively",
            )
            q.add_argument(
                "--fixed",
                metavar="SPEC",
                help='price exactly this Megatron-style configuration instead of searching, '
                'e.g. "tp=8,pp=8,dp=24,mbs=1,recompute=full,zero=1,sp=1" (recompute: none, '
                'selective or full; first=N / last=N: the layers of the first / last pipeline '
                'stage, as Megatron-LM\'s --decoder-first/last-pipeline-num-layers)',
            )
            q.add_argument(
                "--fixed-from",
                metavar="PATH",
                help="price the configuration a Megatron-LM argument list or a DeepSpeed "
                "config (JSON) sets, as --fixed does",
            )
        q.add_argument("--json", metavar="PATH|-", help="write the JSON report ('-' = stdout)")
    _add_sweep_parser(sub)
    s = sub.add_parser(
        "solve-graph",
        help="solve a pairwise cost problem: the native JSON or Google's IOPDDL format",
    )
    s.add_argument("file")
    s.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT_S,
        metavar="S",
        help=f"seconds, file reading included (default {DEFAULT_TIME_LIMIT_S:.0f})",
    )
    add_export_parser(sub)
    return p


def _add_sweep_parser(sub: Any) -> None:
    """``sweep MODEL --topology T --from GBPS --to GBPS --points N [--json PATH|-]``."""
    q = sub.add_parser(
        "sweep",
        help="step time of TAPS and the baselines as the inter-node bandwidth varies",
    )
    q.add_argument("model", help=f"sample name ({', '.join(sample_names())}) or config.json")
    q.add_argument("--topology", required=True, help="preset like dgx-a100:2 or a JSON path")
    q.add_argument("--from", dest="low", type=float, required=True, metavar="GBPS",
                   help="lowest bandwidth per host (GB/s, summed over a host's NICs)")
    q.add_argument("--to", dest="high", type=float, required=True, metavar="GBPS",
                   help="highest bandwidth per host (GB/s)")
    q.add_argument("--points", type=int, default=8, metavar="N",
                   help=f"bandwidths, log-spaced (1 to {MAX_POINTS}); the cluster's own "
                   "bandwidth is always added")
    q.add_argument("--plans", default="volume,megatron,data_parallel", metavar="LIST",
                   help="baselines beside TAPS, comma-separated ('' for TAPS alone)")
    q.add_argument("--mode", default="train", choices=("train", "infer"))
    q.add_argument("--batch", type=int, help="global batch size (samples)")
    q.add_argument("--seq", type=int, help="sequence length (tokens)")
    q.add_argument("--dtype", choices=sorted(DTYPE_BYTES))
    q.add_argument("--flash-attention", action="store_true", default=None)
    q.add_argument("--memory-limit", type=float, metavar="GB",
                   help="memory per device in GiB (default: the GPU's memory)")
    q.add_argument("--json", metavar="PATH|-", help="write the sweep JSON ('-' = stdout)")
    q.add_argument("--workers", type=int, default=default_workers(), metavar="N",
                   help="processes searching grid points at once (default: the cores, at most "
                   "4); the result is the same for any N")


def _sweep_grid(args: argparse.Namespace, own_Bps: float) -> tuple[float, ...]:
    """The bandwidths (bytes/s per host) of ``--from``/``--to``/``--points``, the cluster's own
    added; each flag checked on its own so the error names it."""
    for flag, value in (("--from", args.low), ("--to", args.high)):
        if not (value > 0 and value < float("inf")):  # NaN fails too
            raise InvalidInputError(flag, value, "a bandwidth > 0 (GB/s per host)")
    if args.high < args.low:
        raise InvalidInputError("--to", args.high, f">= --from ({args.low:g} GB/s)")
    if not 1 <= args.points <= MAX_POINTS:
        raise InvalidInputError("--points", args.points, f"between 1 and {MAX_POINTS}")
    return sweep_grid(args.low * 1e9, args.high * 1e9, args.points, own_Bps)


def _sweep(args: argparse.Namespace) -> Sweep:
    """The sweep of ``args`` (inputs checked before any search)."""
    baselines = tuple(x.strip() for x in args.plans.split(",") if x.strip())
    known = ("volume", "megatron", "data_parallel")
    bad = [b for b in baselines if b not in known]
    if bad:
        raise InvalidInputError("--plans", args.plans, f"a comma-separated subset of {known}")
    check_workers("--workers", args.workers)
    topo = load_topology(args.topology)
    if topo.nodes < 2:
        raise InvalidInputError(
            "--topology", args.topology, "a cluster of 2 or more hosts (one host has no "
            "inter-node network to sweep)"
        )
    grid = _sweep_grid(args, node_inter_bandwidth(topo))
    limit = _limit(args)
    graph, _ = _workload(args)
    return sweep_inter_bandwidth(
        graph, topo, grid, mode=args.mode, memory_limit_bytes=limit,
        labels=("taps", *baselines), workers=args.workers,
    )


def _sweep_table(sw: Sweep) -> str:
    """One row per bandwidth (ms per step per plan, TAPS's structure), then the changes."""
    labels = sw.labels
    head = f"{'GB/s per host':>15}" + "".join(f" {lb + ' ms':>17}" for lb in labels)
    lines = [head + "  TAPS structure (Megatron terms)"]
    for p in sw.done:
        bw = p.node_bandwidth_Bps / 1e9
        mark = " (this cluster)" if sw.is_own(p.node_bandwidth_Bps) else ""
        cells = "".join(
            f" {'does not fit' if p.plans[lb].total_time_s is None else _ms(p.plans[lb]):>17}"
            for lb in labels
        )
        shape = p.plans["taps"].shape
        lines.append(f"{bw:>15.3g}{cells}  {shape.words() if shape else ''}{mark}")
    for lb in labels:
        reasons = [p.reasons[lb] for p in sw.done if lb in p.reasons]
        if reasons:
            lines.append(f"{lb} does not fit at {len(reasons)} of {len(sw.done)} bandwidths: "
                         f"{reasons[0]}")
    for c in sw.plan_changes:
        what = c.structure or c.words
        lines.append(f"change {c.low_Bps / 1e9:.3g}-{c.high_Bps / 1e9:.3g} GB/s: {what}")
    if sw.twin_changes:
        spans = ", ".join(f"{c.low_Bps / 1e9:.3g}-{c.high_Bps / 1e9:.3g}" for c in sw.twin_changes)
        lines.append(f"equal-cost twins (no change of step; TAPS returns either plan) at {spans} "
                     "GB/s")
    return "\n".join(lines)


def _ms(q: Any) -> str:
    """A step time in ms to 4 significant digits, never in exponent form (14570, not 1.457e+04)."""
    text = f"{q.total_time_s * 1e3:.4g}"
    return f"{float(text):.0f}" if "e" in text else text


def _budget(args: argparse.Namespace) -> float:
    if not args.time_budget > 0 or args.time_budget != args.time_budget:
        raise InvalidInputError("--time-budget", args.time_budget, "> 0 (seconds)")
    return float(args.time_budget)


def _workload(args: argparse.Namespace) -> tuple[OpGraph, Topology]:
    cfg = load_model_config(args.model).with_workload(
        batch_size=args.batch,
        seq_length=args.seq,
        dtype=args.dtype,
        flash_attention=args.flash_attention,
    )
    topo = load_topology(args.topology)
    return build_graph(cfg), topo


def _limit(args: argparse.Namespace) -> float | None:
    if args.memory_limit is None:
        return None
    return check("memory_limit_gib", args.memory_limit, field="--memory-limit") * 2**30


def _emit(data: dict[str, Any], target: str | None) -> bool:
    """Write strict JSON to a path or stdout; True when stdout was used (skip the table)."""
    if target is None:
        return False
    text = strict_json.dumps(data, indent=1)
    if target == "-":
        print(text)
        return True
    try:
        Path(target).write_text(text + "\n")
    except OSError as err:
        raise InvalidInputError("--json", target, f"a writable path ({err.strerror})") from None
    return False


def _solve_graph(args: argparse.Namespace, start: float) -> dict[str, Any]:
    """Read FILE (either format), solve within the time left, and describe the answer."""
    check("time_limit_s", args.time_limit, field="--time-limit")
    data = strict_json.load_file(args.file, field="FILE", limit="problem_file_bytes")
    if iopddl.is_iopddl(data):
        problem = iopddl.parse(data)
        left = max(0.1, args.time_limit - (time.perf_counter() - start))
        return iopddl.solve_iopddl(problem, time_limit_s=left)
    graph = problem_from_json(data)
    left = max(0.1, args.time_limit - (time.perf_counter() - start))
    sol = solve(graph, time_limit_s=left)
    out: dict[str, Any] = {
        "strategies": sol.strategies,
        "cost": sol.cost,
        "status": sol.status,
        "lower_bound": sol.lower_bound,
        "gap": sol.gap,
        "time_s": sol.stats.get("time_s"),
        "method": sol.stats.get("method"),
    }
    if sol.status == "infeasible":
        out["reason"] = "every assignment has a forbidden (non-finite) cost"
    return out


def _models() -> None:
    print(f"{'model':<16} {'family':<8} {'parameters':>12} {'layers':>6}  workload")
    for name in sample_names():
        cfg = load_model_config(name)
        g = build_graph(cfg)
        work = f"batch {cfg.batch_size}" + (
            f", seq {cfg.seq_length}" if cfg.model_type != "resnet" else ""
        )
        print(
            f"{name:<16} {cfg.model_type:<8} {g.num_parameters / 1e6:>11.1f}M "
            f"{g.num_layers:>6}  {work}, {cfg.dtype}"
        )


def _topologies() -> None:
    for name, (_, desc) in PRESETS.items():
        print(f"{name + ':N':<14} {desc}")


def _compare_table(plans: dict[str, Any]) -> str:
    lines = [
        f"{'plan':<14} {'step time':>10} {'comm':>10} {'intra-node':>11} "
        f"{'inter-node':>11} {'mem/dev':>9}"
    ]
    taps = plans.get("taps")
    for label, p in plans.items():
        if isinstance(p, NotFitting):
            lines.append(f"{label:<14} does not fit: {p.reason}")
            continue
        lines.append(
            f"{label:<14} {fmt_seconds(p.total_time_s):>10} {fmt_seconds(p.comm_time_s):>10}"
            f" {fmt_bytes(p.intra_node_bytes):>11} {fmt_bytes(p.inter_node_bytes):>11}"
            f" {p.memory.total / 2**30:>7.1f}Gi"
        )
    other = plans.get("volume")
    if (
        taps is not None
        and not isinstance(taps, NotFitting)
        and other is not None
        and not isinstance(other, NotFitting)
    ):
        lines.append(
            f"TAPS communication is {100 * reduction(taps, other):.0f}% below the "
            "volume-based plan's"
        )
    return "\n".join(lines)


def run(argv: list[str]) -> int:
    """Run the CLI; returns the exit code."""
    start = time.perf_counter()
    args = _parser().parse_args(argv)
    if getattr(args, "json", None) is not None:
        strict_json.check_output_path(args.json)  # before any search
    if args.command == "models":
        _models()
    elif args.command == "topologies":
        _topologies()
    elif args.command == "plan":
        if args.fixed is not None and args.fixed_from is not None:
            raise InvalidInputError("--fixed-from", args.fixed_from, "absent with --fixed")
        given = args.fixed is not None or args.fixed_from is not None
        if given and args.space != "taps":
            raise InvalidInputError("--space", args.space, "taps (the default) with --fixed")
        fixed = parse_fixed(args.fixed) if args.fixed is not None else None
        graph, topo = _workload(args)
        if args.fixed_from is not None:
            fixed = read_fixed_from(args.fixed_from, topo.num_gpus, graph.meta["config"])
        if fixed is not None:
            plan = plan_fixed(
                graph, topo, fixed, mode=args.mode, memory_limit_bytes=_limit(args)
            )
        elif args.space != "taps":
            plan = best_configuration(
                graph, topo, mode=args.mode, space=args.space,
                memory_limit_bytes=_limit(args),
            )
        else:
            plan = search(
                graph,
                topo,
                mode=args.mode,
                cost_model=args.cost_model,
                memory_limit_bytes=_limit(args),
                time_budget_s=_budget(args),
                pipeline={"auto": None, "on": True, "off": False}[args.pipeline],
                prove_stages=args.prove_stages,
            )
        if not _emit(plan_to_json(plan), args.json):
            print(plan_table(plan))
    elif args.command == "compare":
        graph, topo = _workload(args)
        plans = compare(
            graph, topo, mode=args.mode, memory_limit_bytes=_limit(args),
            time_budget_s=_budget(args),
        )
        if not _emit(compare_to_json(plans), args.json):
            print(_compare_table(plans))
    elif args.command == "sweep":
        sw = _sweep(args)
        if not _emit(sweep_to_json(sw), args.json):
            print(_sweep_table(sw))
    elif args.command == "export":
        return run_export(args)
    else:
        result = _solve_graph(args, start)
        print(strict_json.dumps(result))
        if result["status"] == "infeasible":  # the answer is still on stdout, with its reason
            print(f"no solution: {result.get('reason', 'infeasible')}", file=sys.stderr)
            return EXIT_BAD_INPUT
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: one-line errors, exit 2 on bad input, 1 when nothing fits."""
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except InvalidInputError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InfeasibleError as err:
        print(f"no plan: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except TapsError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # output piped into `head` and closed early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("error: out of memory (the input is too large for this machine)", file=sys.stderr)
        return EXIT_INTERNAL
    except Exception as err:  # a bug: still one line, never a traceback
        text = " ".join(str(err).split())[:200]
        print(f"internal error: {type(err).__name__}: {text}", file=sys.stderr)
        return EXIT_INTERNAL
