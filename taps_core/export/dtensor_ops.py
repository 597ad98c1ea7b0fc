"""Any per-op plan as DTensor placements: one DeviceMesh, a layout per parameter and per module
input, and a ``parallelize`` that applies them to a Hugging Face module tree.

``parallelize_module``'s styles (:mod:`taps_core.export.dtensor`) hold one data-parallel size and
one tensor split per sublayer; a TAPS plan may split every op its own way (the batch 8 ways in one
op and 4 in the next, the FFN inside hosts and the sequence across them). DTensor itself holds any
such layout: the mesh has one dimension per prime factor of the hosts and of the GPUs per host
(2 x 8 GPUs: ``inter0`` 2 x ``intra0..2`` 2 x 2 x 2), so every way an op splits a level is a set
of mesh dimensions, and each tensor's placement per mesh dimension is ``Shard(dim)`` of the
letter assigned to it or ``Replicate()``.

What the export fixes, and what it leaves to DTensor:

- every parameter is distributed with its op's placements (biases and norms too);
- every module that is one op (projections, embeddings, norms, the LM head) redistributes its
  input to the op's layout in a forward pre-hook: where the plan changes layout between ops the
  hook does the all-gather, reduce-scatter or all-to-all, and a partial sum (a split
  contraction) is reduced there;
- ops without a module of their own (attention core, activation, residual adds) take the layout
  DTensor's sharding propagation derives from their inputs;
- the batch and labels enter with the embedding's and the loss's layouts; the loss gathers a
  split vocabulary (``loss_parallel`` is for one-dimensional meshes);
- a pipeline that holds a tied embedding / LM head weight on its first and last stage gets
  ``sync_tied_grads``, which adds the two stages' gradients of it (the user calls it after the
  backward, as Megatron's embedding group does).

Replicated parameters over the batch's mesh dimensions get their gradients reduced by DTensor
(the data-parallel sync). A letter that is not the outermost of a fused dimension (the head dim
``d`` inside ``n x d`` features) cannot be a DTensor shard: that parameter stays replicated on
that mesh dimension and the export says so. ZeRO and recomputation are named in the notes, not
applied (``fully_shard`` / ``checkpoint`` wrap the parallelized model).
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

from taps_core.export.common import GPT_FAMILIES, Export, NotExpressibleError
from taps_core.export.grid import stage_groups
from taps_core.export.plan_json import OpSplit, PlanView, Workload, workload_note

REPLICATE = "R"


@dataclass(frozen=True)
class _Param:
    """A module parameter: its attribute and, per tensor dim, the engine letters it holds
    (outermost first; ``3`` is Q/K/V inside GPT-2's fused projection, never split)."""

    attr: str
    dims: tuple[str, ...]


@dataclass(frozen=True)
class _Module:
    """A module that is one op: its name ({i}: layer), the op, its parameters, and the dims of
    its first positional input (None: made inside the model, like position ids)."""

    path: str
    op: str
    params: tuple[_Param, ...]
    input: tuple[str, ...] | None


def _norm(path: str, op: str, bias: bool) -> _Module:
    params = (_Param("weight", ("m",)), *((_Param("bias", ("m",)),) if bias else ()))
    return _Module(path, op, params, ("b", "s", "m"))


def _linear(path: str, op: str, out: str, inp: str, bias: bool, x: tuple[str, ...]) -> _Module:
    params = (_Param("weight", (out, inp)), *((_Param("bias", (out,)),) if bias else ()))
    return _Module(path, op, params, x)


_BSM, _BSF, _BSND = ("b", "s", "m"), ("b", "s", "f"), ("b", "s", "nd")
_HEAD = _Module("lm_head", "lm_head", (_Param("weight", ("v", "m")),), _BSM)

# Hugging Face module names (GPT-2 with nn.Linear projections and a head-major fused c_attn,
# as the parallelize_module export documents; Llama / Mistral as in transformers)
_GPT2 = (
    _Module("transformer.wte", "embed", (_Param("weight", ("v", "m")),), ("b", "s")),
    _Module("transformer.wpe", "embed_pos", (_Param("weight", ("p", "m")),), None),
    _norm("transformer.h.{i}.ln_1", "L{i}.ln1", True),
    _linear("transformer.h.{i}.attn.c_attn", "L{i}.attn.q", "n3d", "m", True, _BSM),
    _linear("transformer.h.{i}.attn.c_proj", "L{i}.attn.o", "m", "nd", True, _BSND),
    _norm("transformer.h.{i}.ln_2", "L{i}.ln2", True),
    _linear("transformer.h.{i}.mlp.c_fc", "L{i}.mlp.up", "f", "m", True, _BSM),
    _linear("transformer.h.{i}.mlp.c_proj", "L{i}.mlp.down", "m", "f", True, _BSF),
    _norm("transformer.ln_f", "ln_f", True),
    _HEAD,
)
_LLAMA = (
    _Module("model.embed_tokens", "embed", (_Param("weight", ("v", "m")),), ("b", "s")),
    _norm("model.layers.{i}.input_layernorm", "L{i}.ln1", False),
    *(
        _linear(f"model.layers.{{i}}.self_attn.{x}_proj", f"L{{i}}.attn.{x}", "nd", "m", False,
                _BSM)
        for x in ("q", "k", "v")
    ),
    _linear("model.layers.{i}.self_attn.o_proj", "L{i}.attn.o", "m", "nd", False, _BSND),
    _norm("model.layers.{i}.post_attention_layernorm", "L{i}.ln2", False),
    _linear("model.layers.{i}.mlp.gate_proj", "L{i}.mlp.gate", "f", "m", False, _BSM),
    _linear("model.layers.{i}.mlp.up_proj", "L{i}.mlp.up", "f", "m", False, _BSM),
    _linear("model.layers.{i}.mlp.down_proj", "L{i}.mlp.down", "m", "f", False, _BSF),
    _norm("model.norm", "ln_f", False),
    _HEAD,
)
MODULES = {"gpt2": _GPT2, "gpt3": _GPT2, "llama": _LLAMA, "mistral": _LLAMA}


def prime_factors(n: int) -> list[int]:
    """``n``'s prime factors, smallest first (1 has none)."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def mesh_dims(
    nodes: int, gpus_per_node: int, ops: list[OpSplit] | tuple[OpSplit, ...] = ()
) -> list[tuple[str, int]]:
    """(name, size) of each mesh dimension: per level (hosts, then GPUs per host), the ways of
    the attention's split letters, one dimension each, when every op's splits of that level are
    products of those dimensions (a head split on one dimension views into heads); else the
    level's prime factors. Ranks are node-major: ``arange(world).reshape(sizes)``."""
    out: list[tuple[str, int]] = []
    for level, size in (("inter", nodes), ("intra", gpus_per_node)):
        sizes = prime_factors(size)
        for cand in _attention_factors(ops, level, size):
            if all(_assign(list(range(len(cand))), cand, split) is not None
                   for split in (getattr(o, level) for o in ops)):
                sizes = cand
                break
        out += [(f"{level}{i}", n) for i, n in enumerate(sizes)]
    return out


def _attention_factors(ops: list[OpSplit] | tuple[OpSplit, ...], level: str,
                       size: int) -> list[list[int]]:
    """Candidate dimension sizes of one level: each attention projection's ways per letter,
    the rest of the level as one more dimension."""
    found = []
    for o in ops:
        if ".attn." not in o.name:
            continue
        ways = [w for w in getattr(o, level).values() if w > 1]
        used = math.prod(ways)
        cand = ways + ([size // used] if size // used > 1 else [])
        if cand and cand not in found and size % used == 0:
            found.append(cand)
    return found


def _assign(
    free: list[int], sizes: list[int], split: dict[str, int]
) -> dict[str, list[int]] | None:
    """Dimensions (indices into ``sizes``, taken from ``free``) whose sizes multiply to each
    letter's ways, in the split's order; None when some letter finds none."""
    left = list(free)
    out: dict[str, list[int]] = {}
    for letter, ways in split.items():
        if ways == 1:
            continue
        pick = next((c for k in range(1, len(left) + 1)
                     for c in itertools.combinations(left, k)
                     if math.prod(sizes[i] for i in c) == ways), None)
        if pick is None:
            return None
        out[letter] = list(pick)
        left = [i for i in left if i not in pick]
    return out


def letter_dims(op: OpSplit, dims: list[tuple[str, int]]) -> dict[str, list[int]]:
    """Mesh dimensions each split letter of ``op`` takes: per level, in the strategy's order,
    dimensions of that level whose sizes multiply to the letter's ways."""
    out: dict[str, list[int]] = {}
    sizes = [n for _, n in dims]
    for level, split in (("inter", op.inter), ("intra", op.intra)):
        free = [i for i, (name, _) in enumerate(dims) if name.startswith(level)]
        got = _assign(free, sizes, split)
        if got is None:
            raise NotExpressibleError(
                f"op {op.name} splits {level} {dict(split)}: not a product of the "
                f"{level} level's mesh dims {[sizes[i] for i in free]}"
            )
        for letter, picked in got.items():
            out.setdefault(letter, []).extend(picked)
    return out


def placements(
    tensor: tuple[str, ...], taken: dict[str, list[int]], ndim: int
) -> tuple[list[str], list[str]]:
    """(placement per mesh dimension, letters left replicated) of a tensor whose dims hold
    ``tensor``'s letters: ``S(j)`` where the dimension's letter is the outermost of dim j."""
    out = [REPLICATE] * ndim
    lost = []
    for letter, mesh in taken.items():
        j = next((j for j, d in enumerate(tensor) if d[0] == letter), None)
        if j is None:
            if any(letter in d for d in tensor):
                lost.append(letter)  # an inner letter of a fused dim: not a DTensor shard
            continue
        if len(tensor[j]) > 1 and len(mesh) > 1:
            # a fused dim (heads x head dim) sharded twice is a strided shard that DTensor
            # cannot view into heads: shard it on the first mesh dim only
            lost.append(letter)
            mesh = mesh[:1]
        for k in mesh:
            out[k] = f"S({j})"
    return out, lost


def to_dtensor_ops(view: PlanView, wl: Workload, why_not_styles: str) -> Export:
    """The per-op DTensor export of ``view`` (every stage of a pipeline on its own mesh)."""
    if wl.family not in MODULES:
        raise NotExpressibleError(
            f"the per-op DTensor export knows the module trees of {', '.join(GPT_FAMILIES)}, "
            f"not {wl.family}"
        )
    if view.pipeline is not None:
        _check_stage_ends(view)
    notes = [workload_note(wl), f"parallelize_module's styles cannot hold this plan "
             f"({why_not_styles}): every parameter and module input is placed per op instead"]
    stages = []
    tied_across = _tied_across_stages(view, wl)
    readers = _residual_readers(wl)  # of the whole model: one graph for every stage
    for stage, ops, nodes, gpn in stage_groups(view):
        dims = mesh_dims(nodes, gpn, ops)
        params, inputs, outputs, lost = _place(ops, wl, dims, readers)
        by_name = {o.name: o for o in ops}
        entry: dict[str, Any] = {
            "mesh": {"dim_names": [n for n, _ in dims], "shape": [s for _, s in dims]},
            "params": params,
            "inputs": inputs,
            "outputs": outputs,
        }
        if "embed" in by_name:
            taken = letter_dims(by_name["embed"], dims)
            entry["input_ids"] = placements(("b", "s"), taken, len(dims))[0]
        if "loss" in by_name:
            taken = letter_dims(by_name["loss"], dims)
            entry["labels"] = placements(("b", "s"), taken, len(dims))[0]
            entry["logits"] = placements(("b", "s", "x"), taken, len(dims))[0]  # v gathered
            if "v" in taken:
                notes.append("the loss gathers the vocabulary the plan splits (DTensor's "
                             "loss_parallel takes a one-dimensional mesh)")
        if stage is not None:
            entry["stage"] = {"index": stage.index, "layers": [stage.first, stage.last],
                              "nodes": nodes}
        stages.append(entry)
        notes += [f"{name}: {', '.join(sorted(set(letters)))} left replicated on some mesh "
                  "dims (an inner letter of a fused dimension, or a fused dimension split over "
                  "two mesh dims, is not a DTensor shard that views into heads)"
                  for name, letters in lost.items()]
    if view.pipeline is not None:
        notes.append(f"{len(stages)} pipeline stages: parallelize(model, mesh, stage=i) places "
                     "stage i's layers on its own mesh of its hosts and stage_forward(model, x, "
                     "stage=i) runs them (the first stage embeds, the last one gives logits); "
                     "schedule the stages with torch.distributed.pipelining")
        notes += _tied_notes(stages, tied_across)
    if view.zero_stage:
        notes.append(f"ZeRO-{view.zero_stage} is not applied by these placements: wrap the "
                     "model with torch.distributed.fsdp.fully_shard over the batch's mesh dims")
    if view.recomputed_layers:
        notes.append(f"recompute layers {view.recomputed_layers} with "
                     "torch.utils.checkpoint (activation checkpointing)")
    if view.selective_layers:
        notes.append(f"recompute the attention core (softmax(QK^T)V) of layers "
                     f"{view.selective_layers} with torch.utils.checkpoint (selective)")
    data: dict[str, Any] = {
        "format": "dtensor",
        "style": "per-op placements",
        "family": wl.family,
        "source": {"label": view.label, "model": view.model_name, "topology": view.topology,
                   "mode": view.mode},
        "stages": stages,
        "micro_batches": view.pipeline.microbatches if view.pipeline else view.microbatches,
        "tied_across_stages": tied_across,
        "notes": notes,
    }
    return Export("dtensor", json.dumps(data, indent=1), data, notes,
                  python=dtensor_ops_python(data))


def _place(
    ops: list[OpSplit], wl: Workload, dims: list[tuple[str, int]], readers: dict[str, str]
) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]],
           dict[str, list[str]]]:
    """(placements per parameter name, per module input, per module output that hands on a
    partial sum, letters left replicated per parameter); ``readers`` from
    :func:`_residual_readers`."""
    by_name = {o.name: o for o in ops}
    layers = sorted({o.layer for o in ops if o.layer is not None})
    embed = _embed_path(wl.family)
    params: dict[str, list[str]] = {}
    inputs: dict[str, list[str]] = {}
    outputs: dict[str, list[str]] = {}
    lost: dict[str, list[str]] = {}
    tied = bool(wl.config.tie_word_embeddings)
    for mod in MODULES[wl.family]:
        for i in layers if "{i}" in mod.op else [None]:
            op = by_name.get(mod.op.format(i=i))
            if op is None:
                continue
            path = mod.path.format(i=i, embed=embed)
            taken = letter_dims(op, dims)
            for p in mod.params:
                name = f"{path}.{p.attr}"
                if tied and name == "lm_head.weight" and f"{embed}.weight" in params:
                    continue  # one parameter: the embedding's placement holds
                params[name], gone = placements(p.dims, taken, len(dims))
                if gone:
                    lost[name] = gone
            if mod.input is not None:
                inputs[path] = placements(mod.input, taken, len(dims))[0]
            reader = by_name.get(readers.get(op.name, ""))
            if op.partial and reader is not None:  # partial sums reduced into the reader's split
                outputs[path] = placements(_BSM, letter_dims(reader, dims), len(dims))[0]
    return params, inputs, outputs, lost


