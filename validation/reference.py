"""Seeded weights and inputs for an engine graph, and an independent single-process model.

The plan executor (:mod:`validation.executor`) and the reference here share only the weights
and inputs: the reference is written with ordinary PyTorch layers (``F.layer_norm``,
``F.scaled_dot_product_attention``, ``F.cross_entropy``...), so a wrong op semantic in the
executor shows up as a mismatch, not just a wrong parallelisation.

Families: ``mlp`` (the teaching MLP; loss = squared error against a seeded target, summed over
features and averaged over tokens) and
``gpt2`` (pre-norm decoder, causal attention, tanh GELU, tied LM head, mean cross-entropy).
"""

from __future__ import annotations

import math
from typing import Any

SUPPORTED_FAMILIES = ("mlp", "gpt2")
LN_EPS = 1e-5
TIED_TARGET = {"lm_head.weight": "wte"}


def tie_target(graph, name: str) -> str:
    """The parameter a tied parameter shares storage with (GPT-2: the LM head is ``wte``)."""
    if name in TIED_TARGET and TIED_TARGET[name] in graph.tensors:
        return TIED_TARGET[name]
    raise ValueError(f"tied parameter {name} has no known target")


def init_tensors(graph, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Seeded full parameters and inputs of ``graph`` (float32; ids and labels int64).

    Weights of a matmul are N(0, 1/fan_in) with fan_in the product of the letters it contracts;
    embedding tables N(0, 0.3^2); norm weights 1 + N(0, 0.1^2); biases N(0, 0.1^2). Returns
    ``(params, data)``; ``data`` holds every non-parameter graph input and, for a graph that
    does not end in a loss op, ``"target"`` for the mean squared error.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    params: dict[str, Any] = {}
    data: dict[str, Any] = {}
    for name, t in graph.tensors.items():
        if name in graph.producer:
            continue
        shape = t.shape
        if t.is_param:
            if t.tied:
                continue
            op = graph.op_by_name[graph.consumers[name][0]]
            pos = op.inputs.index(name)
            letters = op.input_letters[pos]
            if op.kind == "norm":
                base = 1.0 if pos == 1 else 0.0
                params[name] = base + 0.1 * torch.randn(shape, generator=gen)
            elif op.kind == "embedding":
                params[name] = 0.3 * torch.randn(shape, generator=gen)
            elif pos >= 2 or len(shape) == 1:
                params[name] = 0.1 * torch.randn(shape, generator=gen)
            else:
                sizes = graph.dim_sizes(op)
                fan_in = math.prod(sizes[ch] for ch in letters if ch in op.contracted) or 1
                params[name] = torch.randn(shape, generator=gen) / math.sqrt(fan_in)
        elif name in ("input_ids", "labels"):
            vocab = graph.meta["config"].vocab_size
            data[name] = torch.randint(0, vocab, shape, generator=gen)
        else:
            data[name] = torch.randn(shape, generator=gen)
    for name, t in graph.tensors.items():
        if t.is_param and t.tied:
            params[name] = params[tie_target(graph, name)]
    if graph.ops[-1].kind != "loss":
        data["target"] = torch.randn(graph.tensors[graph.ops[-1].output].shape, generator=gen)
    return params, data


def family(graph) -> str:
    cfg = graph.meta.get("config")
    kind = getattr(cfg, "model_type", None)
    if kind not in SUPPORTED_FAMILIES:
        raise ValueError(f"the reference model supports {SUPPORTED_FAMILIES}, not {kind}")
    return kind


def reference_loss(graph, params: dict[str, Any], data: dict[str, Any]):
    """Loss of the single-process model on full tensors (autograd flows into ``params``)."""
    import torch
    import torch.nn.functional as F  # noqa: N812

    cfg = graph.meta["config"]
    if family(graph) == "mlp":
        h = data["x"] @ params["fc1.weight"] + params["fc1.bias"]
        h = F.gelu(h, approximate="tanh")
        y = h @ params["fc2.weight"] + params["fc2.bias"]
        return ((y - data["target"]) ** 2).sum() / (y.numel() // y.shape[-1])
    ids = data["input_ids"]
    B, S = ids.shape
    M, N = cfg.hidden_size, cfg.num_attention_heads
    x = F.embedding(ids, params["wte"]) + params["wpe"][:S]

    def ln(name: str, z):
        return F.layer_norm(z, (M,), params[f"{name}.weight"], params[f"{name}.bias"], LN_EPS)

    def lin(name: str, z, spec: str):
        return torch.einsum(spec, z, params[f"{name}.weight"]) + params[f"{name}.bias"]

    for lay in range(cfg.num_hidden_layers):
        p = f"L{lay}"
        h = ln(f"{p}.ln1", x)
        q, k, v = (lin(f"{p}.attn.{n}", h, "bsm,mnd->bsnd").transpose(1, 2) for n in "qkv")
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        x = x + lin(f"{p}.attn.o", a, "bsnd,ndm->bsm")
        h = ln(f"{p}.ln2", x)
        h = F.gelu(lin(f"{p}.mlp.up", h, "bsm,mf->bsf"), approximate="tanh")
        x = x + lin(f"{p}.mlp.down", h, "bsf,fm->bsm")
    x = ln("ln_f", x)
    logits = x @ params["wte"].T
    assert N >= 1
    return F.cross_entropy(logits.reshape(B * S, -1), data["labels"].reshape(-1))


def reference_grads(graph, seed: int) -> tuple[float, dict[str, Any]]:
    """(loss, gradient of every untied parameter) of the single-process model."""
    params, data = init_tensors(graph, seed)
    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()
              if not graph.tensors[k].tied}
    loss = reference_loss(graph, leaves, data)
    loss.backward()
    return float(loss.detach()), {k: v.grad for k, v in leaves.items()}
