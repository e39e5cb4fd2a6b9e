"""Inception-v3 (Szegedy et al., "Rethinking the Inception Architecture for Computer
Vision", CVPR 2016), laid out as `torchvision.models.inception_v3` in eval mode without
the auxiliary classifier (`aux_logits` output unused at inference, not built) and
without input re-normalisation (`transform_input=False`). Every BasicConv2d
(conv + BatchNorm + ReLU) is a conv with BN folded into its bias and a fused ReLU.

Input "input" [1, 3, 299, 299] -> output "output" [1, 1000].

    Conv2d_1a 3x3/2 32 -> 2a 3x3 32 -> 2b 3x3 pad 1 64 -> maxpool 3x3/2     147 -> 73
    Conv2d_3b 1x1 80 -> 4a 3x3 192 -> maxpool 3x3/2                           71 -> 35
    Mixed_5b, 5c, 5d   InceptionA (pool features 32, 64, 64)   35x35  256, 288, 288
    Mixed_6a           InceptionB (grid reduction)             17x17  768
    Mixed_6b..6e       InceptionC (c7 = 128, 160, 160, 192)    17x17  768
    Mixed_7a           InceptionD (grid reduction)              8x8   1280
    Mixed_7b, 7c       InceptionE (1x3 / 3x1 split branches)    8x8   2048
    global avg pool -> flatten -> Gemm 1000

InceptionC factorises 7x7 into 1x7 and 7x1 convs; InceptionE ends its 3x3 branches in
parallel 1x3 and 3x1 convs that are concatenated. Branch average pools are 3x3, stride
1, pad 1 with count_include_pad=True (the F.avg_pool2d default torchvision uses).
94 convolutions, 15 concats; 23,817,352 parameters after BN folding (torchvision's
27,161,264 less the aux head's 3,326,696, then less the BN scale and shift of 17,216
channels plus one bias per folded conv channel).
"""

from __future__ import annotations

from taso_env.engine.builder import GraphBuilder, Tensor
from taso_env.engine.graph import Graph
from taso_env.graphs import register
from taso_env.graphs.blocks import classifier, conv_relu


def _pool_branch(b: GraphBuilder, x: Tensor, channels: int, name: str) -> Tensor:
    x = b.avg_pool(x, 3, stride=1, padding=1, count_include_pad=True)
    return conv_relu(b, x, channels, 1, name=name)


def inception_a(b: GraphBuilder, x: Tensor, pool_features: int, name: str) -> Tensor:
    b1 = conv_relu(b, x, 64, 1, name=f"{name}.branch1x1")
    b5 = conv_relu(b, x, 48, 1, name=f"{name}.branch5x5_1")
    b5 = conv_relu(b, b5, 64, 5, padding=2, name=f"{name}.branch5x5_2")
    b3 = conv_relu(b, x, 64, 1, name=f"{name}.branch3x3dbl_1")
    b3 = conv_relu(b, b3, 96, 3, padding=1, name=f"{name}.branch3x3dbl_2")
    b3 = conv_relu(b, b3, 96, 3, padding=1, name=f"{name}.branch3x3dbl_3")
    bp = _pool_branch(b, x, pool_features, f"{name}.branch_pool")
    return b.concat([b1, b5, b3, bp], axis=1)


def inception_b(b: GraphBuilder, x: Tensor, name: str) -> Tensor:
    b3 = conv_relu(b, x, 384, 3, stride=2, name=f"{name}.branch3x3")
    bd = conv_relu(b, x, 64, 1, name=f"{name}.branch3x3dbl_1")
    bd = conv_relu(b, bd, 96, 3, padding=1, name=f"{name}.branch3x3dbl_2")
    bd = conv_relu(b, bd, 96, 3, stride=2, name=f"{name}.branch3x3dbl_3")
    bp = b.max_pool(x, 3, stride=2)
    return b.concat([b3, bd, bp], axis=1)