def _embed_path(family: str) -> str:
    """The token embedding's module name in ``family``'s module tree."""
    return next(m.path for m in MODULES[family] if m.op == "embed")


def _tied_across_stages(view: PlanView, wl: Workload) -> list[list[str]]:
    """``[[first stage's name, last stage's name]]`` of the tied embedding / LM head weight
    when a pipeline puts its two readers on different stages (their gradients must then be
    added across the stages), else ``[]`` (one parameter on one mesh: autograd adds them)."""
    if view.pipeline is None or not wl.config.tie_word_embeddings:
        return []
    return [[f"{_embed_path(wl.family)}.weight", f"{_HEAD.path}.weight"]]


def _tied_notes(stages: list[dict[str, Any]], tied: list[list[str]]) -> list[str]:
    """The notes on a tied weight held by the first and the last stage (``tied`` from
    :func:`_tied_across_stages`; none without one). Refuses stages of different GPU counts:
    the gradient sum pairs GPU k of one with GPU k of the other (Megatron's embedding group)."""
    if not tied:
        return []
    first, last = stages[0], stages[-1]
    sizes = [math.prod(st["mesh"]["shape"]) for st in (first, last)]
    if sizes[0] != sizes[1]:
        raise NotExpressibleError(
            f"the tied embedding and LM head weight is on a first stage of {sizes[0]} GPUs and "
            f"a last stage of {sizes[1]}: the per-op DTensor export adds its two gradients "
            "between GPU k of each, which needs stages of the same size"
        )
    notes = ["the tied embedding and LM head weight is on the first and the last stage: add "
             "its two gradients across them before the optimizer step (sync_tied_grads(model, "
             "mesh, stage, group) after the backward, with group = tied_grad_group() made once "
             "on every rank)"]
    (head, tail), = tied
    if first["mesh"] != last["mesh"] or first["params"].get(head) != last["params"].get(tail):
        notes.append(f"the first stage holds {head} as {first['params'].get(head)}, the last "
                     f"as {last['params'].get(tail)}: sync_tied_grads all-reduces the whole "
                     "gradient, more than the shard the plan's tied_sync_bytes prices")
    return notes


