"""TAPS's own plans exported as per-op DTensor placements and run: same loss and gradients as
one process.

``python -m validation.dtensor_ops_run`` plans the small GPT-2 of :mod:`validation.dtensor_model`
and a small Hugging Face ``LlamaForCausalLM`` (transformers, grouped-query attention, rotary
positions) on 2 nodes x 2 ranks with DGX-like links with the engine (TAPS, the topology cost
model: hidden and FFN splits across nodes, partial sums, heads inside), adds hand-made plans of
the engine's space that ``parallelize_module`` cannot hold (a different batch split per op, the
sequence split across nodes, the head dim split inside a fused projection, Megatron's sequence
parallelism on Llama), exports each with :func:`taps_core.export.dtensor_ops.to_dtensor_ops`
and executes the exported snippet as it is on 4 gloo ranks of this machine
(torch.multiprocessing, 127.0.0.1: DTensor's collectives, no emulated network needed):
``build_mesh("cpu")``, ``parallelize(model, mesh)``, ``shard_batch``, ``loss_and_backward``
(a pipelined plan of either model: every stage on its own mesh through the export's
``stage_forward``, the boundary activation sent forward and its gradient back; GPT-2 with its
embedding and LM head tied too, the shared weight's two gradients, first and last stage,
added by the export's ``sync_tied_grads``). Every parameter's placements are checked after
``parallelize``, and every rank's loss and full gradients are compared with one process on the
whole batch. The Llama cases need transformers and are left out without it.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from validation.dtensor_config import TinyGPTConfig, TinyLlamaConfig
from validation.dtensor_run import RTOL, Case, Model, variant

ATOL = 1e-5
NODES, RANKS_PER_NODE = 2, 2
# DGX-like links (NVLink inside, InfiniBand across): TAPS then splits the small models richly
FAST = {
    "intra": {"alpha_s": 1e-6, "bandwidth_Bps": 3e11},
    "inter": {"alpha_s": 5e-6, "bandwidth_Bps": 2.5e10},
}
@dataclass(frozen=True)
class OpsCheck:
    """One exported plan run on the ranks against the single-process reference."""

    label: str
    style: str  # the export's style ("per-op placements" or parallelize_module's)
    loss: float
    ref_loss: float
    max_abs_err: float  # over the loss and every gradient (inference: the logits)
    worst_param: str
    ok: bool
    grad_err: float = math.nan  # over the gradients alone (inf: one no rank computed)


def taps_case(label: str, model: Model, mode: str = "train") -> Case:
    """TAPS's plan (the engine's default search) of ``model`` on the 2 x 2 cluster."""
    from taps_core.models import build_graph, config_from_dict
    from taps_core.plan.report import plan_to_json
    from taps_core.search.planner import search
    from validation.calibrate import build_topology

    topo = build_topology(NODES, RANKS_PER_NODE, FAST)
    graph = build_graph(config_from_dict(model.engine_config(), name=f"tiny-{label}"))
    return Case(label, model, plan_to_json(search(graph, topo, mode=mode)))


def pipelined_case(label: str, model: Model) -> Case:
    """TAPS's pipeline of ``model`` on the 2 x 2 cluster: 2 stages (one host and one layer
    each), one micro-batch, every stage's per-op plan searched exactly
    (:func:`taps_core.search.pipeline.plan_setting`)."""
    from taps_core.models import build_graph, config_from_dict
    from taps_core.plan.report import plan_to_json
    from taps_core.search.pipeline import plan_setting
    from validation.calibrate import build_topology

    topo = build_topology(NODES, RANKS_PER_NODE, FAST)
    graph = build_graph(config_from_dict(model.engine_config(), name=f"tiny-{label}"))
    plan = plan_setting(graph, topo, p=NODES, m=1, split=(1,) * NODES)
    assert plan is not None
    return Case(label, model, plan_to_json(plan))


def _ways_per_op(name: str) -> tuple[dict, bool]:
    """The batch 2 ways inside nodes for attention, the sequence for norms and adds, the FFN
    for the MLP with its down projection handing on partial sums, the vocabulary at the ends."""
    tail = name.split(".", 1)[1] if name.startswith("L") else name
    if tail.startswith("attn."):
        return {"b": 2}, False
    if tail.startswith("mlp."):
        return {"f": 2}, tail == "mlp.down"
    if tail in ("embed", "lm_head"):
        return {"v": 2}, tail == "embed"
    return {"s": 2}, False


def _head_dim(name: str) -> tuple[dict, bool]:
    """Attention split on the head dim (inside the fused projection), the rest on heads / FFN
    with the contraction of the MLP's down projection split."""
    tail = name.split(".", 1)[1] if name.startswith("L") else name
    if tail.startswith("attn."):
        return {"d": 2}, tail == "attn.o"
    if tail.startswith("mlp."):
        return {"f": 2}, False
    return {"b": 2}, False


