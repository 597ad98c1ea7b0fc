"""DeepSpeed really trains with TAPS's DeepSpeed exports: ``deepspeed.initialize`` plus one step.

For ZeRO stages 1, 2 and 3, the config that ``export_plan(plan, "deepspeed")`` writes for a
data-parallel GPT-2 plan on 1 node x 2 GPUs (batch 32: micro-batch 16 per GPU, accumulation 1)
is handed as it is to ``deepspeed.initialize(model=..., optimizer=torch.optim.AdamW(...),
config=...)`` on 2 CPU ranks (gloo, torch.multiprocessing spawn, 127.0.0.1). Each rank runs one
training step (forward, ``engine.backward(loss)``, ``engine.step()``) on a tiny torch language
model with its own data. One more case, ZeRO-3 with 2 micro-batches (micro-batch 8, accumulation
2), runs one optimizer step as DeepSpeed counts it: two forward/backward/``step()`` calls, of
which only the second is at the accumulation boundary.

Checked per case and rank: the loss is finite; the engine's ZeRO stage, train_batch_size,
micro-batch size, gradient accumulation steps and bf16 switch equal the exported values; the
global step is 0 before the accumulation boundary and 1 after it; every parameter tensor changed;
both ranks hold the same parameters afterwards although their data (and losses) differ, so
gradients were averaged across the two data-parallel replicas.

Nothing of the exported config is changed for CPU: DeepSpeed's CPU accelerator (forced with
``DS_ACCELERATOR=cpu``) supports bf16 and runs the exported ``"bf16": {"enabled": true}``; the
config names no optimizer (torch's AdamW is passed in) and no CUDA-only section. One thing of
DeepSpeed's own is turned off in the ranks: ``deepspeed.init_distributed`` JIT-compiles a
shared-memory all-reduce kernel (``deepspeed_shm_comm``, about 60 s of C++ on 2 cores on a
machine that has not built it before) that only ``inference_all_reduce`` uses, so its entry in
``deepspeed.ops.__compatible_ops__`` is set to False and DeepSpeed skips it, as it does where the
op is not compatible (every collective of training goes through gloo either way).

All cases run in one pair of rank processes: DeepSpeed's first ``initialize`` in a process spends
seconds importing (torch._dynamo among others; about 9 s for 2 ranks on 2 busy cores), later ones
well under 1 s, so the file takes about 20 s in all. Each rank puts its results, or the
traceback of a failed case, on a queue; the parent fails a case with the rank's message, and
fails all of them when a rank dies or does not report within the deadline (collectives also time
out in the ranks). Skipped without torch or deepspeed (requirements-validation.txt).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import queue
import socket
import sys
import time
import types
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from taps_core.export import export_plan
from tests.test_export import data_parallel_rule, make_plan

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("deepspeed") is None,
    reason="needs torch and deepspeed (requirements-validation.txt)",
)

WORLD = 2  # the plan's data-parallel size: 1 node x 2 GPUs, all of it batch split
CASES = [(1, 1), (2, 1), (3, 1), (3, 2)]  # (ZeRO stage, micro-batches per step)
VOCAB, SEQ = 64, 8
DEADLINE_S = 180.0  # the whole run, both ranks; about 20 s when nothing hangs
COLLECTIVE_TIMEOUT_S = 90  # gloo collectives in a rank give up (and report) after this


def exported_config(zero: int, micro: int) -> dict[str, Any]:
    """The DeepSpeed config TAPS exports for a data-parallel GPT-2 plan on 2 GPUs."""
    plan = make_plan("gpt2", 1, WORLD, data_parallel_rule(1, WORLD), zero=zero, micro=micro)
    cfg = dict(export_plan(plan, "deepspeed").data)
    assert cfg["train_batch_size"] == (
        cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * WORLD)
    return cfg


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _train_one_step(cfg: dict[str, Any], rank: int) -> dict[str, Any]:
    """``deepspeed.initialize`` with ``cfg`` and one optimizer step; what the engine says."""
    import deepspeed
    import torch

    torch.manual_seed(0)  # the same initial model on both ranks
    model = torch.nn.Sequential(
        torch.nn.Embedding(VOCAB, 16), torch.nn.Linear(16, 32), torch.nn.GELU(),
        torch.nn.Linear(32, VOCAB),
    )
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=cfg)
    data = torch.Generator().manual_seed(1000 + rank)  # each replica its own samples
    losses, steps = [], []
    for _ in range(engine.gradient_accumulation_steps()):
        ids = torch.randint(0, VOCAB, (engine.train_micro_batch_size_per_gpu(), SEQ + 1),
                            generator=data)
        logits = engine(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()))
        steps.append(int(engine.global_steps))
    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params):  # whole tensors under ZeRO-3; else a no-op
        after = [p.detach().float().clone() for p in params]
    return {
        "zero_stage": int(engine.zero_optimization_stage()),
        "train_batch_size": int(engine.train_batch_size()),
        "train_micro_batch_size_per_gpu": int(engine.train_micro_batch_size_per_gpu()),
        "gradient_accumulation_steps": int(engine.gradient_accumulation_steps()),
        "bf16": bool(engine.bfloat16_enabled()),
        "losses": losses,
        "global_steps": steps,
        "changed": [not torch.equal(a, b.to(p.dtype).float())
                    for a, b, p in zip(after, before, params)],
        "checksum": math.fsum(float(a.double().sum()) for a in after),
        "optimizer": type(engine.optimizer).__name__,
    }


def _rank_main(rank: int, port: int, cases: list[tuple[int, int, dict[str, Any]]],
               results: Any) -> None:
    """One spawned rank: every case in turn; ('ok', values) or ('error', traceback) each."""
    import os
    import traceback

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_WORLD_SIZE=str(WORLD),
                      DS_ACCELERATOR="cpu")
    try:
        from datetime import timedelta

        import deepspeed
        import torch

        torch.set_num_threads(1)  # 2 ranks on 2 shared cores
        # no JIT build of the shared-memory kernel that only inference_all_reduce uses
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(dist_backend="gloo",
                                   timeout=timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    except BaseException:
        results.put((rank, None, "error", f"setup: {traceback.format_exc()}"))
        return
    for zero, micro, cfg in cases:
        try:
            results.put((rank, (zero, micro), "ok", _train_one_step(cfg, rank)))
        except BaseException:
            results.put((rank, (zero, micro), "error", traceback.format_exc()))
    results.put((rank, None, "done", None))


@contextlib.contextmanager
def _no_script_main() -> Iterator[None]:
    """Hide the process's ``__main__`` while ranks are spawned.

    A spawned child re-runs the parent's ``__main__`` by its file; after a dashboard AppTest in
    the same pytest process that is Streamlit's stand-in for ``app.py``, which cannot run outside
    Streamlit, so the rank died before its first line. A bare module gives the child nothing to
    re-run.
    """
    saved = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = saved


class Run(NamedTuple):
    values: dict[tuple[int, int], dict[int, dict[str, Any]]]  # case -> rank -> what it reported
    errors: list[tuple[tuple[int, int] | None, str]]  # (case or None for all, what went wrong)

    def failures(self, case: tuple[int, int]) -> str:
        """The ranks' tracebacks for ``case`` and what stopped every case (setup, death, hang)."""
        return "\n".join(msg for c, msg in self.errors if c in (case, None))