_FIRST_STAGE_OPS = frozenset({"embed", "embed_pos"})
_LAST_STAGE_OPS = frozenset({"ln_f", "lm_head", "loss"})


def _check_stage_ends(view: PlanView) -> None:
    """Refuse a pipeline whose stages ``stage_forward`` cannot run as planned: the embeddings
    on the first stage, the final norm, LM head and loss on the last one, and every layer's ops
    on the stage that holds that layer (its ``layers`` range)."""
    stages = view.pipeline.stages
    for op in view.ops:
        if op.name in _FIRST_STAGE_OPS:
            want, where = 0, "the first stage"
        elif op.name in _LAST_STAGE_OPS:
            want, where = len(stages) - 1, "the last stage"
        elif op.layer is not None:
            want = next((st.index for st in stages if st.holds(op.layer)), None)
            where = f"the stage that holds layer {op.layer}"
        else:
            continue
        if op.stage != want:
            raise NotExpressibleError(
                f"op {op.name} is on pipeline stage {op.stage}, not {where}: the per-op DTensor "
                "export runs a stage as the embedding, a range of whole layers, then the final "
                "norm and LM head"
            )


def _residual_readers(wl: Workload) -> dict[str, str]:
    """op -> the op that reads its output (the residual add where there is one): where a
    partial sum is reduced to."""
    from taps_core.models import build_graph

    graph = build_graph(wl.config)
    ops = graph.op_by_name
    out: dict[str, str] = {}
    for op in graph.ops:
        readers = graph.consumers.get(op.output, ())
        adds = [r for r in readers if ops[r].kind == "elementwise"]
        if readers:
            out[op.name] = (adds or list(readers))[0]
    return out


