"""Launch :func:`validation.rank_jobs.bench_collectives` on the cluster and summarise it."""

from __future__ import annotations

from typing import Any

from validation.fit import summarize
from validation.launcher import DEFAULT_TIMEOUT_S, launch

BENCH_FN = "validation.rank_jobs:bench_collectives"


class CheckFailedError(RuntimeError):
    """A collective returned wrong values: timings of a wrong result are not reported."""


def run_benchmark(
    *,
    nodes: int,
    ranks_per_node: int,
    scenarios: list[dict[str, Any]],
    kinds: list[str],
    sizes: list[int],
    repeats: int,
    warmup: int = 1,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    impl: str = "gloo",
    single_shot: bool = False,
) -> dict[str, Any]:
    """Time every (scenario, kind, size) on the ranks; return ``{"rows", "checks", "records"}``.

    ``impl`` picks gloo's own collectives or the point-to-point ones of :mod:`validation.comm`;
    ``single_shot`` times one call per sample after the barrier, also for small messages.
    ``rows`` are medians over ``repeats`` (see :func:`validation.fit.summarize`), ``records`` the
    raw per-rank, per-repeat seconds, ``checks`` the per-rank correctness checks (all passed).
    """
    results = launch(BENCH_FN, nodes=nodes, ranks_per_node=ranks_per_node, timeout_s=timeout_s,
                     kwargs={"scenarios": scenarios, "kinds": kinds, "sizes": sizes,
                             "repeats": repeats, "warmup": warmup, "verify": True,
                             "impl": impl, "single_shot": single_shot})
    records = [rec for res in results for rec in res["records"]]
    checks = [chk for res in results for chk in res["checks"]]
    bad = [c for c in checks if not c["ok"]]
    if bad:
        raise CheckFailedError(f"{len(bad)} collective result(s) were wrong, first: {bad[0]}")
    scenario_names = {sc["name"]: sc for sc in scenarios}
    rows = summarize(records)
    for row in rows:
        level = scenario_names[row["scenario"]].get("level")
        if level:
            row["level"] = level
    return {"rows": rows, "checks": checks, "records": records}