def vocab_split(plan: dict[str, Any], label: str,
                names: tuple[str, ...] = ("lm_head",)) -> dict[str, Any]:
    """Plan JSON ``plan`` with the ops ``names`` split over the vocabulary inside nodes instead
    (an embedding so split hands on partial sums). The LM head alone: in a pipeline the tied
    weight then lies one way on the first stage and another on the last, so
    ``sync_tied_grads`` adds whole gradients; with the embedding too, both stages hold the same
    vocabulary shards, uneven when the vocabulary does not divide."""
    def split(op: dict[str, Any]) -> dict[str, Any]:
        strategy: dict[str, Any] = {"inter": {}, "intra": {"v": RANKS_PER_NODE}}
        if op["name"] == "embed":
            strategy["partial"] = True
        return {**op, "strategy": strategy}

    ops = [split(op) if op["name"] in names else op for op in plan["ops"]]
    return {**plan, "label": label, "ops": ops}


def _megatron_sp(name: str) -> tuple[dict, bool]:
    """Megatron-LM with sequence parallelism: heads / FFN / vocabulary inside nodes, norms and
    residual adds on half the sequence, row-parallel ops and the embedding reduce-scattering."""
    tail = name.split(".", 1)[1] if name.startswith("L") else name
    if tail.startswith("attn."):
        return {"n": 2}, tail == "attn.o"
    if tail.startswith("mlp."):
        return {"f": 2}, tail == "mlp.down"
    if tail in ("embed", "lm_head", "loss"):
        return {"v": 2}, tail == "embed"
    return {"s": 2}, False


def has_transformers() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def cases(quick: bool = False) -> list[Case]:
    """TAPS's plans of the small GPT-2 and Llama (flat, inference and pipelined: GPT-2
    untied and tied), plus hand-made per-op plans of each; ``quick`` (the test command's
    slice) keeps TAPS's pipelined GPT-2s and Llama, the inference plans and TAPS's flat Llama
    (the hand-made plans and the flat GPT-2 run by the command; the fused head dim's
    placements are also checked without torch)."""
    tied = TinyGPTConfig(attn_implementation="eager")
    untied = replace(tied, tie_word_embeddings=False)
    base, base_untied = taps_case("gpt2-taps", tied), taps_case("gpt2-untied", untied)
    seq_across = {**base.plan, "label": "sequence-across", "ops": [
        {**op, "strategy": {"inter": {"s": 2} if op["name"] not in ("embed", "lm_head", "loss")
                            else {"b": 2}, "intra": {"b": 2}}} for op in base.plan["ops"]]}
    out = [
        base,
        *(() if quick else (
            Case("gpt2-ways-per-op", tied, variant(base.plan, "ways-per-op", _ways_per_op)),
            Case("gpt2-sequence-across", tied, seq_across),
            Case("gpt2-head-dim", untied, variant(base_untied.plan, "head-dim", _head_dim)),
        )),
    ]
    out.append(pipelined_case("gpt2-pipeline", untied))
    tied_pipe = pipelined_case("gpt2-tied-pipeline", tied)  # the tied gradient summed
    out.append(tied_pipe)
    if not quick:
        odd = replace(tied, vocab_size=129)  # split 2 ways: shards of 65 and 64 rows
        out += [Case("gpt2-tied-vocab-head", tied, vocab_split(tied_pipe.plan, "vocab-head")),
                Case("gpt2-tied-uneven-vocab", odd, vocab_split(
                    pipelined_case("gpt2-odd-vocab", odd).plan, "uneven-vocab",
                    ("embed", "lm_head")))]
    out.append(taps_case("gpt2-infer", tied, mode="infer"))
    if quick:  # the pipelined plan runs the flat TAPS plan's paths too, stage by stage
        out.remove(base)
    if has_transformers():
        llama = taps_case("llama-taps", TinyLlamaConfig())
        out += [llama, taps_case("llama-infer", TinyLlamaConfig(), mode="infer"),
                pipelined_case("llama-pipeline", TinyLlamaConfig())]
        if not quick:
            out.append(Case("llama-megatron-sp", llama.model,
                            variant(llama.plan, "megatron-sp", _megatron_sp)))
    return out


