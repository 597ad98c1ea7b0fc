"""A PyTorch DTensor parallelize_module plan for Hugging Face modules (JSON or Python)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from taps_core.export.common import GPT_FAMILIES, Export, NotExpressibleError
from taps_core.export.deepspeed import _LAST, _R, _S
from taps_core.export.dtensor_ops import to_dtensor_ops
from taps_core.export.grid import Grid, check_family, grid, stage_groups
from taps_core.export.plan_json import OpSplit, PlanView, Workload, per_replica_micro, workload_note


@dataclass(frozen=True)
class _Names:
    """Hugging Face module names of one family ({i} = layer index)."""

    embed: str
    pos: str | None
    norm_f: str
    head: str
    block: str
    ln1: str
    ln2: str
    attn: str
    qkv: tuple[str, ...]
    o: str
    mlp: str
    up: tuple[str, ...]
    down: str
    attn_kwarg: str | None = None  # the attention module takes its input as this keyword


HF_NAMES = {
    "gpt2": _Names(
        "transformer.wte",
        "transformer.wpe",
        "transformer.ln_f",
        "lm_head",
        "transformer.h.{i}",
        "ln_1",
        "ln_2",
        "attn",
        ("attn.c_attn",),
        "attn.c_proj",
        "mlp",
        ("mlp.c_fc",),
        "mlp.c_proj",
    ),
    "llama": _Names(
        "model.embed_tokens",
        None,
        "model.norm",
        "lm_head",
        "model.layers.{i}",
        "input_layernorm",
        "post_attention_layernorm",
        "self_attn",
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        "self_attn.o_proj",
        "mlp",
        ("mlp.gate_proj", "mlp.up_proj"),
        "mlp.down_proj",
        attn_kwarg="hidden_states",
    ),
}
HF_NAMES["gpt3"] = HF_NAMES["gpt2"]  # GPT-3 is GPT-2's architecture at scale
HF_NAMES["mistral"] = HF_NAMES["llama"]


def _style(name: str, **kwargs: Any) -> dict[str, Any]:
    """One parallel style as data: ``{"style": "ColwiseParallel", "input_layouts": ...}``."""
    return {"style": name, **{k: v for k, v in kwargs.items() if v is not None}}


def _prepare(
    inp: str | None,
    want_in: str | None,
    out: str | None = None,
    want_out: str | None = None,
    kwarg: str | None = None,
) -> dict[str, Any] | None:
    """PrepareModuleInput / Output / InputOutput converting layouts (None when none differ)."""
    conv_in = inp is not None and inp != want_in
    conv_out = out is not None and out != want_out
    if not conv_in and not conv_out:
        return None
    args: dict[str, Any] = {}
    if conv_in:
        if kwarg:
            args |= {
                "input_kwarg_layouts": {kwarg: inp},
                "desired_input_kwarg_layouts": {kwarg: want_in},
            }
        else:
            args |= {"input_layouts": [inp], "desired_input_layouts": [want_in]}
    if conv_out:
        args |= {"output_layouts": [out], "desired_output_layouts": [want_out]}
    if conv_in and conv_out:
        return _style("PrepareModuleInputOutput", **args, use_local_input=True)
    if conv_in:
        return _style("PrepareModuleInput", **args, use_local_output=True)
    return _style("PrepareModuleOutput", **args)


def to_dtensor(view: PlanView, wl: Workload) -> Export:
    """A DTensor plan: parallelize_module styles on a dp x tp mesh where they hold the plan,
    else per-op placements on a mesh of prime factors (:mod:`taps_core.export.dtensor_ops`)."""
    if view.pipeline is not None and wl.family in GPT_FAMILIES:
        return to_dtensor_ops(view, wl, "they describe one pipeline stage's tensor plan")
    try:
        return to_dtensor_styles(view, wl)
    except NotExpressibleError as err:
        if wl.family not in GPT_FAMILIES:
            raise
        return to_dtensor_ops(view, wl, str(err))


def to_dtensor_styles(view: PlanView, wl: Workload) -> Export:
    """A DTensor plan: a dp x tp DeviceMesh and a parallel style per Hugging Face module name."""
    fw = "PyTorch DTensor (parallelize_module)"
    notes = [workload_note(wl)]
    groups = stage_groups(view)
    stage, ops, nodes, gpn = groups[0]
    if stage is not None:
        notes.append(
            f"pipelining is not expressed by parallelize_module: this is stage 0's "
            f"tensor plan (layers {stage.first}-{stage.last} of "
            f"{len(view.pipeline.stages)} stages; split the model with "
            "torch.distributed.pipelining)"
        )
    g = grid(ops, nodes, gpn, fw)
    if wl.family == "mlp":
        plan = _dtensor_mlp(g)
    else:
        check_family(wl, fw, (*GPT_FAMILIES,))
        plan = _dtensor_decoder(ops, g, HF_NAMES[wl.family], wl, fw, view.mode)
        split_seq = any(st["style"] == "SequenceParallel" for st in plan.styles.values())
        if split_seq and wl.family in ("llama", "mistral"):
            raise NotExpressibleError(
                f"{fw}'s SequenceParallel hands Hugging Face {wl.family} a local sequence, from "
                "which it derives rotary positions and the causal mask"
            )
    k, micro = per_replica_micro(view, wl, g.dp)
    names = {o.name for o in ops}
    tied = wl.family != "mlp" and wl.config.tie_word_embeddings and {"embed", "lm_head"} <= names
    if tied and g.split.get("embed") != g.split.get("lm_head"):  # inference only (else refused)
        tied = False
        notes.append(
            "embedding and LM head are split differently: their tied weight becomes two "
            "parameters with the same values (fine for inference)"
        )
    data: dict[str, Any] = {
        "format": "dtensor",
        "source": {
            "label": view.label,
            "model": view.model_name,
            "topology": view.topology,
            "mode": view.mode,
        },
        "mesh": {"dim_names": ["dp", "tp"], "shape": [g.dp, g.tp], "ranks": g.ranks()},
        "tp_plan": plan.styles,
        "loss_parallel": plan.loss_parallel,
        "tied": [["lm_head.weight", HF_NAMES[wl.family].embed + ".weight"]] if tied else [],
        "data_parallel": _dtensor_dp(view, g.dp),
        "micro_batches": k,
        "micro_batch_size_per_replica": micro,
        "recompute_layers": view.recomputed_layers,
        # layers whose attention core (softmax(QK^T)V) alone is recomputed (selective)
        "selective_recompute_layers": view.selective_layers,
        "notes": [],
    }
    if wl.family in ("gpt2", "gpt3"):
        notes.append(
            "GPT-2 module names with nn.Linear projections and c_attn's outputs laid "
            "out per head [heads, (q, k, v), head_dim] (HF's Conv1D stores [q | k | v]:"
            " convert it before a column split)"
        )
    if g.tp == 1:
        notes.append("no tensor splits: the plan is data parallel only (empty tp_plan)")
    data["notes"] = notes
    return Export("dtensor", json.dumps(data, indent=1), data, notes, python=dtensor_python(data))


@dataclass
class _TPPlan:
    styles: dict[str, dict[str, Any]] = field(default_factory=dict)
    loss_parallel: bool = False

    def put(self, name: str, style: dict[str, Any] | None) -> None:
        if style is not None:
            self.styles[name] = style


def _dtensor_mlp(g: Grid) -> _TPPlan:
    """fc1 column-parallel and fc2 row-parallel (or both whole) on a replicated input."""
    plan = _TPPlan()
    up, down = g.split.get("fc1"), g.split.get("fc2")
    if (up is None) != (down is None):
        raise NotExpressibleError(
            "ops fc1 and fc2 are not split alike: this export takes the MLP "
            "column then row parallel, or whole"
        )
    if up is not None:
        plan.put("fc1", _style("ColwiseParallel"))
        plan.put("fc2", _style("RowwiseParallel"))
    return plan


def _layout(g: Grid, name: str) -> str:
    """Residual-stream layout an op leaves: sequence-split or whole."""
    return _S if g.split.get(name) == "s" else _R


def _dtensor_decoder(
    ops: list[OpSplit], g: Grid, nm: _Names, wl: Workload, fw: str, view_mode: str
) -> _TPPlan:
    """Per-module styles for a GPT-2 / Llama module tree (see the module docstring)."""
    plan = _TPPlan()
    names = {o.name for o in ops}
    layers = sorted({o.layer for o in ops if o.layer is not None})
    split = g.split.get
    # the residual stream after the embeddings: the position add (GPT-2) or block 0's adds
    first_add = "embed_pos" if "embed_pos" in names else f"L{layers[0]}.add1" if layers else None
    stream = _layout(g, first_add) if first_add else _R
    if "embed" in names:
        if split("embed") == "v":
            plan.put(nm.embed, _style("RowwiseParallel", input_layouts=_R, output_layouts=stream))
        else:
            plan.put(nm.embed, _prepare(None, None, _R, stream))
        if nm.pos is not None and stream == _S:  # (s, m) position rows follow the sequence split
            plan.put(
                nm.pos,
                _style(
                    "PrepareModuleOutput", output_layouts=[_R], desired_output_layouts=["Shard(0)"]
                ),
            )
    for i in layers:
        blk = nm.block.format(i=i)
        here = _layout(g, f"L{i}.add1")
        for op in (f"L{i}.add2", f"L{i}.ln1", f"L{i}.ln2"):
            if op in names and _layout(g, op) != here:
                raise NotExpressibleError(
                    f"op {op} is {'sequence-split' if _layout(g, op) == _S else 'whole'} while "
                    f"the residual stream of layer {i} is not: {fw} needs one layout per block "
                    "between its norms and residual adds"
                )
        plan.put(blk, _prepare(stream, here))
        stream = here
        if here == _S:
            plan.put(f"{blk}.{nm.ln1}", _style("SequenceParallel"))
            plan.put(f"{blk}.{nm.ln2}", _style("SequenceParallel"))
        _dtensor_sublayer(
            plan,
            g,
            f"{blk}.{nm.attn}",
            [f"{blk}.{x}" for x in nm.qkv],
            f"{blk}.{nm.o}",
            [f"L{i}.attn.{x}" for x in ("q", "k", "v", "core")],
            f"L{i}.attn.o",
            here,
            nm.attn_kwarg,
            names,
            fw,
        )
        up_ops = [f"L{i}.mlp.{x}" for x in ("up", "gate", "gelu", "swiglu")]
        _dtensor_sublayer(
            plan,
            g,
            f"{blk}.{nm.mlp}",
            [f"{blk}.{x}" for x in nm.up],
            f"{blk}.{nm.down}",
            up_ops,
            f"L{i}.mlp.down",
            here,
            None,
            names,
            fw,
        )
    if "ln_f" in names:
        final = _layout(g, "ln_f")
        if final == _S and stream == _R:
            raise NotExpressibleError(
                f"op ln_f is sequence-split after a whole residual stream: {fw}'s "
                "SequenceParallel expects its input already split"
            )
        plan.put(nm.norm_f, _style("SequenceParallel") if final == _S else _prepare(stream, _R))
        stream = final
    if "lm_head" in names:
        plan.loss_parallel = split("loss") == "v"
        if split("lm_head") == "v":
            plan.put(
                nm.head,
                _style(
                    "ColwiseParallel",
                    input_layouts=stream,
                    output_layouts=_LAST if plan.loss_parallel else _R,
                    use_local_output=False if plan.loss_parallel else None,
                ),
            )
        elif plan.loss_parallel:
            raise NotExpressibleError(
                f"op loss is vocab-split but lm_head is whole: {fw}'s "
                "loss_parallel takes the logits from a column-parallel LM head"
            )
        else:
            plan.put(nm.head, _prepare(stream, _R))
        if (
            wl.config.tie_word_embeddings
            and "embed" in names
            and split("embed") != split("lm_head")
            and view_mode == "train"
        ):
            raise NotExpressibleError(
                f"op {'embed' if split('embed') else 'lm_head'} is vocab-split and the other "
                f"is not: {wl.family} ties their weight, and one DTensor parameter has one layout"
            )
    return plan


def _dtensor_sublayer(
    plan: _TPPlan,
    g: Grid,
    parent: str,
    cols: list[str],
    row: str,
    col_ops: list[str],
    row_op: str,
    stream: str,
    kwarg: str | None,
    names: set[str],
    fw: str,
) -> None:
    """Attention or MLP: column projections (+ core/activation), then the row projection.

    Three shapes: split then row-parallel (Megatron), split then gathered before a whole
    output projection, or all whole. ``stream`` is the residual layout around the sublayer.
    """
    present = [o for o in col_ops if o in names]
    kinds = {g.split.get(o) for o in present}
    if len(kinds) > 1:
        raise NotExpressibleError(
            f"ops {', '.join(present)} are not split alike: {fw} splits a "
            "sublayer's projections and its core together or not at all"
        )
    col_split = bool(present) and kinds != {None}
    row_split = g.split.get(row_op) is not None
    if row_split and not col_split:
        raise NotExpressibleError(
            f"op {row_op} is row-split after whole projections: the partial "
            f"sums need split inputs, which {fw} would have to slice first"
        )
    if col_split:  # gather the sequence-split stream once for all column projections
        plan.put(parent, _prepare(stream, _R, kwarg=kwarg))
        for name in cols:
            plan.put(name, _style("ColwiseParallel"))
        if row_split:
            plan.put(row, _style("RowwiseParallel", output_layouts=stream))
        else:  # heads / FFN gathered before a whole output projection
            plan.put(row, _prepare(_LAST, _R, _R, stream))
    elif stream == _S and kwarg is not None:
        raise NotExpressibleError(
            f"{parent} is whole inside a sequence-split block: its Hugging Face "
            "module returns a tuple, which PrepareModuleOutput cannot re-split"
        )
    else:
        plan.put(parent, _prepare(stream, _R, _R, stream, kwarg=kwarg))


def _dtensor_dp(view: PlanView, dp: int) -> dict[str, Any]:
    """How to run the data-parallel side over mesh["dp"] at the plan's ZeRO stage."""
    z = view.zero_stage
    how = {
        0: "replicate the module over mesh['dp'] (DDP): gradients all-reduced",
        1: "DDP over mesh['dp'] with torch.distributed.optim.ZeroRedundancyOptimizer "
        "(optimizer state sharded)",
        2: "torch.distributed.fsdp.fully_shard(model, mesh=mesh['dp'], "
        "reshard_after_forward=False): gradients and optimizer state sharded",
        3: "torch.distributed.fsdp.fully_shard(model, mesh=mesh['dp']): weights gathered "
        "before forward and backward",
    }[z]
    return {"size": dp, "zero_stage": z, "how": how if dp > 1 else "no data parallelism"}


