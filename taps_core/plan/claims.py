"""What a plan's search proved, in one wording for the CLI, the dashboard and the reports."""

from __future__ import annotations

from taps_core.plan.records import Plan
from taps_core.units import fmt_seconds

# said in the note of every plan whose proof leaves pipeline shapes out
STAGES_UNPROVEN = "other pipeline shapes are not proven"
FLAT_PROVEN = "optimal among plans without stages"
REFINED_SEED = "taps-stages"  # algorithm: a framework's shape, every stage's plan searched
REFINED_OPEN = "taps-shapes"  # algorithm: an open shape of least bound, planned the same way


def search_status(plan: Plan) -> str:
    """The search's claim in words: ``optimal (proven)``, or the best plan found and how far
    the proven lower bound lies below it (under the cost model the search minimised)."""
    s = plan.search
    unproven = STAGES_UNPROVEN in s.note
    floor = ""
    if s.lower_bound_s and unproven:
        floor = (f"; within {100 * gap(plan):.2g}% of the compute floor "
                 f"({fmt_seconds(s.lower_bound_s)})")
    if unproven and s.algorithm.endswith("-exhaustive"):
        return (
            "the fastest framework configuration (every Megatron-LM / DeepSpeed one priced or "
            "bounded out by its compute, none faster without stages); other pipeline shapes "
            "not proven" + floor
        )
    if unproven and FLAT_PROVEN in s.note and plan.pipeline is None:
        return (
            "optimal among plans without stages (proven) and faster than every framework "
            "configuration; other pipeline shapes not proven" + floor
        )
    if plan.pipeline is not None and s.status != "optimal" and (
        unproven or s.algorithm.startswith("pipeline")
    ):
        stages = all(st.plan.search.status == "optimal" for st in plan.pipeline.stages)
        shape = (
            "the stage count, layer split and micro-batches of the fastest framework "
            "configuration; other pipeline shapes not proven" + floor
            if s.algorithm == REFINED_SEED else
            "stage count, layer split and micro-batches from a guided search (not proven)"
        )
        own = "optimal (proven)" if stages else "best found"
        return f"each stage's plan {own}; {shape}"
    if s.status == "optimal":
        return "optimal (proven)"
    if s.status == "feasible":
        tail = "; other pipeline shapes not proven" if unproven else ""
        if s.lower_bound_s is not None and s.lower_bound_s > 0:
            over = "the bound proven over every plan, pipelined or not" if unproven else (
                "the proven bound")
            return (
                f"best found, within {100 * gap(plan):.2g}% of {over} "
                f"({fmt_seconds(s.lower_bound_s)})" + tail
            )
        return "best found (no bound proven)" + tail
    return s.status


def gap(plan: Plan) -> float:
    """How far (fraction of the plan's objective) its proven lower bound lies below it."""
    value = plan.total_time_s if plan.cost_model == "topology" else plan.volume_objective_s
    lower = plan.search.lower_bound_s or 0.0
    return max(value - lower, 0.0) / value if value > 0 else 0.0