def inception_c(b: GraphBuilder, x: Tensor, c7: int, name: str) -> Tensor:
    b1 = conv_relu(b, x, 192, 1, name=f"{name}.branch1x1")
    b7 = conv_relu(b, x, c7, 1, name=f"{name}.branch7x7_1")
    b7 = conv_relu(b, b7, c7, (1, 7), padding=(0, 3), name=f"{name}.branch7x7_2")
    b7 = conv_relu(b, b7, 192, (7, 1), padding=(3, 0), name=f"{name}.branch7x7_3")
    bd = conv_relu(b, x, c7, 1, name=f"{name}.branch7x7dbl_1")
    bd = conv_relu(b, bd, c7, (7, 1), padding=(3, 0), name=f"{name}.branch7x7dbl_2")
    bd = conv_relu(b, bd, c7, (1, 7), padding=(0, 3), name=f"{name}.branch7x7dbl_3")
    bd = conv_relu(b, bd, c7, (7, 1), padding=(3, 0), name=f"{name}.branch7x7dbl_4")
    bd = conv_relu(b, bd, 192, (1, 7), padding=(0, 3), name=f"{name}.branch7x7dbl_5")
    bp = _pool_branch(b, x, 192, f"{name}.branch_pool")
    return b.concat([b1, b7, bd, bp], axis=1)


def inception_d(b: GraphBuilder, x: Tensor, name: str) -> Tensor:
    b3 = conv_relu(b, x, 192, 1, name=f"{name}.branch3x3_1")
    b3 = conv_relu(b, b3, 320, 3, stride=2, name=f"{name}.branch3x3_2")
    b7 = conv_relu(b, x, 192, 1, name=f"{name}.branch7x7x3_1")
    b7 = conv_relu(b, b7, 192, (1, 7), padding=(0, 3), name=f"{name}.branch7x7x3_2")
    b7 = conv_relu(b, b7, 192, (7, 1), padding=(3, 0), name=f"{name}.branch7x7x3_3")
    b7 = conv_relu(b, b7, 192, 3, stride=2, name=f"{name}.branch7x7x3_4")
    bp = b.max_pool(x, 3, stride=2)
    return b.concat([b3, b7, bp], axis=1)


def inception_e(b: GraphBuilder, x: Tensor, name: str) -> Tensor:
    b1 = conv_relu(b, x, 320, 1, name=f"{name}.branch1x1")
    b3 = conv_relu(b, x, 384, 1, name=f"{name}.branch3x3_1")
    b3 = b.concat([conv_relu(b, b3, 384, (1, 3), padding=(0, 1), name=f"{name}.branch3x3_2a"),
                   conv_relu(b, b3, 384, (3, 1), padding=(1, 0), name=f"{name}.branch3x3_2b")],
                  axis=1)
    bd = conv_relu(b, x, 448, 1, name=f"{name}.branch3x3dbl_1")
    bd = conv_relu(b, bd, 384, 3, padding=1, name=f"{name}.branch3x3dbl_2")
    bd = b.concat([conv_relu(b, bd, 384, (1, 3), padding=(0, 1), name=f"{name}.branch3x3dbl_3a"),
                   conv_relu(b, bd, 384, (3, 1), padding=(1, 0), name=f"{name}.branch3x3dbl_3b")],
                  axis=1)
    bp = _pool_branch(b, x, 192, f"{name}.branch_pool")
    return b.concat([b1, b3, bd, bp], axis=1)


@register("inception_v3")
def inception_v3(batch_size: int = 1, image_size: int = 299, num_classes: int = 1000,
                 seed: int | None = 0) -> Graph:
    """Inception-v3 without the aux head; `seed=None` builds a shape-only graph."""
    b = GraphBuilder("inception_v3", seed=seed)
    x = b.input("input", [batch_size, 3, image_size, image_size])
    x = conv_relu(b, x, 32, 3, stride=2, name="Conv2d_1a_3x3")
    x = conv_relu(b, x, 32, 3, name="Conv2d_2a_3x3")
    x = conv_relu(b, x, 64, 3, padding=1, name="Conv2d_2b_3x3")
    x = b.max_pool(x, 3, stride=2)
    x = conv_relu(b, x, 80, 1, name="Conv2d_3b_1x1")
    x = conv_relu(b, x, 192, 3, name="Conv2d_4a_3x3")
    x = b.max_pool(x, 3, stride=2)
    for name, pool_features in (("Mixed_5b", 32), ("Mixed_5c", 64), ("Mixed_5d", 64)):
        x = inception_a(b, x, pool_features, name)
    x = inception_b(b, x, "Mixed_6a")
    for name, c7 in (("Mixed_6b", 128), ("Mixed_6c", 160), ("Mixed_6d", 160), ("Mixed_6e", 192)):
        x = inception_c(b, x, c7, name)
    x = inception_d(b, x, "Mixed_7a")
    x = inception_e(b, x, "Mixed_7b")
    x = inception_e(b, x, "Mixed_7c")
    b.output(classifier(b, x, num_classes), "output")
    return b.build()
