"""ResNet (bottleneck) and the two-layer teaching MLP as einsum graphs.

Conv letters: b batch, c input channels, k output channels, y/x input rows/cols and h/w output
rows/cols, r/q kernel rows/cols. Spatial and kernel letters are fixed: splitting an image needs
halo exchange, which is outside the strategy space. BatchNorm keeps per-device statistics.
"""

from __future__ import annotations

from taps_core.ir.graph import OpGraph
from taps_core.models.builder import GraphBuilder
from taps_core.models.config import ModelConfig

_SPATIAL = frozenset("yxhwrq")


class _Net(GraphBuilder):
    """GraphBuilder with conv + BatchNorm and ReLU helpers for image models."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg.dtype_bytes)
        self.cfg = cfg

    add = GraphBuilder.op

    def conv(self, name: str, x: str, k: int, size: int, stride: int, layer: int | None) -> str:
        b, c, hh, ww = self.tensors[x].shape
        ho, wo = -(-hh // stride), -(-ww // stride)
        w = self.param(f"{name}.weight", (k, c, size, size))
        flops = 2.0 * b * k * ho * wo * c * size * size
        out = self.add(
            name,
            "conv",
            "bcyx,kcrq->bkhw",
            (x, w),
            (b, k, ho, wo),
            layer,
            fixed=_SPATIAL,
            fwd_flops=flops,
        )
        g, beta = self.param(f"{name}.bn.weight", (k,)), self.param(f"{name}.bn.bias", (k,))
        return self.add(
            f"{name}.bn", "norm", "bkhw,k,k->bkhw", (out, g, beta), (b, k, ho, wo), layer
        )

    def relu(self, name: str, x: str, layer: int | None) -> str:
        shape = self.tensors[x].shape
        return self.add(name, "elementwise", "bkhw->bkhw", (x,), shape, layer)


def build_resnet(cfg: ModelConfig) -> OpGraph:
    """Bottleneck ResNet (ResNet-50 for depths 3,4,6,3), ImageNet head, cross-entropy loss."""
    net = _Net(cfg)
    B, R = cfg.batch_size, cfg.image_size
    img = net.data("pixels", (B, 3, R, R), dtype_bytes=cfg.dtype_bytes)
    x = net.relu("stem.relu", net.conv("stem.conv", img, cfg.embedding_size, 7, 2, None), None)
    b, c, hh, ww = net.tensors[x].shape
    x = net.add(
        "stem.pool", "pool", "bkyx->bkhw", (x,), (b, c, hh // 2, ww // 2), None, fixed=_SPATIAL
    )
    block = 0
    for stage, (width_out, depth) in enumerate(zip(cfg.hidden_sizes, cfg.depths)):
        width = width_out // 4
        for i in range(depth):
            stride = 2 if (i == 0 and stage > 0) else 1
            p = f"S{stage}.B{i}"
            y = net.relu(f"{p}.relu1", net.conv(f"{p}.conv1", x, width, 1, 1, block), block)
            y = net.relu(f"{p}.relu2", net.conv(f"{p}.conv2", y, width, 3, stride, block), block)
            y = net.conv(f"{p}.conv3", y, width_out, 1, 1, block)
            short = x if i > 0 else net.conv(f"{p}.proj", x, width_out, 1, stride, block)
            shape = net.tensors[y].shape
            x = net.relu(
                f"{p}.relu3",
                net.add(
                    f"{p}.add",
                    "elementwise",
                    "bkhw,bkhw->bkhw",
                    (y, short),
                    shape,
                    block,
                    saves_inputs=False,
                ),
                block,
            )
            block += 1
    b, c, _, _ = net.tensors[x].shape
    pooled = net.add("head.pool", "pool", "bkhw->bk", (x,), (b, c), None, fixed=_SPATIAL)
    w = net.param("head.fc.weight", (c, cfg.num_labels))
    bias = net.param("head.fc.bias", (cfg.num_labels,))
    logits = net.add(
        "head.fc",
        "matmul",
        "bk,kl,l->bl",
        (pooled, w, bias),
        (b, cfg.num_labels),
        None,
        tp_role="column",
    )
    labels = net.data("labels", (b,))
    net.add("loss", "loss", "bl,b->b", (logits, labels), (b,), None)
    return net.graph(cfg.name, {"config": cfg})


def build_mlp(cfg: ModelConfig) -> OpGraph:
    """Two linear layers with GELU between: the Megatron MLP in its smallest form."""
    B, S, M, F = cfg.batch_size, cfg.seq_length, cfg.hidden_size, cfg.ffn_size
    net = GraphBuilder(cfg.dtype_bytes)
    x = net.data("x", (B, S, M), dtype_bytes=cfg.dtype_bytes)
    w1, b1 = net.param("fc1.weight", (M, F)), net.param("fc1.bias", (F,))
    h = net.op("fc1", "matmul", "bsm,mf,f->bsf", (x, w1, b1), (B, S, F), None, tp_role="column")
    h = net.op("gelu", "elementwise", "bsf->bsf", (h,), (B, S, F), None)
    w2, b2 = net.param("fc2.weight", (F, M)), net.param("fc2.bias", (M,))
    net.op("fc2", "matmul", "bsf,fm,m->bsm", (h, w2, b2), (B, S, M), None, tp_role="row")
    return net.graph(cfg.name, {"config": cfg})