def dtensor_python(data: dict[str, Any]) -> str:
    """The DTensor export as a runnable Python module (imports torch when run)."""
    used = sorted({s["style"] for s in data["tp_plan"].values()})
    src = data["source"]
    lines = [
        f'"""DTensor plan exported by TAPS Planner: plan {src["label"]!r} of {src["model"]} '
        f"on {src['topology']} ({src['mode']}).",
        "",
        f"Mesh dp {data['mesh']['shape'][0]} x tp {data['mesh']['shape'][1]}; data parallel: "
        f"{data['data_parallel']['how']}.",
        *(f"Note: {n}" for n in data["notes"]),
        '"""',
        "",
        "import contextlib",
        "",
        "import torch",
        "from torch.distributed.device_mesh import DeviceMesh",
        "from torch.distributed.tensor import DTensor, Replicate, Shard  # noqa: F401",
        "from torch.distributed.tensor.parallel import loss_parallel, parallelize_module",
    ]
    if used:
        lines.append(f"from torch.distributed.tensor.parallel import {', '.join(used)}")
    lines += [
        "",
        "# rows: data-parallel replicas; columns: the tensor-parallel ranks of each",
        f"MESH_RANKS = {data['mesh']['ranks']!r}",
        "# the logits stay vocabulary-sharded: compute the loss under loss_parallel()",
        f"LOSS_PARALLEL = {data['loss_parallel']!r}",
        f"RECOMPUTE_LAYERS = {data['recompute_layers']!r}",
        "# checkpoint only the attention core (softmax(QK^T)V) of these layers (selective)",
        f"SELECTIVE_RECOMPUTE_LAYERS = {data.get('selective_recompute_layers', [])!r}",
        "",
        "",
        'def build_mesh(device_type: str = "cuda") -> DeviceMesh:',
        '    """The dp x tp mesh (after torch.distributed.init_process_group)."""',
        '    return DeviceMesh(device_type, torch.tensor(MESH_RANKS), mesh_dim_names=("dp", "tp"))',
        "",
        "",
        "def tp_plan() -> dict:",
        '    """Parallel style per module name."""',
        "    plan = {}",
        *_python_plan_lines(data["tp_plan"]),
        "    return plan",
        "",
        "",
        "def parallelize(model: torch.nn.Module, mesh: DeviceMesh) -> torch.nn.Module:",
        '    """Apply the tensor-parallel plan over mesh["tp"] (the data-parallel side is '
        'separate)."""',
        '    parallelize_module(model, mesh["tp"], tp_plan())',
    ]
    for dst, srcname in data["tied"]:
        mod, attr = dst.rsplit(".", 1)
        lines.append(f"    model.{mod}.{attr} = model.{srcname}  # re-tie: one parameter")
    lines += [
        "    return model",
        "",
        "",
        "def loss_and_backward(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:",
        '    """Mean cross entropy of (b, s, vocab) logits and its backward; the loss value."""',
        "    with loss_parallel() if LOSS_PARALLEL else contextlib.nullcontext():",
        "        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())",
        "        loss.backward()",
        "    return loss.full_tensor() if isinstance(loss, DTensor) else loss",
        "",
    ]
    return "\n".join(lines)