def dtensor_ops_python(data: dict[str, Any]) -> str:
    """The per-op export as a runnable Python module (imports torch when run)."""
    src = data["source"]
    stages = data["stages"]
    lines = [
        f'"""DTensor placements per op exported by TAPS Planner: plan {src["label"]!r} of '
        f"{src['model']} on {src['topology']} ({src['mode']}).",
        "",
        *(f"Note: {n}" for n in data["notes"]),
        '"""',
        "",
        "import math",
        "",
        "import torch",
        "from torch.distributed.device_mesh import DeviceMesh",
        "from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor",
        "",
        "# per pipeline stage (one entry without stages): mesh, parameter and module-input",
        "# placements per mesh dimension ('R' replicated, 'S(j)' sharded on tensor dim j), and",
        "# for a pipeline the stage's layers and hosts",
        f"STAGES = {json.dumps(stages)}",
        "",
        "",
        "def _placement(code: str):",
        '    return Replicate() if code == "R" else Shard(int(code[2:-1]))',
        "",
        "",
        "def _placements(codes: list) -> list:",
        "    return [_placement(c) for c in codes]",
        "",
        "",
        "def mesh_size(stage: int = 0) -> int:",
        '    """GPUs of the stage\'s mesh."""',
        '    return math.prod(STAGES[stage]["mesh"]["shape"])',
        "",
        "",
        'def build_mesh(device_type: str = "cuda", stage: int = 0, first_rank: int = 0):',
        '    """The stage\'s mesh over ranks first_rank.. (after init_process_group)."""',
        "    m = STAGES[stage][\"mesh\"]",
        "    ranks = torch.arange(first_rank, first_rank + mesh_size(stage)).reshape(m[\"shape\"])",
        '    return DeviceMesh(device_type, ranks, mesh_dim_names=tuple(m["dim_names"]))',
        "",
        "",
        "def _as_dtensor(x, mesh):",
        "    if isinstance(x, torch.Tensor) and not isinstance(x, DTensor):",
        "        return DTensor.from_local(x, mesh, [Replicate()] * mesh.ndim, run_check=False)",
        "    return x",
        "",
        "",
        "def parallelize(model: torch.nn.Module, mesh: DeviceMesh, stage: int = 0,",
        "                src_data_rank: int | None = 0):",
        '    """Place every parameter and buffer; redistribute each planned module\'s input.',
        "    src_data_rank: the rank whose weights are scattered (None: every rank already holds",
        '    the same weights, e.g. seeded alike, and keeps its own shard: no communication)."""',
        "    st = STAGES[stage]",
        "    names = {}  # every name of a parameter: the stage places a tied one by either",
        "    for full, p in model.named_parameters(remove_duplicate=False):",
        "        names.setdefault(id(p), []).append(full)",
        "    done = {}  # a tied parameter (LM head = embedding) stays one parameter",
        "    for mod in model.modules():",
        "        for attr, p in list(mod.named_parameters(recurse=False)):",
        "            if id(p) not in done:",
        '                mine = [n for n in names[id(p)] if n in st["params"]]',
        '                codes = st["params"][mine[0]] if mine else ["R"] * mesh.ndim',
        "                dp = distribute_tensor(p.data, mesh, _placements(codes),",
        "                                       src_data_rank=src_data_rank)",
        "                done[id(p)] = (p, torch.nn.Parameter(dp, p.requires_grad))",
        "            mod.register_parameter(attr, done[id(p)][1])  # (p kept: ids stay unique)",
        "        for attr, b in list(mod.named_buffers(recurse=False)):",
        "            mod.register_buffer(attr, _as_dtensor(b, mesh))",
        "",
        "    def wrap(mod, args, kwargs):  # plain tensors made inside the model: replicated",
        "        return (tuple(_as_dtensor(a, mesh) for a in args),",
        "                {k: _as_dtensor(v, mesh) for k, v in kwargs.items()})",
        "",
        "    for mod_name, mod in model.named_modules():",
        "        mod.register_forward_pre_hook(wrap, with_kwargs=True)",
        '        want = st["inputs"].get(mod_name)',
        "        if want is not None:",
        "            def place(mod, args, want=_placements(want)):",
        "                x = _as_dtensor(args[0], mesh)",
        "                return (x.redistribute(mesh, want), *args[1:])",
        "",
        "            mod.register_forward_pre_hook(place)",
        '        done_as = st["outputs"].get(mod_name)',
        "        if done_as is not None:  # partial sums reduced into the next op's split",
        "            def reduce(mod, args, out, want=_placements(done_as)):",
        "                return out.redistribute(mesh, want)",
        "",
        "            mod.register_forward_hook(reduce)",
        "    return model",
        "",
        "",
        "def shard_batch(mesh: DeviceMesh, input_ids: torch.Tensor, labels: torch.Tensor,",
        "                stage: int = 0):",
        '    """The whole batch (the same on every rank) as DTensors in the plan\'s layouts."""',
        "    st = STAGES[stage]  # (a middle stage takes neither; the first one the ids, the last",
        "    # one the labels: None for what the stage does not take)",
        '    ids = distribute_tensor(input_ids, mesh, _placements(st["input_ids"])) if "input_ids" '
        "in st else None",
        '    lab = distribute_tensor(labels, mesh, _placements(st["labels"])) if "labels" in st '
        "else None",
        "    return ids, lab",
        "",
        "",
        "def loss_and_backward(logits, labels, mesh: DeviceMesh, stage: int = -1):",
        '    """Mean cross entropy of (b, s, vocab) logits and its backward; the loss value."""',
        '    logits = logits.redistribute(mesh, _placements(STAGES[stage]["logits"]))',
        "    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())",
        "    loss.backward()",
        "    return loss.full_tensor()",
        "",
    ]
    if any("stage" in st for st in stages):
        lines += _stage_forward_lines(data["family"])
    if data["tied_across_stages"]:
        lines += _tied_grad_lines(data["tied_across_stages"])
    return "\n".join(lines)