@pytest.fixture(scope="module")
def ranks() -> Run:
    """Every case run on 2 spawned gloo ranks."""
    import torch.multiprocessing as mp

    cases = [(z, m, exported_config(z, m)) for z, m in CASES]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, port, cases, results), daemon=True)
             for r in range(WORLD)]
    with _no_script_main():
        for p in procs:
            p.start()
    out: dict[tuple[int, int], dict[int, dict[str, Any]]] = {}
    errors: list[tuple[tuple[int, int] | None, str]] = []
    done: set[int] = set()
    end = time.monotonic() + DEADLINE_S
    try:
        while len(done) < WORLD:
            try:
                rank, case, status, value = results.get(timeout=1.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs)
                        if r not in done and p.exitcode is not None]
                if dead:
                    errors.append((None, f"rank {dead[0]} exited with code "
                                         f"{procs[dead[0]].exitcode} before reporting all cases"))
                    break
                if time.monotonic() > end:
                    errors.append((None, f"ranks {sorted(set(range(WORLD)) - done)} did not "
                                         f"finish in {DEADLINE_S:.0f} s"))
                    break
                continue
            if status == "ok":
                out.setdefault(case, {})[rank] = value
            elif status == "error":
                where = f"rank {rank}" + (f", (zero, micro-batches) {case}" if case else "")
                errors.append((case, f"{where}:\n{value}"))
                if case is None:
                    done.add(rank)
            else:
                done.add(rank)
    finally:
        for p in procs:
            p.join(timeout=max(1.0, min(20.0, end - time.monotonic())))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5.0)
    if errors and not out:
        pytest.fail("\n".join(msg for _, msg in errors), pytrace=False)
    return Run(out, errors)


@pytest.mark.parametrize(("zero", "micro"), CASES, ids=[f"zero{z}-micro{m}" for z, m in CASES])
def test_deepspeed_runs_exported_training_config(ranks: Run, zero: int, micro: int) -> None:
    cfg = exported_config(zero, micro)
    got = ranks.values.get((zero, micro), {})
    if len(got) < WORLD:
        pytest.fail(f"case zero={zero} micro={micro} ran on ranks {sorted(got)} of {WORLD}:\n"
                    + ranks.failures((zero, micro)), pytrace=False)
    k = cfg["gradient_accumulation_steps"]
    for rank, r in sorted(got.items()):
        where = f"rank {rank}: {r}"
        assert r["zero_stage"] == cfg["zero_optimization"]["stage"] == zero, where
        assert r["train_batch_size"] == cfg["train_batch_size"], where
        assert r["train_micro_batch_size_per_gpu"] == cfg["train_micro_batch_size_per_gpu"], where
        assert r["gradient_accumulation_steps"] == k == micro, where
        assert r["bf16"] is cfg.get("bf16", {}).get("enabled", False), where
        assert all(math.isfinite(x) for x in r["losses"]) and len(r["losses"]) == k, where
        assert r["global_steps"] == [0] * (k - 1) + [1], where  # one step, at the boundary
        assert all(r["changed"]), where
    r0, r1 = got[0], got[1]
    assert r0["losses"] != r1["losses"], "both ranks saw the same data"
    assert r0["checksum"] == pytest.approx(r1["checksum"], rel=0, abs=1e-9), (
        "the data-parallel replicas differ after the step")
