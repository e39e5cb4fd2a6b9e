"""Layers shared by the benchmark builders (not a network itself; registers nothing).

- `conv_relu`: a convolution with BatchNorm folded into its bias and a fused ReLU, the
  form inference exports (PyTorch's ONNX exporter in eval mode) give a conv-bn-relu.
- `conv_bn`: an explicit Conv2D (no bias) -> BatchNorm (-> Relu), for networks that keep
  the BatchNorm op so that conv+bn folding rewrites have something to fold.
- `classifier`: global average pool -> flatten -> fully connected (Gemm), the ImageNet head.
- `attention`, `post_norm_encoder_layer` (BERT), `pre_norm_encoder_layer` (ViT): the
  transformer encoder pieces, with Q, K and V as three separate MatMul + Add linears on
  the same input (on purpose: the QKV-merge rewrite fuses them).
"""

from __future__ import annotations

import math

import numpy as np

from taso_env.engine.builder import GraphBuilder, Tensor


# ------------------------------------------------------------------------------ CNNs
def conv_relu(b: GraphBuilder, x: Tensor, out_channels: int, kernel, stride=1, padding=0,
              groups: int = 1, relu: bool = True, name: str = "conv") -> Tensor:
    """Conv2D with bias (a BN-folded conv) and, by default, a fused ReLU."""
    return b.conv2d(x, out_channels, kernel, stride=stride, padding=padding, groups=groups,
                    bias=True, activation="relu" if relu else None, name=name)


def conv_bn(b: GraphBuilder, x: Tensor, out_channels: int, kernel, stride=1, padding=0,
            groups: int = 1, relu: bool = False, epsilon: float = 1e-5,
            name: str = "conv") -> Tensor:
    """Conv2D without bias -> BatchNorm (-> Relu when `relu`)."""
    y = b.conv2d(x, out_channels, kernel, stride=stride, padding=padding, groups=groups,
                 bias=False, name=name)
    y = b.batch_norm(y, epsilon=epsilon, name=f"{name}.bn")
    return b.relu(y) if relu else y


def classifier(b: GraphBuilder, x: Tensor, num_classes: int, name: str = "fc") -> Tensor:
    """GlobalAvgPool -> Flatten -> Gemm: [N, C, H, W] -> [N, num_classes]."""
    return b.gemm(b.flatten(b.global_avg_pool(x)), num_classes, name=name)


# ------------------------------------------------------------------------ transformers
def attention_scale(b: GraphBuilder, head_dim: int) -> Tensor:
    """The scalar sqrt(head_dim) that attention scores are divided by (one per model)."""
    return b.weight("attention.scale", [], value=np.float32(math.sqrt(head_dim)))


def attention(b: GraphBuilder, x: Tensor, num_heads: int, scale: Tensor,
              name: str = "attention") -> Tensor:
    """Multi-head self-attention on x [N, S, D], including the output projection.

    Q, K, V: three linears; heads split by Reshape [N, S, H, D/H] + Transpose (K straight
    to [N, H, D/H, S]); scores = Q @ K^T / scale; Softmax; context = P @ V; Transpose +
    Reshape back to [N, S, D]; output linear.
    """
    n, s, d = x.shape
    hd = d // num_heads
    q = b.linear(x, d, name=f"{name}.query")
    k = b.linear(x, d, name=f"{name}.key")
    v = b.linear(x, d, name=f"{name}.value")
    q = b.transpose(b.reshape(q, [n, s, num_heads, hd]), [0, 2, 1, 3])
    k = b.transpose(b.reshape(k, [n, s, num_heads, hd]), [0, 2, 3, 1])
    v = b.transpose(b.reshape(v, [n, s, num_heads, hd]), [0, 2, 1, 3])
    scores = b.op("Div", [b.matmul(q, k), scale], name=f"{name}.scale")
    probs = b.softmax(scores, axis=-1)
    ctx = b.transpose(b.matmul(probs, v), [0, 2, 1, 3])
    return b.linear(b.reshape(ctx, [n, s, d]), d, name=f"{name}.output")


def mlp(b: GraphBuilder, x: Tensor, hidden: int, name: str = "mlp") -> Tensor:
    """linear(hidden) -> Gelu -> linear(back to the input width)."""
    h = b.linear(x, hidden, activation="gelu", name=f"{name}.fc1")
    return b.linear(h, x.shape[-1], name=f"{name}.fc2")


def post_norm_encoder_layer(b: GraphBuilder, x: Tensor, num_heads: int, intermediate: int,
                            scale: Tensor, epsilon: float = 1e-12,
                            name: str = "layer") -> Tensor:
    """BERT layer: x = LN(x + MHA(x)); x = LN(x + MLP(x))."""
    x = b.layer_norm(b.add(x, attention(b, x, num_heads, scale, name=f"{name}.attention")),
                     epsilon=epsilon, name=f"{name}.attention.ln")
    return b.layer_norm(b.add(x, mlp(b, x, intermediate, name=f"{name}.mlp")),
                        epsilon=epsilon, name=f"{name}.output.ln")


def pre_norm_encoder_layer(b: GraphBuilder, x: Tensor, num_heads: int, intermediate: int,
                           scale: Tensor, epsilon: float = 1e-6,
                           name: str = "block") -> Tensor:
    """ViT block: x = x + MHA(LN(x)); x = x + MLP(LN(x))."""
    h = b.layer_norm(x, epsilon=epsilon, name=f"{name}.ln1")
    x = b.add(x, attention(b, h, num_heads, scale, name=f"{name}.attention"))
    h = b.layer_norm(x, epsilon=epsilon, name=f"{name}.ln2")
    return b.add(x, mlp(b, h, intermediate, name=f"{name}.mlp"))
