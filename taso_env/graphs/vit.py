"""ViT-B/16 (Dosovitskiy et al., "An Image is Worth 16x16 Words: Transformers for Image
Recognition at Scale", ICLR 2021), laid out as timm's `vit_base_patch16_224` in eval
mode.

Input "input" [1, 3, 224, 224] -> output "output" [1, 1000].

    patch embedding: Conv2D 16x16 stride 16, 768 channels (with bias)   [1, 768, 14, 14]
    Reshape [1, 768, 196] + Transpose -> tokens                          [1, 196, 768]
    Concat the class token (a weight [1, 1, 768]) in front               [1, 197, 768]
    Add the position embedding (a weight [1, 197, 768])
    12 pre-norm blocks: x + MHA(LN(x)), then x + MLP(LN(x)); 12 heads of 64, MLP 3072
      with Gelu; attention as in BERT (separate Q, K, V linears, Div by sqrt(64))
    final LayerNorm; Gather index 0 on axis 1 (the class token)         [1, 768]
    head: Gemm 1000

LayerNorm eps 1e-6. 97 MatMuls (96 in the blocks, 1 Gemm head); 86,567,656 parameters
(as timm), plus the scale scalar.
"""

from __future__ import annotations

import numpy as np

from taso_env import dtypes
from taso_env.engine.builder import GraphBuilder
from taso_env.engine.graph import Graph
from taso_env.graphs import register
from taso_env.graphs.blocks import attention_scale, pre_norm_encoder_layer


@register("vit_base")
def vit_base(image_size: int = 224, patch_size: int = 16, hidden: int = 768, num_layers: int = 12,
             num_heads: int = 12, intermediate: int = 3072, num_classes: int = 1000,
             batch_size: int = 1, seed: int | None = 0) -> Graph:
    """ViT-B/16; `seed=None` builds a shape-only graph."""
    if image_size % patch_size:
        raise ValueError(f"image_size {image_size} is not a multiple of patch_size {patch_size}")
    b = GraphBuilder("vit_base", seed=seed)
    x = b.input("input", [batch_size, 3, image_size, image_size])
    x = b.conv2d(x, hidden, patch_size, stride=patch_size, name="patch_embed")
    num_patches = x.shape[2] * x.shape[3]
    x = b.transpose(b.reshape(x, [batch_size, hidden, num_patches]), [0, 2, 1])
    cls = b.weight("cls_token", [1, 1, hidden])
    if batch_size > 1:  # the same class token for every image
        cls = b.concat([cls] * batch_size, axis=0)
    x = b.concat([cls, x], axis=1)
    x = b.add(x, b.weight("pos_embed", [1, num_patches + 1, hidden]))
    scale = attention_scale(b, hidden // num_heads)
    for i in range(num_layers):
        x = pre_norm_encoder_layer(b, x, num_heads, intermediate, scale, epsilon=1e-6,
                                   name=f"blocks{i}")
    x = b.layer_norm(x, epsilon=1e-6, name="norm")
    index = b.weight("cls_index", [], dtypes.INT64, value=np.int64(0))
    x = b.op("Gather", [x, index], axis=1)
    b.output(b.gemm(x, num_classes, name="head"), "output")
    return b.build()
