"""Shape of the small GPT-2 of the DTensor export check (torch-free, so plans and exports of it
can be made without torch; the module itself is in :mod:`validation.dtensor_model`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class TinyGPTConfig:
    """Shape of the model (GPT-2 names) and of one training batch."""

    vocab_size: int = 128
    n_positions: int = 16
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    batch_size: int = 4  # samples per step, all data-parallel replicas together
    seq_length: int = 16  # tokens per sample
    tie_word_embeddings: bool = True  # the LM head shares the token embedding's weight
    # "sdpa" (fused kernel) or "eager" (matmul, mask, softmax: what DTensor can shard on CPU),
    # as Hugging Face's config option of the same name
    attn_implementation: str = "sdpa"

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def as_dict(self) -> dict[str, object]:
        """The fields as a JSON-able dict (what the rank processes receive)."""
        return asdict(self)

    def engine_config(self) -> dict[str, object]:
        """The same model in the engine's config vocabulary (float32, no dropout)."""
        return {
            "model_type": "gpt2", "n_embd": self.n_embd, "n_layer": self.n_layer,
            "n_head": self.n_head, "vocab_size": self.vocab_size,
            "n_positions": self.n_positions, "seq_length": self.seq_length,
            "batch_size": self.batch_size, "dtype": "float32",
            "tie_word_embeddings": self.tie_word_embeddings,
        }


@dataclass(frozen=True)
class TinyLlamaConfig:
    """A small Llama (Hugging Face ``LlamaForCausalLM``, grouped-query attention) and one batch."""

    vocab_size: int = 128
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    batch_size: int = 4
    seq_length: int = 16

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    def hf_kwargs(self) -> dict[str, object]:
        """``transformers.LlamaConfig`` arguments: eager attention (DTensor has no CPU rule for
        the fused kernel), no KV cache, an untied LM head."""
        keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads")
        return {**{k: getattr(self, k) for k in keys}, "max_position_embeddings": 64,
                "tie_word_embeddings": False, "attn_implementation": "eager", "use_cache": False}

    def engine_config(self) -> dict[str, object]:
        """The same model in the engine's config vocabulary (float32)."""
        return {"model_type": "llama", **{k: v for k, v in self.hf_kwargs().items()
                                          if k not in ("attn_implementation", "use_cache")},
                "seq_length": self.seq_length, "batch_size": self.batch_size,
                "dtype": "float32"}