def _stage_forward_lines(family: str) -> list[str]:
    """``stage_forward(model, x, stage)`` of a pipelined export: one stage's part of the
    forward on the Hugging Face module tree of ``family``. Llama's later stages get no token
    ids, so their rotary positions and causal mask (Mistral's sliding window too) are made here
    for the whole sequence (a DTensor's shape is the global one), with the calls
    LlamaModel.forward / MistralModel.forward make."""
    head = [
        "",
        "def stage_forward(model: torch.nn.Module, x, stage: int = 0):",
        "    \"\"\"Stage `stage`'s part of the forward, after parallelize(model, mesh, stage):",
        "    the first stage embeds the token ids x (from shard_batch), a later one takes the",
        "    previous stage's (b, s, hidden) output x as a DTensor on its own mesh; then the",
        "    stage's layers; the last stage returns the logits of the final norm and LM",
        "    head.\"\"\"",
        '    first, last = STAGES[stage]["stage"]["layers"]',
        "    layers = range(first, last + 1) if first is not None else ()",
    ]
    if family in ("llama", "mistral"):
        body = [
            "    from transformers import masking_utils",
            "",
            "    inner = model.model",
            "    if stage == 0:",
            "        x = inner.embed_tokens(x)",
            "    positions = torch.arange(x.shape[1]).unsqueeze(0)  # the whole sequence",
            "    # Mistral with a sliding window masks as MistralModel does",
            '    windowed = getattr(model.config, "sliding_window", None) is not None',
            "    make_mask = (masking_utils.create_sliding_window_causal_mask if windowed",
            "                 else masking_utils.create_causal_mask)",
            "    mask = make_mask(config=model.config, inputs_embeds=x, attention_mask=None,",
            "                     cache=None, position_ids=positions)",
            "    rotary = inner.rotary_emb(x, position_ids=positions)",
            "    for i in layers:",
            "        x = inner.layers[i](x, attention_mask=mask, position_embeddings=rotary,",
            "                            position_ids=positions)",
        ]
        tail = "inner.norm"
    else:  # GPT-2 / GPT-3 blocks (causal inside) take the hidden states alone
        body = [
            "    t = model.transformer",
            "    if stage == 0:",
            "        x = t.wte(x) + t.wpe(torch.arange(x.shape[1]))",
            "    for i in layers:",
            "        x = t.h[i](x)",
        ]
        tail = "t.ln_f"
    return [*head, *body, "    if stage == len(STAGES) - 1:",
            f"        x = model.lm_head({tail}(x))", "    return x", ""]


