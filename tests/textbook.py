"""The textbook, written from the formulas alone (shares no code with taps_core's cost model).

Bytes that all GPUs send in one training step of a Megatron-style configuration, per op and
per link kind (``intra``: inside a host, ``inter``: between hosts), from the papers:

- Megatron tensor parallelism (Shoeybi et al. 2019): per layer and micro-batch, 2 all-reduces
  of the ``mbs x s x h`` activation in forward (after the attention output projection and after
  the MLP down projection) and 2 in backward (the inputs of Q/K/V and of the MLP's first matmuls,
  their gradients summed locally first). Sequence parallelism (Korthikanti et al. 2022) turns each
  into a reduce-scatter plus an all-gather (same bytes); full recomputation runs the forward
  ones again. Vocabulary-parallel embedding (an all-reduce of its output), LM head (the backward
  all-reduce of its input) and loss (one all-reduce of a value per token).
- Data parallelism: gradients all-reduced once per step (ZeRO 0/1); ZeRO-2 reduce-scatters per
  micro-batch and all-gathers the updated parameters once; ZeRO-3 gathers parameters before
  every forward and backward (2 per micro-batch) and reduce-scatters gradients per micro-batch
  (Rajbhandari et al. 2020). A group spanning hosts runs hierarchically: reduce-scatter inside the
  host, all-reduce across hosts on 1/q of the data, all-gather inside; GPUs of a host holding
  copies of the same weight each send 1/copies of it across hosts and gather it inside.
- Pipelines (Narayanan et al. 2021): between consecutive stages the boundary activation goes
  forward and its gradient backward, once per micro-batch, each GPU sending its 1/G slice.

Ring collectives over p ranks, per rank: all-reduce 2(p-1)/p S, all-gather and reduce-scatter
(p-1)/p S (S the full buffer).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Transformer:
    """A decoder's sizes: hidden ``h``, ``heads`` of ``head_dim``, ``kv_heads``, FFN ``ffn``,
    vocabulary ``vocab``, ``layers``; GPT-style (biases, LayerNorm, GELU) or Llama-style
    (no biases, RMSNorm, gated FFN); ``positions`` > 0 adds learned positions (GPT-2)."""

    h: int
    heads: int
    head_dim: int
    kv_heads: int
    ffn: int
    vocab: int
    layers: int
    seq: int
    gpt: bool = True
    positions: int = 0
    dtype_bytes: int = 2


@dataclass(frozen=True)
class Config:
    """TP ``tp`` inside a host, ``dp_intra`` x ``hosts`` data-parallel replicas per stage, ``pp``
    stages, ``m`` micro-batches of ``mbs`` samples per replica, and the levers."""

    tp: int
    dp_intra: int
    hosts: int
    pp: int
    m: int
    mbs: int
    sp: bool = False
    zero: int = 0
    recompute: bool = False

    @property
    def gpus(self) -> int:
        """GPUs of one stage."""
        return self.tp * self.dp_intra * self.hosts


@dataclass
class Bytes:
    """Bytes all GPUs send per step, by link kind."""

    intra: float = 0.0
    inter: float = 0.0

    def add(self, level: str, value: float) -> None:
        setattr(self, level, getattr(self, level) + value)


@dataclass
class Ledger:
    """Bytes per op name and per kind of traffic ('activation' or 'weight')."""

    ops: dict[str, dict[str, Bytes]] = field(default_factory=dict)

    def add(self, op: str, kind: str, level: str, value: float) -> None:
        self.ops.setdefault(op, {}).setdefault(kind, Bytes()).add(level, value)

    def total(self, ops: list[str], kind: str, level: str) -> float:
        return sum(
            getattr(self.ops.get(o, {}).get(kind, Bytes()), level) for o in ops
        )


# ---- ring collectives, per rank ---------------------------------------------------------------


def all_reduce(p: int, size: float) -> float:
    return 2 * (p - 1) / p * size if p > 1 else 0.0


def gather_or_scatter(p: int, size: float) -> float:
    return (p - 1) / p * size if p > 1 else 0.0


def dp_all_reduce(cfg: Config, size: float, copies: int) -> dict[str, float]:
    """Per-rank bytes of a gradient all-reduce over the replicas (``copies`` GPUs of a host
    hold the same gradient), by link kind."""
    qi, qx = cfg.dp_intra, cfg.hosts
    if qx > 1 and qi * copies > 1:
        spread = qi * copies
        return {
            "intra": gather_or_scatter(qi, size) + gather_or_scatter(spread, size),
            "inter": all_reduce(qx, size / spread),
        }
    if qx > 1:
        return {"intra": 0.0, "inter": all_reduce(qx, size)}
    return {"intra": all_reduce(qi, size), "inter": 0.0}


def dp_reduce_scatter(cfg: Config, size: float, copies: int) -> dict[str, float]:
    qi, qx = cfg.dp_intra, cfg.hosts
    spread = copies if qx > 1 else 1
    return {
        "intra": gather_or_scatter(qi, size),
        "inter": gather_or_scatter(qx, size / (qi * spread)),
    }


def dp_all_gather(cfg: Config, size: float, copies: int) -> dict[str, float]:
    qi, qx = cfg.dp_intra, cfg.hosts
    spread = qi * (copies if qx > 1 else 1)
    return {"inter": gather_or_scatter(qx, size / spread), "intra": gather_or_scatter(spread, size)}


def weight_sync(cfg: Config, size: float, copies: int) -> dict[str, float]:
    """Per-rank bytes of one weight's data-parallel traffic in one step at the ZeRO stage."""
    out = {"intra": 0.0, "inter": 0.0}

    def add(part: dict[str, float], times: int) -> None:
        for k, v in part.items():
            out[k] += times * v

    if cfg.dp_intra * cfg.hosts * (copies if cfg.hosts > 1 else 1) <= 1:
        return out  # one replica: nothing to sync (ZeRO has nothing to shard over)
    if cfg.zero <= 1:
        add(dp_all_reduce(cfg, size, copies), 1)
    elif cfg.zero == 2:
        add(dp_reduce_scatter(cfg, size, copies), cfg.m)
        add(dp_all_gather(cfg, size, copies), 1)
    else:
        add(dp_all_gather(cfg, size, copies), 2 * cfg.m)
        add(dp_reduce_scatter(cfg, size, copies), cfg.m)
    return out