def export_ops(case: Case) -> tuple[str, dict[str, Any]]:
    """The per-op export (snippet, data) of ``case``, whatever parallelize_module could hold."""
    from taps_core.export.dtensor_ops import to_dtensor_ops
    from taps_core.export.plan_json import read_plan, resolve_workload

    with tempfile.TemporaryDirectory(prefix="taps-dtensor-ops-") as tmp:
        cfg_path = Path(tmp) / f"tiny-{case.family}.json"
        cfg_path.write_text(json.dumps(case.model.engine_config()))
        view = read_plan(case.plan)
        out = to_dtensor_ops(view, resolve_workload(view, model=str(cfg_path)), "asked for")
    assert out.python is not None
    return out.python, out.data


# ---- rank side ----------------------------------------------------------------------------------


def _rank(rank: int, world: int, port: int, jobs: list[dict[str, Any]], out_dir: str) -> None:
    """One rank: every exported snippet, one training step each; loss and gradients saved."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from validation.dtensor_model import batch

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    try:
        for job in jobs:
            cfg, model = build_model(job["family"], job["model"])
            ns: dict[str, Any] = {}
            exec(compile(job["python"], f"<dtensor export {job['label']}>", "exec"), ns)
            if len(ns["STAGES"]) > 1:
                loss, grads = _pipelined_step(ns, model, cfg, rank, world)
                torch.save({"loss": loss, "grads": grads},
                           Path(out_dir) / f"{job['label']}-rank{rank}.pt")
                continue
            mesh = ns["build_mesh"]("cpu")
            model = ns["parallelize"](model, mesh, src_data_rank=None)  # weights seeded alike
            _check_placed(ns, model, 0)
            ids, labels = ns["shard_batch"](mesh, *batch(cfg, 0))
            if job["mode"] == "infer":  # a forward pass: the logits, gathered
                with torch.no_grad():
                    logits = logits_of(model, ids).full_tensor()
                torch.save({"logits": logits}, Path(out_dir) / f"{job['label']}-rank{rank}.pt")
                continue
            loss = ns["loss_and_backward"](logits_of(model, ids), labels, mesh)
            grads = {n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad)
                     for n, p in model.named_parameters()}
            torch.save({"loss": float(loss.detach()), "grads": grads},
                       Path(out_dir) / f"{job['label']}-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _pipelined_step(ns: dict[str, Any], model: Any, cfg: Model, rank: int,
                    world: int) -> tuple[float, dict[str, Any]]:
    """One micro-batch through the exported stages (our GPT-2 or HF's Llama): each stage's
    ranks run the export's ``stage_forward`` on its own mesh with its placements; the boundary
    activation goes forward and its gradient back between paired ranks. Returns (loss,
    gradients of this stage's parameters)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Replicate

    from validation.dtensor_model import batch

    stages = ns["STAGES"]
    per = world // len(stages)
    # every rank builds every stage's mesh (its process groups are made collectively)
    meshes = [ns["build_mesh"]("cpu", stage=i, first_rank=i * per) for i in range(len(stages))]
    sync = ns.get("sync_tied_grads")  # a tied weight on the first and the last stage
    group = ns["tied_grad_group"]() if sync else None  # collective: every rank makes them
    me = rank // per
    mesh = meshes[me]
    model = ns["parallelize"](model, mesh, stage=me, src_data_rank=None)
    _check_placed(ns, model, me)
    ids, labels = ns["shard_batch"](mesh, *batch(cfg, 0), stage=me)
    shape = (cfg.batch_size, cfg.seq_length, model.lm_head.in_features)  # (b, s, hidden)
    if me == 0:
        x = ids
    else:
        got = torch.empty(shape)
        dist.recv(got, src=rank - per)
        got.requires_grad_(True)
        x = DTensor.from_local(got, mesh, [Replicate()] * mesh.ndim, run_check=False)
    x = ns["stage_forward"](model, x, stage=me)
    if me < len(stages) - 1:
        dist.send(x.full_tensor().detach().contiguous(), dst=rank + per)
        back = torch.empty(shape)
        dist.recv(back, src=rank + per)
        g = DTensor.from_local(back, mesh, [Replicate()] * mesh.ndim, run_check=False)
        x.backward(g.redistribute(mesh, x.placements))
        if me > 0:  # a middle stage hands its input's gradient on back
            dist.send(got.grad.contiguous(), dst=rank - per)
        loss = torch.empty(())
        dist.recv(loss, src=world - per + rank % per)
    else:
        loss = ns["loss_and_backward"](x, labels, mesh, stage=me)
        dist.send(got.grad.contiguous(), dst=rank - per)
        for r in range(rank % per, world - per, per):  # every earlier stage's pair learns it
            dist.send(loss.detach().contiguous(), dst=r)
    if sync:  # the embedding's and the LM head's gradients added, as the export says to
        sync(model, mesh, me, group)
    grads = {n: p.grad.full_tensor() for n, p in model.named_parameters() if p.grad is not None}
    return float(loss), grads


def _check_placed(ns: dict[str, Any], model: Any, stage: int) -> None:
    """AssertionError unless every parameter the export's ``STAGES[stage]`` places has those
    placements after ``parallelize`` (a tied weight by the name this stage gives it)."""
    want = ns["STAGES"][stage]["params"]
    wrong = [n for n, codes in want.items()
             if tuple(model.get_parameter(n).placements) != tuple(ns["_placements"](codes))]
    assert not wrong, f"stage {stage}: {wrong[0]} not placed as {want[wrong[0]]}"


def build_model(family: str, fields: dict[str, Any]) -> tuple[Model, Any]:
    """(config, model with seeded weights): our GPT-2 or Hugging Face's LlamaForCausalLM."""
    import torch

    if family == "gpt2":
        from validation.dtensor_model import build

        cfg = TinyGPTConfig(**fields)
        return cfg, build(cfg, 0)
    from transformers import LlamaConfig, LlamaForCausalLM

    llama = TinyLlamaConfig(**fields)
    torch.manual_seed(0)
    return llama, LlamaForCausalLM(LlamaConfig(**llama.hf_kwargs()))


def logits_of(model: Any, ids: Any) -> Any:
    """(b, s, vocab) logits of either model."""
    return model.logits(ids) if hasattr(model, "transformer") else model(input_ids=ids).logits


RANK_TIMEOUT_S = 600.0  # a rank that has not finished by then is stopped and reported


def _launch(jobs: list[dict[str, Any]], world: int, out_dir: str) -> None:
    """Start ``world`` rank processes (fresh interpreters: nothing of the caller's ``__main__``
    is re-run, as a spawned child would) and wait for all; RuntimeError with a rank's last
    lines when one fails."""
    import os
    import subprocess

    job_file = Path(out_dir) / "jobs.json"
    job_file.write_text(json.dumps(jobs))
    port = _free_port()
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "validation.dtensor_ops_run", "--rank", str(r), "--world",
             str(world), "--port", str(port), "--jobs", str(job_file), "--out", out_dir],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        for r in range(world)
    ]
    failed = []
    for r, p in enumerate(procs):
        try:
            _, err = p.communicate(timeout=RANK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError(f"rank {r} did not finish in {RANK_TIMEOUT_S:.0f} s") from None
        if p.returncode:
            failed.append((r, err.strip().splitlines()[-3:]))
    if failed:
        for q in procs:
            q.kill()
        r, tail = _cause(failed)
        raise RuntimeError(f"rank {r} failed: {' | '.join(tail)}")


def _cause(failed: list[tuple[int, list[str]]]) -> tuple[int, list[str]]:
    """The failed rank (rank, last lines) whose error is its own: the first one that did not
    merely lose a peer (when one rank fails, its peers' collectives fail after it)."""
    lost = ("Connection closed by peer", "Connection reset by peer")
    return next(((r, tail) for r, tail in failed
                 if not any(x in line for x in lost for line in tail)), failed[0])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(selected: list[Case] | None = None) -> list[OpsCheck]:
    """Export and run every case on 4 local gloo ranks; compare with one process."""
    import torch

    from validation.dtensor_model import batch

    todo = selected if selected is not None else cases()
    exported = {c.label: export_ops(c) for c in todo}
    jobs = [{"label": c.label, "family": c.family, "model": c.model.as_dict(),
             "mode": c.plan["mode"], "python": exported[c.label][0]} for c in todo]
    world = NODES * RANKS_PER_NODE
    checks = []
    with tempfile.TemporaryDirectory(prefix="taps-dtensor-ops-") as out_dir:
        _launch(jobs, world, out_dir)
        for c in todo:
            _, ref = build_model(c.family, c.model.as_dict())
            ids, labels = batch(c.model, 0)
            if c.plan["mode"] == "infer":
                checks.append(_forward_check(c, ref, ids, out_dir, world,
                                             exported[c.label][1]["style"]))
                continue
            logits = logits_of(ref, ids)
            ref_loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
            ref_loss.backward()
            ref_loss = ref_loss.detach()
            want = {n: p.grad for n, p in ref.named_parameters()}
            worst, grad_err, loss_err, loss = "", 0.0, 0.0, float("nan")
            seen: set[str] = set()
            for r in range(world):
                got = torch.load(Path(out_dir) / f"{c.label}-rank{r}.pt", weights_only=True)
                loss = got["loss"]
                loss_err = max(loss_err, abs(loss - float(ref_loss)))
                for n, g in got["grads"].items():
                    seen.add(n)
                    e = float((g - want[n]).abs().max())
                    if e > grad_err:
                        worst, grad_err = n, e
            missing = sorted(set(want) - seen)
            if missing:  # a gradient no rank computed: not run as planned
                worst, grad_err = f"no gradient for {missing[0]}", math.inf
            err = max(grad_err, loss_err)
            scale = max(float(g.abs().max()) for g in want.values())
            checks.append(OpsCheck(c.label, exported[c.label][1]["style"], loss, float(ref_loss),
                                   err, "loss" if loss_err > grad_err else worst,
                                   err <= ATOL + RTOL * scale, grad_err))
    return checks


def _forward_check(c: Case, ref: Any, ids: Any, out_dir: str, world: int, style: str
                   ) -> OpsCheck:
    """An inference plan: every rank's gathered logits against one process's."""
    import torch

    with torch.no_grad():
        want = logits_of(ref, ids)
    err = max(float((torch.load(Path(out_dir) / f"{c.label}-rank{r}.pt",
                                weights_only=True)["logits"] - want).abs().max())
              for r in range(world))
    scale = float(want.abs().max())
    return OpsCheck(c.label, style, float("nan"), float("nan"), err, "logits",
                    err <= ATOL + RTOL * scale)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m validation.dtensor_ops_run",
                                 description=__doc__.split("\n\n")[0])
    for flag in ("--rank", "--world", "--port"):  # a rank process (started by run())
        ap.add_argument(flag, type=int, help="internal: one rank of a run")
    ap.add_argument("--jobs", help="internal: the exported snippets to run (JSON)")
    ap.add_argument("--out", help="internal: where a rank saves its loss and gradients")
    args = ap.parse_args(argv)
    if args.rank is not None:
        _rank(args.rank, args.world, args.port, json.loads(Path(args.jobs).read_text()),
              args.out)
        return 0
    checks = run()
    for c in checks:
        what = f"inference: logits error {c.max_abs_err:.2e}" if math.isnan(c.loss) else (
            f"loss {c.loss:.6f} (one process {c.ref_loss:.6f}, error "
            f"{abs(c.loss - c.ref_loss):.2e}), max gradient error {c.grad_err:.2e}")
        print(f"{c.label:24} {what} (worst: {c.worst_param}): {'ok' if c.ok else 'MISMATCH'}")
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
