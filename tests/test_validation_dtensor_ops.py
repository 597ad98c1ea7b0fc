"""TAPS's own plans exported as per-op DTensor placements and executed on 4 local gloo ranks:
same loss and gradients as one process (:mod:`validation.dtensor_ops_run`): our small GPT-2 and
Hugging Face's LlamaForCausalLM, a pipelined plan of each stage by stage (GPT-2 untied and with
its tied embedding / LM head, the tied gradient summed across the stages). About 45 s (noisy on
a shared machine)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # plain `pytest` does not put the repository root on sys.path
    sys.path.insert(0, str(REPO))

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="needs torch (requirements-dev.txt)")


def test_taps_plans_run_as_dtensor_with_the_loss_and_gradients_of_one_process():
    from validation.dtensor_ops_run import cases, has_transformers, run

    todo = cases(quick=True)  # `python -m validation.dtensor_ops_run` runs all thirteen
    want = {"gpt2-pipeline", "gpt2-tied-pipeline", "gpt2-infer"}
    if has_transformers():  # Hugging Face's own LlamaForCausalLM (requirements-validation.txt)
        want |= {"llama-taps", "llama-infer", "llama-pipeline"}
    assert {c.label for c in todo} == want
    checks = run(todo)
    assert [c.label for c in checks] == [c.label for c in todo]
    for label in want & {"gpt2-pipeline", "gpt2-tied-pipeline", "llama-pipeline"}:
        staged = next(x.plan for x in todo if x.label == label)
        assert len(staged["pipeline"]["stages"]) == 2  # every stage ran, on its own mesh
    tied = next(x for x in todo if x.label == "gpt2-tied-pipeline")
    assert tied.model.tie_word_embeddings  # the shared weight on the first and the last stage
    for c in checks:
        assert c.style == "per-op placements"
        if c.label.endswith("-taps"):  # TAPS's own plan splits the small models for real
            plan = next(x.plan for x in todo if x.label == c.label)
            assert any(op["strategy"].get("inter") for op in plan["ops"]), c.label
        assert c.ok, f"{c.label}: {c.max_abs_err:.2e} on {c.worst_param}"
        if not c.label.endswith("-infer"):  # inference compares the logits (max_abs_err)
            assert abs(c.loss - c.ref_loss) <= 1e-5 * abs(c.ref_loss)