# ---- one layer ---------------------------------------------------------------------------------


def layer_weights(model: Transformer, tp: int) -> dict[str, list[tuple[int, bool]]]:
    """(elements, split by TP) of each op's weights in one layer."""
    h, nd, kd, f = model.h, model.heads * model.head_dim, model.kv_heads * model.head_dim, model.ffn
    bias = model.gpt
    norm = [(h, False), (h, False)] if model.gpt else [(h, False)]
    out = {
        "ln1": norm,
        "attn.q": [(h * nd, True)] + ([(nd, True)] if bias else []),
        "attn.k": [(h * kd, True)] + ([(kd, True)] if bias else []),
        "attn.v": [(h * kd, True)] + ([(kd, True)] if bias else []),
        "attn.o": [(nd * h, True)] + ([(h, False)] if bias else []),
        "ln2": norm,
        "mlp.up": [(h * f, True)] + ([(f, True)] if bias else []),
        "mlp.down": [(f * h, True)] + ([(h, False)] if bias else []),
    }
    if not model.gpt:
        out["mlp.gate"] = [(h * f, True)]
    return out


def layer(model: Transformer, cfg: Config, name: str = "L") -> Ledger:
    """Every op of one transformer layer: activations (TP) and weights (DP), by link kind."""
    book = Ledger()
    g = cfg.gpus
    t = cfg.tp
    act = cfg.mbs * model.seq * model.h * model.dtype_bytes  # one replica's micro-batch
    fwd_times = cfg.m * (2 if cfg.recompute else 1)
    if t > 1:
        if cfg.sp:  # all-gather before the column ops, reduce-scatter after the row ops
            per = gather_or_scatter(t, act)
            for col in ("attn.q", "mlp.up"):  # forward gather (again when recomputed), bwd RS
                book.add(f"{name}.{col}", "activation", "intra", g * per * (fwd_times + cfg.m))
            for reader in ("add1", "add2"):
                # attn.o and mlp.down hand their partial sums on: their readers reduce-scatter
                book.add(f"{name}.{reader}", "activation", "intra", g * per * (fwd_times + cfg.m))
        else:
            per = all_reduce(t, act)
            for col in ("attn.q", "mlp.up"):  # backward all-reduce of the shared input's grad
                book.add(f"{name}.{col}", "activation", "intra", g * per * cfg.m)
            for row in ("attn.o", "mlp.down"):  # forward all-reduce (again when recomputed)
                book.add(f"{name}.{row}", "activation", "intra", g * per * fwd_times)
    for op, weights in layer_weights(model, t).items():
        for elements, split in weights:
            held = elements * model.dtype_bytes / (t if split else 1)
            # a weight TP leaves whole is repeated by the t GPUs of a TP group; under SP (norms,
            # row biases added after the reduce-scatter) its gradient is also a partial sum
            # over the sequence, i.e. over the TP group
            if not split and t > 1 and cfg.sp:
                tp_too = Config(1, cfg.dp_intra * t, cfg.hosts, cfg.pp, cfg.m, cfg.mbs, cfg.sp,
                                cfg.zero, cfg.recompute)
                per_rank = weight_sync(tp_too, held, 1)
            else:
                per_rank = weight_sync(cfg, held, 1 if split else t)
            for level, value in per_rank.items():
                book.add(f"{name}.{op}", "weight", level, g * value)
    return book


