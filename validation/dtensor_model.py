"""A small GPT-2 in plain torch with Hugging Face's module names, for the DTensor export check.

Single-device model code only (parallelism is applied from outside by the exported plan):
``transformer.wte`` / ``wpe`` / ``h.{i}.ln_1`` / ``h.{i}.attn.c_attn`` / ``h.{i}.attn.c_proj`` /
``h.{i}.ln_2`` / ``h.{i}.mlp.c_fc`` / ``h.{i}.mlp.c_proj`` / ``ln_f`` and ``lm_head`` (tied to
``wte`` by default). Two deliberate differences from Hugging Face's GPT-2, both needed by
``parallelize_module``:

- projections are ``nn.Linear`` (HF uses ``Conv1D``, which ColwiseParallel/RowwiseParallel do
  not accept; its weight is the transpose);
- ``c_attn``'s output features are laid out per head as ``[heads, (q, k, v), head_dim]``
  (Megatron's fused QKV layout) instead of HF's ``[(q, k, v), heads, head_dim]``, so that a
  column split over heads gives every rank whole heads of Q, K and V.

The forward infers the number of local heads from the tensor shapes, so the same code runs
whole or with its heads split. No dropout: the check compares exact arithmetic.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional

from validation.dtensor_config import TinyGPTConfig


class Attention(nn.Module):
    """Causal self-attention: fused head-major QKV projection, then the output projection."""

    def __init__(self, cfg: TinyGPTConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.eager = cfg.attn_implementation == "eager"
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        qkv = self.c_attn(x).view(b, s, -1, 3, self.head_dim)  # (b, s, heads here, 3, d)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(dim=3))  # each (b, heads, s, d)
        if self.eager:
            y = _eager_attention(q, k, v)
        else:
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, s, -1))  # (b, s, heads * d) in


def _eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax attention from plain ops, each (b, heads, s, d)."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    future = torch.ones_like(scores, dtype=torch.bool).triu(1)  # a DTensor when scores is one
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v


class MLP(nn.Module):
    """Feed-forward block: 4x expansion, tanh GELU (GPT-2's ``gelu_new``)."""

    def __init__(self, cfg: TinyGPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(functional.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-norm transformer block with two residual adds."""

    def __init__(self, cfg: TinyGPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """Embeddings, blocks and the final norm (HF's ``GPT2Model``)."""

    def __init__(self, cfg: TinyGPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(positions)  # (b, s, m) + (s, m)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class TinyGPT2(nn.Module):
    """GPT-2 with its LM head (HF's ``GPT2LMHeadModel``), tied to ``wte`` unless configured."""

    def __init__(self, cfg: TinyGPTConfig) -> None:
        super().__init__()
        self.transformer = Transformer(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.transformer.wte.weight
        self._init(cfg)

    def _init(self, cfg: TinyGPTConfig) -> None:
        """GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2L)."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.normal_(p, std=0.02)  # non-zero, so bias gradients are checked too
            elif ".ln_" in name or "ln_f" in name:
                nn.init.normal_(p, mean=1.0, std=0.1)
            else:
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(b, s, vocab) logits (vocabulary-sharded when the LM head is column-parallel)."""
        return self.lm_head(self.transformer(input_ids))


def batch(cfg: TinyGPTConfig, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded token ids and next-token labels, each (batch, seq) int64."""
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.seq_length + 1), generator=gen)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def build(cfg: TinyGPTConfig, seed: int) -> TinyGPT2:
    """The model with seeded weights (identical on every rank that uses the same seed)."""
    torch.manual_seed(seed)
    return TinyGPT2(cfg)
