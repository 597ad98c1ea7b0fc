"""The closing sections: limits of the numbers, and the machine and run they came from."""

from __future__ import annotations

from benchmarks.report_sections.inputs import RunResults
from benchmarks.report_sections.markdown import pct, table


def notes(r: RunResults) -> list[str]:
    """The "Limits and notes" section: cost model, baseline, strategy space, timing noise."""
    out = [
        "## Limits and notes",
        "",
        "- All numbers come from the engine's cost model (alpha-beta ring collectives routed over "
        "the topology's links at 80% link efficiency, compute at 50% of peak FLOP/s, no overlap "
        "of communication with compute). They are predictions, not GPU measurements; "
        "`python -m validation` checks the communication model on an emulated cluster.",
        "- The volume-based baseline is the engine's own (`VolumeCost`: bytes each rank sends "
        "times one constant 100 GB/s, plus the same compute costs), searched in the same space "
        "with the same DP; the paper's baseline (MindSpore's cost model) differs in detail.",
        "- The strategy space has sharded optimizer state, gradients and parameters (a "
        "plan-wide ZeRO stage), activation recomputation per layer, reduce-scatter of partial "
        "sums (sequence parallelism), padded vocabularies and gradient accumulation over "
        "micro-batches, and pipeline stages across hosts (section 4).",
        "- Reductions are of communication time; TAPS optimises step time, see section 1.",
    ]
    q = r.quality
    st = q.stats if q is not None else {}
    if st.get("taps_shapes_open"):
        out.append(
            f"- In {st['taps_shapes_open']} training scenarios on several hosts TAPS's plan is "
            "proven over every plan without stages and every framework configuration, but the "
            "default search leaves other pipeline shapes unbounded, so its status is "
            "`feasible` and its only bound is the compute floor; `--prove-stages` bounds every "
            "shape (the scaling section below)."
        )
    if st.get("taps_memory_bound"):
        out.append(
            f"- In {st['taps_memory_bound']} scenarios memory binds and TAPS's search leaves a "
            "proven gap (its exact front search or layer-count program stopped short of a "
            f"proof); the largest is {pct(st['taps_worst_bound_gap'])} of the step time "
            f"({st['taps_worst_bound_gap_scenario']})."
        )
    out += [
        "- In the bandwidth sweeps, above 32 GB/s per NIC each GPU's PCIe Gen4 link to its NIC "
        "(32 GB/s, as in the dgx-a100 preset) becomes the bottleneck of inter-node traffic, so "
        "the curves flatten there: faster NICs alone do not help this box.",
        "- Wall times were measured on 2 CPU cores shared with other jobs (load averages in the "
        "machine table); treat them as +-20%. DP times are best of up to 5 runs, ILP and "
        "planner times single runs.",
        "- \"Optimal\" means proven: the plain DP when the fastest plan fits in memory, "
        "otherwise a Lagrangian bound closed by an exact search over (time, memory) fronts "
        "(identical layers combined by an integer program over layer counts, proven to 1e-7 "
        "relative). HiGHS (the ILP reference of section 2) stops at a relative MIP gap of "
        "1e-12 after rescaling.",
    ]
    if r.config.name != "full":
        out.append(f"- This is the `{r.config.name}` slice, not the full benchmark.")
    out.append("")
    return out


def machine(r: RunResults) -> list[str]:
    """The "Machine" table: CPU, RAM (GiB), software, commit, load averages, wall seconds."""
    env = r.environment
    ram = env.get("ram_bytes")
    la0 = env.get("load_average_start")
    la1 = r.load_average_end
    pk = env.get("packages", {})
    rows = [
        ["date", str(env.get("date_utc"))],
        ["CPU", str(env.get("cpu"))],
        ["cores", f"{env.get('usable_cores')} usable of {env.get('logical_cores')} logical"],
        ["RAM", f"{ram / 2**30:.1f} GiB" if isinstance(ram, int) else "unknown"],
        ["OS", str(env.get("os"))],
        ["Python", str(env.get("python"))],
        ["packages", ", ".join(f"{k} {v}" for k, v in pk.items())],  # type: ignore[union-attr]
        ["browser for kaleido", str(env.get("chromium"))],
        ["engine commit", str(env.get("git"))],
        [
            "load average (1/5/15 min)",
            f"start {', '.join(f'{x:.2f}' for x in la0) if la0 else 'n/a'}; "
            f"end {', '.join(f'{x:.2f}' for x in la1) if la1 else 'n/a'}",
        ],
        ["run wall time", f"{r.wall_s:.0f} s ({r.wall_s / 60:.1f} min)"],
    ]
    return ["## Machine", "", table(["", ""], rows, "ll"), ""]