def _tied_grad_lines(tied: list[list[str]]) -> list[str]:
    """``tied_grad_group()`` and ``sync_tied_grads(...)`` of a pipelined export whose tied
    embedding / LM head weight is on the first and the last stage: GPU k of the first stage
    and GPU k of the last add their gradients of it (Megatron's embedding group). Where both
    stages place the weight alike, each pair all-reduces its own shard, the bytes the engine
    prices (``tied_sync_bytes``); otherwise the whole gradient (more than it prices)."""
    return [
        "",
        "# a weight the first and the last stage share (the tied embedding and LM head), named",
        "# as each of them holds it: its gradient is the sum of the two stages' gradients",
        f"TIED = {json.dumps(tied)}",
        "",
        "",
        "def tied_grad_group(first_ranks: list | None = None):",
        "    \"\"\"This rank's process group with the rank at the same mesh position on the other",
        "    end stage (None on a middle stage). Call it once on every rank, after",
        "    init_process_group (new_group is collective); first_ranks: each stage's first rank",
        "    (default: the stages one after another, as their meshes are built).\"\"\"",
        "    import torch.distributed as dist",
        "",
        "    starts = first_ranks or [sum(mesh_size(i) for i in range(s))",
        "                             for s in range(len(STAGES))]",
        "    mine = None",
        "    for k in range(mesh_size(0)):",
        "        pair = [starts[0] + k, starts[-1] + k]",
        "        group = dist.new_group(pair)",
        "        if dist.get_rank() in pair:",
        "            mine = group",
        "    return mine",
        "",
        "",
        "def sync_tied_grads(model: torch.nn.Module, mesh: DeviceMesh, stage: int, group) -> None:",
        "    \"\"\"After the backward, before the optimizer step: the tied weight's gradient",
        "    becomes the sum of the first stage's (embedding) and the last stage's (LM head), on",
        "    both. Each GPU all-reduces its shard with its peer when both stages place the weight",
        "    alike, else the whole gradient (then takes its shard again). Nothing on a middle",
        "    stage.\"\"\"",
        "    import torch.distributed as dist",
        "",
        "    last = len(STAGES) - 1",
        "    if group is None or stage not in (0, last):",
        "        return",
        "    for names in TIED:",
        "        p = model.get_parameter(names[0 if stage == 0 else 1])",
        "        grad = p.grad.redistribute(mesh, p.placements)",
        '        first, end = STAGES[0], STAGES[last]',
        '        alike = (first["mesh"] == end["mesh"]',
        '                 and first["params"].get(names[0]) == end["params"].get(names[1]))',
        "        if alike:",
        "            local = grad.to_local().clone()",
        "            dist.all_reduce(local, group=group)",
        "            p.grad = DTensor.from_local(local, mesh, p.placements, shape=grad.shape,",
        "                                        stride=grad.stride())  # shards may be uneven",
        "        else:",
        "            whole = grad.full_tensor()",
        "            dist.all_reduce(whole, group=group)",
        "            p.grad = distribute_tensor(whole, mesh, p.placements, src_data_rank=None)",
        "",
    ]
