"""Transformer graphs (GPT-2/3, BERT, Llama, Mixtral) as einsum operators, nanoGPT-style.

Letters: b batch, s sequence, t key sequence (fixed), m model width, n attention heads,
d head dim (fixed), f FFN width, v vocabulary, p positions (fixed), e experts, c expert capacity.
Llama-style models use RMSNorm, SwiGLU and grouped-query attention (K/V carry kv heads).
"""

from __future__ import annotations

from taps_core.ir.graph import OpGraph, TensorSpec
from taps_core.models.builder import GraphBuilder
from taps_core.models.config import ModelConfig

ATTN_FIXED = frozenset("dt")


class _Builder(GraphBuilder):
    """GraphBuilder that also carries the model config."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.dtype_bytes)
        self.cfg = cfg


def _linear(
    bld: _Builder,
    name: str,
    x: str,
    terms: tuple[str, str, str],
    w_shape: tuple[int, ...],
    out_shape: tuple[int, ...],
    layer: int | None,
    role: str | None,
    bias: bool,
    **extra: object,
) -> str:
    """Matmul ``x @ W (+ b)``; terms = (x letters, weight letters, output letters)."""
    xs, ws, os_ = terms
    w = bld.param(f"{name}.weight", w_shape)
    if bias:
        bias_letters = "".join(ch for ch in os_ if ch in ws)
        bshape = tuple(out_shape[os_.index(ch)] for ch in bias_letters)
        b = bld.param(f"{name}.bias", bshape)
        return bld.op(
            name,
            "matmul",
            f"{xs},{ws},{bias_letters}->{os_}",
            (x, w, b),
            out_shape,
            layer,
            tp_role=role,
            **extra,
        )
    return bld.op(
        name, "matmul", f"{xs},{ws}->{os_}", (x, w), out_shape, layer, tp_role=role, **extra
    )


def _norm(bld: _Builder, name: str, x: str, layer: int | None, rms: bool) -> str:
    m = bld.cfg.hidden_size
    shape = bld.tensors[x].shape
    w = bld.param(f"{name}.weight", (m,))
    if rms:
        return bld.op(name, "norm", "bsm,m->bsm", (x, w), shape, layer, stat_letters=frozenset("m"))
    b = bld.param(f"{name}.bias", (m,))
    return bld.op(
        name, "norm", "bsm,m,m->bsm", (x, w, b), shape, layer, stat_letters=frozenset("m")
    )


def _attention(bld: _Builder, x: str, lay: int, bias: bool) -> str:
    cfg = bld.cfg
    B, S, M = cfg.batch_size, cfg.seq_length, cfg.hidden_size
    N, K = cfg.num_attention_heads, cfg.kv_heads
    D = M // N
    p = f"L{lay}.attn"
    q = _linear(
        bld, f"{p}.q", x, ("bsm", "mnd", "bsnd"), (M, N, D), (B, S, N, D), lay, "column", bias
    )
    k = _linear(
        bld, f"{p}.k", x, ("bsm", "mnd", "bsnd"), (M, K, D), (B, S, K, D), lay, "column", bias
    )
    v = _linear(
        bld, f"{p}.v", x, ("bsm", "mnd", "bsnd"), (M, K, D), (B, S, K, D), lay, "column", bias
    )
    attn_dropout, _ = cfg.uses_dropout
    # kept for backward per score element: softmax output (2 B), and with dropout its mask
    # (1 B) and output (2 B); fused (flash) attention keeps none of them
    score_bytes = 0.0 if cfg.flash_attention else (5.0 if attn_dropout else 2.0)
    a = bld.op(
        f"{p}.core",
        "attention",
        "bsnd,btnd,btnd->bsnd",
        (q, k, v),
        (B, S, N, D),
        lay,
        fixed=ATTN_FIXED,
        flops_factor=4.0,
        score_bytes=score_bytes,
    )
    return _linear(bld, f"{p}.o", a, ("bsnd", "ndm", "bsm"), (N, D, M), (B, S, M), lay, "row", bias)


def _mlp(bld: _Builder, x: str, lay: int, gated: bool, bias: bool) -> str:
    cfg = bld.cfg
    B, S, M, F = cfg.batch_size, cfg.seq_length, cfg.hidden_size, cfg.ffn_size
    p = f"L{lay}.mlp"
    up = _linear(bld, f"{p}.up", x, ("bsm", "mf", "bsf"), (M, F), (B, S, F), lay, "column", bias)
    if gated:
        gate = _linear(
            bld, f"{p}.gate", x, ("bsm", "mf", "bsf"), (M, F), (B, S, F), lay, "column", bias
        )
        act = bld.op(f"{p}.swiglu", "elementwise", "bsf,bsf->bsf", (gate, up), (B, S, F), lay)
    else:
        act = bld.op(f"{p}.gelu", "elementwise", "bsf->bsf", (up,), (B, S, F), lay)
    return _linear(bld, f"{p}.down", act, ("bsf", "fm", "bsm"), (F, M), (B, S, M), lay, "row", bias)


def _moe(bld: _Builder, x: str, lay: int) -> str:
    """Top-k routed experts with SwiGLU: router, all-to-all dispatch, expert FFNs, combine."""
    cfg = bld.cfg
    B, S, M, F = cfg.batch_size, cfg.seq_length, cfg.hidden_size, cfg.ffn_size
    E, top = cfg.num_local_experts, cfg.num_experts_per_tok
    C = max(1, B * S * top // E)  # tokens per expert at capacity factor 1
    p = f"L{lay}.moe"
    probs = _linear(
        bld, f"{p}.router", x, ("bsm", "me", "bse"), (M, E), (B, S, E), lay, None, False
    )
    # the hidden width is not split across the token/expert reshuffle (fixed m). Dispatch needs
    # only the routing decisions (tokens x top-k integers, neglected); combine weighs the expert
    # outputs by the router's scores (x), read whole by each token
    xe = bld.op(
        f"{p}.dispatch",
        "moe_dispatch",
        "bsm->ecm",
        (x,),
        (E, C, M),
        lay,
        fixed=frozenset("m"),
        saves_inputs=False,  # backward needs only the routing indices
    )
    gate = _linear(
        bld, f"{p}.gate", xe, ("ecm", "emf", "ecf"), (E, M, F), (E, C, F), lay, "column", False
    )
    up = _linear(
        bld, f"{p}.up", xe, ("ecm", "emf", "ecf"), (E, M, F), (E, C, F), lay, "column", False
    )
    act = bld.op(f"{p}.swiglu", "elementwise", "ecf,ecf->ecf", (gate, up), (E, C, F), lay)
    down = _linear(
        bld, f"{p}.down", act, ("ecf", "efm", "ecm"), (E, F, M), (E, C, M), lay, "row", False
    )
    return bld.op(
        f"{p}.combine",
        "moe_combine",
        "ecm,bsx->bsm",
        (down, probs),
        (B, S, M),
        lay,
        fixed=frozenset("mx"),
    )


def _residual(bld: _Builder, name: str, x: str, y: str, lay: int) -> str:
    """``x + dropout(y)``: backward needs no input, only the dropout mask (1 byte/element)."""
    _, hidden_dropout = bld.cfg.uses_dropout
    return bld.op(
        name,
        "elementwise",
        "bsm,bsm->bsm",
        (x, y),
        bld.tensors[x].shape,
        lay,
        saves_inputs=False,
        mask_bytes=1.0 if hidden_dropout else 0.0,
    )


def build_transformer(cfg: ModelConfig) -> OpGraph:
    """Decoder (GPT, Llama, Mixtral) or encoder (BERT) stack with an LM head and loss."""
    bld = _Builder(cfg)
    B, S, M, V = cfg.batch_size, cfg.seq_length, cfg.hidden_size, cfg.vocab_size
    llama = cfg.model_type in ("llama", "mistral", "mixtral")
    bert = cfg.model_type == "bert"
    bias = not llama
    ids = bld.data("input_ids", (B, S))
    wte = bld.param("wte", (V, M))
    vocab = frozenset("v")  # the vocabulary is padded to its split, as Megatron does
    x = bld.op("embed", "embedding", "bs,vm->bsm", (ids, wte), (B, S, M), None, padded=vocab)
    if not llama:
        wpe = bld.param("wpe", (cfg.max_position_embeddings, M))
        x = bld.op(
            "embed_pos", "embedding", "bsm,pm->bsm", (x, wpe), (B, S, M), None, fixed=frozenset("p")
        )
    if bert:
        if cfg.type_vocab_size:
            wtt = bld.param("wtt", (cfg.type_vocab_size, M))
            x = bld.op(
                "embed_type",
                "embedding",
                "bsm,pm->bsm",
                (x, wtt),
                (B, S, M),
                None,
                fixed=frozenset("p"),
            )
        x = _norm(bld, "embed_ln", x, None, rms=False)
    for lay in range(cfg.num_hidden_layers):
        if bert:  # post-norm: x = LN(x + f(x))
            a = _attention(bld, x, lay, bias)
            x = _norm(
                bld,
                f"L{lay}.ln1",
                _residual(bld, f"L{lay}.add1", x, a, lay),
                lay,
                rms=False,
            )
            h = _mlp(bld, x, lay, gated=False, bias=True)
            x = _norm(
                bld,
                f"L{lay}.ln2",
                _residual(bld, f"L{lay}.add2", x, h, lay),
                lay,
                rms=False,
            )
            continue
        a = _attention(bld, _norm(bld, f"L{lay}.ln1", x, lay, rms=llama), lay, bias)
        x = _residual(bld, f"L{lay}.add1", x, a, lay)
        n2 = _norm(bld, f"L{lay}.ln2", x, lay, rms=llama)
        h = _moe(bld, n2, lay) if cfg.num_local_experts else _mlp(bld, n2, lay, llama, bias)
        x = _residual(bld, f"L{lay}.add2", x, h, lay)
    if not bert:
        x = _norm(bld, "ln_f", x, None, rms=llama)
    tied = cfg.tie_word_embeddings
    head = bld.param("lm_head.weight", (V, M), tied_to=wte if tied else "")
    logits = bld.op(
        "lm_head",
        "matmul",
        "bsm,vm->bsv",
        (x, head),
        (B, S, V),
        None,
        tp_role="column",
        padded=vocab,
    )
    labels = bld.data("labels", (B, S))
    bld.op("loss", "loss", "bsv,bs->bs", (logits, labels), (B, S), None, padded=vocab)
    bld.tensors["loss"] = TensorSpec("loss", (B, S), 4)  # the loss is kept in fp32
    return bld.graph(cfg.name, {"config": cfg})