def pipeline_sends(model: Transformer, cfg: Config) -> float:
    """Bytes between consecutive stages per step (every boundary, forward and backward):
    inter-host, each GPU of a stage sending its 1/G slice of the micro-batch's activation."""
    boundary = cfg.dp_intra * cfg.hosts * cfg.mbs * model.seq * model.h * model.dtype_bytes
    return (cfg.pp - 1) * 2 * cfg.m * boundary


def activation_memory_per_layer(model: Transformer, cfg: Config, flash: bool = False) -> float:
    """Korthikanti et al. 2022 (Eq. 2 and its TP/SP variants), bytes per GPU for one
    micro-batch at 16-bit: s b h (10 + 24/t + 5 a s / (h t)) with TP, / t altogether with SP;
    full recomputation keeps the layer input only (2 s b h, / t with SP)."""
    s, b, h, a, t = model.seq, cfg.mbs, model.h, model.heads, cfg.tp
    if cfg.recompute:
        return 2 * s * b * h / (t if cfg.sp else 1)
    scores = 0.0 if flash else 5 * a * s / h
    if cfg.sp:
        return s * b * h * (34 + scores) / t
    return s * b * h * (10 + (24 + scores) / t)


def model_state_per_gpu(params: float, cfg: Config) -> float:
    """Mixed-precision Adam (Rajbhandari et al. 2020): 2 bytes of parameters, 2 of gradients
    and 12 of optimizer state per parameter, each sharded over the N replicas from its stage on:
    (2 + 2 + 12/N) at ZeRO-1, (2 + 14/N) at ZeRO-2, 16/N at ZeRO-3 (``params`` held per GPU)."""
    n = cfg.dp_intra * cfg.hosts
    shards = {0: (1, 1, 1), 1: (1, 1, n), 2: (1, n, n), 3: (n, n, n)}[cfg.zero]
    return params * (2 / shards[0] + 2 / shards[1] + 12 / shards[2])


# ---- embedding, LM head and loss --------------------------------------------------------------


def padded_vocab(model: Transformer, tp: int) -> int:
    """The vocabulary padded up to a multiple of the TP size (Megatron pads it)."""
    return -(-model.vocab // tp) * tp


def edges(model: Transformer, cfg: Config, tied: bool) -> Ledger:
    """The ops around the layers (vocabulary-parallel embedding, LM head and loss; learned
    positions), without sequence parallelism: activations and weights, by link kind. A tied
    head shares the embedding's weight (its gradient is summed into it, no sync of its own)
    unless pipeline stages separate them."""
    book = Ledger()
    g, t = cfg.gpus, cfg.tp
    act = cfg.mbs * model.seq * model.h * model.dtype_bytes
    tokens = cfg.mbs * model.seq
    table = padded_vocab(model, t) * model.h * model.dtype_bytes / t
    if t > 1:
        book.add("embed", "activation", "intra", g * all_reduce(t, act) * cfg.m)  # partial sums
        book.add("lm_head", "activation", "intra", g * all_reduce(t, act) * cfg.m)  # input grad
        book.add("loss", "activation", "intra", g * all_reduce(t, 12 * tokens) * cfg.m)
    for level, value in weight_sync(cfg, table, 1).items():
        book.add("embed", "weight", level, g * value)
        if not tied or cfg.pp > 1:
            book.add("lm_head", "weight", level, g * value)
    if model.positions:
        wpe = model.positions * model.h * model.dtype_bytes
        for level, value in weight_sync(cfg, wpe, t).items():
            book.add("embed_pos", "weight", level, g * value)
    norm = model.h * model.dtype_bytes
    for _ in range(2 if model.gpt else 1):
        for level, value in weight_sync(cfg, norm, t).items():
            book.add("ln_f", "weight", level, g * value)
    return book


def tied_exchange(model: Transformer, cfg: Config) -> float:
    """Bytes per step of a tied embedding's gradient all-reduce between the first and the last
    stage (Megatron's embedding group: pairs of GPUs, each sending its shard once)."""
    if cfg.pp < 2:
        return 0.0
    table = padded_vocab(model, cfg.tp) * model.h * model.dtype_bytes / cfg.tp
    return 2 * cfg.gpus * table