def _python_style(style: dict[str, Any]) -> str:
    """``ColwiseParallel(input_layouts=Shard(1))`` from a style dict."""

    def val(v: Any) -> str:
        if isinstance(v, list):
            return "(" + "".join(f"{val(x)}, " for x in v) + ")"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k!r}: {val(x)}" for k, x in v.items()) + "}"
        return str(v)

    args = ", ".join(f"{k}={val(v)}" for k, v in style.items() if k != "style")
    return f"{style['style']}({args})"


def _python_plan_lines(styles: dict[str, dict[str, Any]]) -> list[str]:
    """Plan entries, identical layers folded into one loop per run of layers."""
    per_layer: dict[int, dict[str, str]] = {}
    lines: list[str] = []
    for name, style in styles.items():
        m = re.match(r"^(.*?\.)(\d+)((?:\..*)?)$", name)
        if m:
            per_layer.setdefault(int(m.group(2)), {})[m.group(1) + "{i}" + m.group(3)] = (
                _python_style(style)
            )
        else:
            lines.append(f"    plan[{name!r}] = {_python_style(style)}")
    runs: list[tuple[int, int, dict[str, str]]] = []
    for i in sorted(per_layer):
        if runs and runs[-1][1] == i - 1 and runs[-1][2] == per_layer[i]:
            runs[-1] = (runs[-1][0], i, runs[-1][2])
        else:
            runs.append((i, i, per_layer[i]))
    for a, b, entries in runs:
        lines.append(f"    for i in range({a}, {b + 1}):")
        lines += [f"        plan[f{k!r}] = {v}" for k, v in entries.items()]
    return lines


