"""``python -m validation``: emulated cluster, calibration, collective and plan runs, report.

Subcommands: cluster up/down/status, calibrate, measure-collectives, execute-plans,
measure-plans, report.

Exit codes: 0 success; 1 a run failed (a command, a rank, a wrong result); 2 this machine
cannot run it (not root, no ``ip``/``tc``, no torch) or bad arguments. Errors are one line on
stderr (rank failures add their tracebacks).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from validation import cluster, preflight
from validation.benchmark import CheckFailedError
from validation.comm import IMPLS
from validation.formulas import KINDS
from validation.launcher import DEFAULT_TIMEOUT_S, LaunchError
from validation.layout import UnsupportedPlanError
from validation.plans import MODELS, PLAN_LABELS

EXIT_FAILED = 1
EXIT_UNSUPPORTED = 2
UNITS = {"": 1, "B": 1, "K": 2**10, "KIB": 2**10, "M": 2**20, "MIB": 2**20, "G": 2**30,
         "GIB": 2**30}


def parse_size(text: str) -> int:
    """``'64K'`` -> 65536, ``'8M'`` / ``'8MiB'`` -> 8388608, ``'4096'`` -> 4096 (bytes)."""
    raw = text.strip().upper()
    digits = raw.rstrip("BKMGI")
    unit = raw[len(digits):]
    if not digits.isdigit() or unit not in UNITS:
        raise argparse.ArgumentTypeError(f"bad size {text!r}; use e.g. 4K, 64K, 1M, 32MiB")
    value = int(digits) * UNITS[unit]
    if value <= 0 or value % 1024:
        raise argparse.ArgumentTypeError(f"size {text!r} must be a positive multiple of 1 KiB")
    return value


def parse_sizes(text: str) -> list[int]:
    """Comma-separated :func:`parse_size` values, kept in order without duplicates."""
    return list(dict.fromkeys(parse_size(part) for part in text.split(",") if part.strip()))


def parse_kinds(text: str) -> list[str]:
    """Comma-separated collective names from :data:`validation.formulas.KINDS`."""
    kinds = [k.strip().replace("-", "_") for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(f"unknown kind(s) {bad}; choose from {', '.join(KINDS)}")
    return kinds


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of all subcommands."""
    p = argparse.ArgumentParser(prog="python -m validation", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    cl = sub.add_parser("cluster", help="emulated multi-node cluster in network namespaces")
    clsub = cl.add_subparsers(dest="action", required=True)
    upp = clsub.add_parser("up", help="create taps-n* node namespaces joined by shaped veths")
    upp.add_argument("--nodes", type=_positive_int, required=True)
    upp.add_argument("--ranks-per-node", type=_positive_int, default=1)
    upp.add_argument("--rate-mbit", type=_positive_float, default=cluster.DEFAULT_RATE_MBIT,
                     help="htb rate of each node link, each direction, Mbit/s (default 200)")
    upp.add_argument("--intra-rate-mbit", type=_positive_float, default=None,
                     help="htb rate of each node's loopback (all same-node traffic), Mbit/s "
                          "(default: unshaped)")
    clsub.add_parser("down", help="remove every taps- namespace and kill ranks left in them")
    clsub.add_parser("status", help="print the namespaces and state as JSON")

    def cluster_args(q: argparse.ArgumentParser) -> None:
        q.add_argument("--rate-mbit", type=_positive_float, default=None,
                       help="rate of a cluster brought up for this run (default 200 Mbit/s); "
                            "an existing cluster is reused")
        q.add_argument("--intra-rate-mbit", type=_positive_float, default=None,
                       help="loopback rate of a cluster brought up for this run (default "
                            "unshaped)")
        q.add_argument("--impl", choices=IMPLS, default="p2p",
                       help="collectives: receive-first point-to-point rings (p2p, default; "
                            "what the plan executor uses) or gloo's own")

    def mesh_args(q: argparse.ArgumentParser) -> None:
        """Cluster shape plus how to bring it up: shared by every measuring command."""
        q.add_argument("--nodes", type=_positive_int, default=2)
        q.add_argument("--ranks-per-node", type=_positive_int, default=2)
        cluster_args(q)

    def common(q: argparse.ArgumentParser, repeats: int) -> None:
        mesh_args(q)
        q.add_argument("--sizes", type=parse_sizes, default=None,
                       help="comma-separated message sizes S, e.g. 4K,64K,1M,4M,8M,16M,32M")
        q.add_argument("--repeats", type=_positive_int, default=repeats)
        q.add_argument("--timeout-s", type=_positive_float, default=DEFAULT_TIMEOUT_S,
                       help="bound on one launch of the ranks, seconds")
        q.add_argument("--out", type=Path, required=True)
        q.add_argument("--fit-kinds", type=parse_kinds, default=None,
                       help="collectives pooled into the alpha/beta fit (default: all timed "
                            "calibration kinds; e.g. all_reduce to fit the link on the "
                            "collective gloo runs at line rate)")

    cal = sub.add_parser("calibrate", help="fit alpha/beta per level; write a topology JSON")
    common(cal, repeats=5)
    cal.add_argument("--kinds", type=parse_kinds, default=None,
                     help="collectives to fit on (default all_reduce,all_gather,all_to_all)")
    cal.add_argument("--single-shot", action="store_true",
                     help="time one call per sample after a barrier, also for small messages "
                          "(as the plan executor runs them; alpha then includes start-up)")

    mea = sub.add_parser("measure-collectives", help="measured vs predicted collective times")
    common(mea, repeats=5)
    mea.add_argument("--kinds", type=parse_kinds, default=None,
                     help=f"collectives to time (default {','.join(KINDS)})")
    mea.add_argument("--scenarios", default=None,
                     help="comma-separated subset of same-node,cross-node,world,"
                          "cross-node-concurrent")
    mea.add_argument("--calibration", type=Path, default=None,
                     help="calibration measurements or topology JSON; default: calibrate first "
                          "and write OUT-stem.topology.json next to OUT")

    def plan_args(q: argparse.ArgumentParser, models: str) -> None:
        mesh_args(q)
        q.add_argument("--model", default=models,
                       help=f"comma-separated model presets ({', '.join(MODELS)}) or "
                            "config.json paths")
        q.add_argument("--plans", default=",".join(PLAN_LABELS),
                       help="comma-separated plans from taps_core.search.baselines.compare")
        q.add_argument("--topology", default=None,
                       help="topology JSON (e.g. a calibrated one) or preset to plan on; "
                            "default: build_cluster(nodes, ranks per node)")
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--timeout-s", type=_positive_float, default=DEFAULT_TIMEOUT_S)
        q.add_argument("--out", type=Path, required=True)

    exe = sub.add_parser("execute-plans",
                         help="run engine plans on the ranks; check loss and gradients")
    plan_args(exe, "mlp-small,gpt-tiny")
    mp = sub.add_parser("measure-plans",
                        help="measured vs predicted communication time of engine plans")
    plan_args(mp, "gpt-m512")
    mp.add_argument("--steps", type=_positive_int, default=5)
    mp.add_argument("--warmup", type=_positive_int, default=1)

    rep = sub.add_parser("report", help="run the whole validation and write docs/VALIDATION.md")
    rep.add_argument("--out", type=Path, default=Path("docs/VALIDATION.md"))
    rep.add_argument("--data", type=Path, default=None,
                     help="directory for the raw results JSON and the figures (default: "
                          "docs/figures next to OUT)")
    rep.add_argument("--from-data", action="store_true",
                     help="only rewrite the document from the results JSON already in --data")
    rep.add_argument("--quick", action="store_true",
                     help="fewer sizes and repeats (a smoke run, not for the record)")
    rep.add_argument("--timeout-s", type=_positive_float, default=DEFAULT_TIMEOUT_S)
    return p


BUSY_LOADAVG = 1.0


def _warn_if_busy() -> None:
    """Timings need a quiet machine: say so when other work is already running."""
    load = os.getloadavg()[0]
    if load > BUSY_LOADAVG:
        print(f"validation: warning: 1-minute load average is {load:.1f}; other work on the "
              "cores inflates and scatters the timings", file=sys.stderr)


def _unsupported(reason: str) -> int:
    print(f"validation: {reason}", file=sys.stderr)
    return EXIT_UNSUPPORTED


def _cmd_cluster(args: argparse.Namespace) -> int:
    if args.action == "up":
        state = cluster.up(args.nodes, args.ranks_per_node, args.rate_mbit,
                           args.intra_rate_mbit)
        lo = ("" if state.intra_rate_mbit is None
              else f", loopback {state.intra_rate_mbit:g} Mbit/s")
        print(f"cluster up: {state.nodes} node(s) x {state.ranks_per_node} rank(s), "
              f"{state.rate_mbit:g} Mbit/s per link each way{lo}; namespaces "
              f"{', '.join(state.namespaces)}")
    elif args.action == "down":
        done = cluster.down()
        print(f"cluster down: removed {len(done['namespaces'])} namespace(s), "
              f"killed {len(done['killed'])} process(es)")
    else:
        print(json.dumps(cluster.status(), indent=1))
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from validation import calibrate, session

    _warn_if_busy()
    with session.ensure_cluster(args.nodes, args.ranks_per_node, args.rate_mbit,
                                args.intra_rate_mbit) as state:
        result = calibrate.run_calibration(
            nodes=args.nodes, ranks_per_node=args.ranks_per_node, rate_mbit=state.rate_mbit,
            sizes=args.sizes, kinds=args.kinds, fit_kinds=args.fit_kinds, repeats=args.repeats,
            timeout_s=args.timeout_s, impl=args.impl, intra_rate_mbit=state.intra_rate_mbit,
            single_shot=args.single_shot)
    topo, raw = calibrate.write_outputs(args.out, result)
    _print_fits(result)
    print(f"wrote {topo} and {raw}")
    return 0


def _print_fits(result: dict[str, Any]) -> None:
    for level, fit in result["fits"].items():
        print(f"{level}: alpha {fit['alpha_s'] * 1e6:.1f} us, beta {fit['beta_s_per_byte']:.4g} "
              f"s/B ({fit['bandwidth_Bps'] / 1e6:.2f} MB/s), rms fit error "
              f"{100 * fit['rms_rel_error']:.1f}% over {fit['points']} points")


def _cmd_measure(args: argparse.Namespace) -> int:
    from validation import calibrate, measure, session
    from validation.formulas import LevelParams

    _warn_if_busy()
    scenarios = [s.strip() for s in args.scenarios.split(",")] if args.scenarios else None
    sizes = args.sizes or calibrate.DEFAULT_SIZES
    with session.ensure_cluster(args.nodes, args.ranks_per_node, args.rate_mbit,
                                args.intra_rate_mbit) as state:
        if args.calibration is not None:
            intra, inter, source = measure.load_levels(args.calibration)
        else:
            cal = calibrate.run_calibration(
                nodes=args.nodes, ranks_per_node=args.ranks_per_node, rate_mbit=state.rate_mbit,
                sizes=sizes, fit_kinds=args.fit_kinds, repeats=args.repeats,
                timeout_s=args.timeout_s, impl=args.impl,
                intra_rate_mbit=state.intra_rate_mbit)
            topo_path = args.out.with_name(args.out.stem + ".topology.json")
            _, raw = calibrate.write_outputs(topo_path, cal)
            _print_fits(cal)
            f = cal["fits"]
            intra = LevelParams(f["intra"]["alpha_s"], f["intra"]["beta_s_per_byte"])
            inter = LevelParams(f["inter"]["alpha_s"], f["inter"]["beta_s_per_byte"])
            source = f"calibration measurements {raw.name} (same run)"
        result = measure.run_measurement(
            nodes=args.nodes, ranks_per_node=args.ranks_per_node, rate_mbit=state.rate_mbit,
            intra=intra, inter=inter, calibration_source=source, sizes=sizes, kinds=args.kinds,
            scenarios=scenarios, repeats=args.repeats, timeout_s=args.timeout_s,
            impl=args.impl, intra_rate_mbit=state.intra_rate_mbit)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(measure.format_table(result["rows"]))
    print(f"wrote {args.out}")
    return 0


def _model_configs(spec: str) -> dict[str, dict[str, Any]]:
    """Preset names or config.json paths -> config dicts (HF-style keys)."""
    out = {}
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        if part in MODELS:
            out[part] = MODELS[part]
        elif Path(part).is_file():
            out[Path(part).stem] = json.loads(Path(part).read_text())
        else:
            raise ValueError(f"unknown model {part!r}: one of {', '.join(MODELS)} or a "
                             "config.json path")
    return out


def _plan_topology(args: argparse.Namespace):
    from taps_core.cluster.io import load_topology
    from taps_core.cluster.topology import build_cluster

    if args.topology:
        return load_topology(args.topology)
    return build_cluster(args.nodes, args.ranks_per_node, nics_per_node=args.ranks_per_node)


def _plan_labels(text: str) -> tuple[str, ...]:
    labels = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [x for x in labels if x not in PLAN_LABELS]
    if bad or not labels:
        raise ValueError(f"unknown plan(s) {bad}; choose from {', '.join(PLAN_LABELS)}")
    return labels


def _cmd_execute(args: argparse.Namespace) -> int:
    from validation import plans as plan_mod
    from validation import session

    topo = _plan_topology(args)
    labels = _plan_labels(args.plans)
    doc: dict[str, Any] = {"topology": topo.name, "models": {}}
    failed = 0
    with session.ensure_cluster(args.nodes, args.ranks_per_node, args.rate_mbit,
                                args.intra_rate_mbit):
        for name, config in _model_configs(args.model).items():
            graph = plan_mod.build(config, name)
            chosen = plan_mod.plans_for(graph, topo, labels)
            res = plan_mod.execute(config, chosen, nodes=args.nodes,
                                   ranks_per_node=args.ranks_per_node, seed=args.seed,
                                   impl=args.impl, timeout_s=args.timeout_s)
            rows = {label: vars(chk) for label, chk in res["checks"].items()}
            doc["models"][name] = {"config": config, "checks": rows}
            for label, chk in res["checks"].items():
                failed += not chk.ok
                print(f"{name:10s} {label:14s} {'ok ' if chk.ok else 'FAIL'} loss "
                      f"{chk.loss:.6f} (reference {chk.ref_loss:.6f}), max |grad err| "
                      f"{chk.max_abs_err:.2e} ({chk.worst_param}), {chk.collectives} "
                      "collective phases per step")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return EXIT_FAILED if failed else 0


def _cmd_measure_plans(args: argparse.Namespace) -> int:
    from validation import plan_timing, session
    from validation import plans as plan_mod

    _warn_if_busy()
    topo = _plan_topology(args)
    labels = _plan_labels(args.plans)
    doc: dict[str, Any] = {"topology": args.topology, "models": {}}
    with session.ensure_cluster(args.nodes, args.ranks_per_node, args.rate_mbit,
                                args.intra_rate_mbit):
        for name, config in _model_configs(args.model).items():
            graph = plan_mod.build(config, name)
            chosen = plan_mod.plans_for(graph, topo, labels)
            res = plan_mod.execute(config, chosen, nodes=args.nodes,
                                   ranks_per_node=args.ranks_per_node, seed=args.seed,
                                   steps=args.steps, warmup=args.warmup, impl=args.impl,
                                   timeout_s=args.timeout_s)
            rows = {label: plan_timing.plan_summary(label, chosen[label], topo,
                                                    res["runs"][label]) for label in labels}
            checks = {label: vars(chk) for label, chk in res["checks"].items()}
            doc["models"][name] = {"config": config, "plans": rows, "checks": checks}
            print(plan_timing.format_plans(name, rows, checks))
    doc["loadavg_1min_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from validation import report

    data = args.data or args.out.parent / "figures"
    if not args.from_data:
        _warn_if_busy()
        report.run_all(data, quick=args.quick, timeout_s=args.timeout_s)
    path = report.write_report(args.out, data)
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv``, check the machine, run the command; return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the message
        return EXIT_UNSUPPORTED if exc.code else 0
    reason = preflight.missing_tools()
    if reason is None and args.command != "cluster":
        reason = preflight.torch_missing()
    if reason:
        return _unsupported(reason)
    try:
        if args.command == "cluster":
            return _cmd_cluster(args)
        if args.command == "calibrate":
            return _cmd_calibrate(args)
        if args.command == "measure-collectives":
            return _cmd_measure(args)
        if args.command == "execute-plans":
            return _cmd_execute(args)
        if args.command == "measure-plans":
            return _cmd_measure_plans(args)
        return _cmd_report(args)
    except UnsupportedPlanError as err:
        print(f"validation: unsupported plan: {err}", file=sys.stderr)
        return EXIT_FAILED
    except (cluster.ClusterError, LaunchError, CheckFailedError, ValueError, OSError) as err:
        print(f"validation: {err}", file=sys.stderr)
        return EXIT_FAILED
