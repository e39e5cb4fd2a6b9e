"""NASNet-A Mobile, "4 @ 1056" (Zoph et al., "Learning Transferable Architectures for
Scalable Image Recognition", CVPR 2018, Fig. 4 cells), laid out as
`keras.applications.NASNetMobile` (the port of TF-Slim's nasnet_mobile) at inference.

Input "input" [1, 3, 224, 224] -> output "output" [1, 1000].

    stem conv 3x3/2 valid 32 + BN                            111x111   32
    reduction cell stem_1 (11 filters)                        56x56    44
    reduction cell stem_2 (22 filters)                        28x28    88
    4 normal cells (44 filters; 6 x 44 = 264 out)             28x28   264
    reduction cell (88)                                       14x14   352
    4 normal cells (88)                                       14x14   528
    reduction cell (176)                                       7x7    704
    4 normal cells (176)                                       7x7   1056 (penultimate)
    relu -> global avg pool -> flatten -> Gemm 1000

Every cell takes the two previous cell outputs (x: the last, p: the one before) and
first adjusts p to x's size (factorized reduction: relu, two 1x1-average-pool/2 paths,
one shifted by a pixel, each a 1x1 conv to half the filters, concat, BN) or width
(relu, 1x1 conv, BN); x goes through relu, 1x1 conv, BN to h. Each cell has 5 blocks
that add two branch ops:

    normal:    sep5(h) + sep3(p),  sep5(p) + sep3(p),  avg3(h) + p,
               avg3(p) + avg3(p),  sep3(h) + h;        concat [p, the 5 sums]
    reduction: sep5/2(h) + sep7/2(p) = x1,  max3/2(h) + sep7/2(p) = x2,
               avg3/2(h) + sep5/2(p) = x3,  avg3(x1) + x2,  sep3(x1) + max3/2(h);
               concat [x2, x3, x4, x5]

A separable branch sepK is twice relu -> depthwise KxK conv -> pointwise 1x1 conv -> BN
(the first depthwise conv carrying the stride). Average pools of stride 1 exclude the
padding ("same" pooling); the stride-2 pools read h zero-padded as Keras does (a Pad op
shared by the three pools). Identical branches (the two avg3(p), the two max3/2(h)) are
kept as separate ops, as in Keras.

Unlike the other CNN builders, this keeps every BatchNorm as an op (eps 1e-3) so that
conv+bn folding rewrites have something to fold; the convs have no bias. 5,326,716
parameters counting BN scale, shift, mean and variance (Keras' total for
NASNetMobile). Simplifications: no auxiliary head and no dropout; the factorized
reduction's one-pixel shift (Keras: ZeroPadding2D bottom/right + Cropping2D top/left)
is a Pad op followed by two Split ops that drop the first row and column (their
unused first outputs stay in the graph).
"""

from __future__ import annotations

from taso_env.engine.builder import GraphBuilder, Tensor
from taso_env.engine.graph import Graph
from taso_env.graphs import register
from taso_env.graphs.blocks import conv_bn

EPS = 1e-3


def _correct_pad(x: Tensor, k: int) -> list[int]:
    """Keras' imagenet_utils.correct_pad for a stride-2 kxk window: (top, left, bottom, right)."""
    adjust = [1 - x.shape[2] % 2, 1 - x.shape[3] % 2]
    return [k // 2 - adjust[0], k // 2 - adjust[1], k // 2, k // 2]


def separable(b: GraphBuilder, x: Tensor, filters: int, k: int, stride: int = 1,
              name: str = "sep") -> Tensor:
    """2 x (relu -> depthwise kxk -> pointwise 1x1 -> BN), the first with `stride`."""
    for i in range(2):
        x = b.relu(x)
        pad = _correct_pad(x, k) if stride == 2 else k // 2
        x = b.conv2d(x, x.shape[1], k, stride=stride, padding=pad, groups=x.shape[1],
                     bias=False, name=f"{name}.{i}.depthwise")
        x = conv_bn(b, x, filters, 1, epsilon=EPS, name=f"{name}.{i}.pointwise")
        stride = 1
    return x


def adjust(b: GraphBuilder, p: Tensor | None, ip: Tensor, filters: int, name: str) -> Tensor:
    """Keras' _adjust_block: bring p to ip's spatial size and to `filters` channels."""
    if p is None:
        return ip
    if p.shape[2] != ip.shape[2]:
        p = b.relu(p)
        p1 = b.avg_pool(p, 1, stride=2)
        p1 = b.conv2d(p1, filters // 2, 1, bias=False, name=f"{name}.path1")
        p2 = b.pad(p, [0, 0, 0, 0, 0, 0, 1, 1])
        p2 = b.split(p2, 2, [1, p.shape[2]])[1]
        p2 = b.split(p2, 3, [1, p.shape[3]])[1]
        p2 = b.avg_pool(p2, 1, stride=2)
        p2 = b.conv2d(p2, filters // 2, 1, bias=False, name=f"{name}.path2")
        return b.batch_norm(b.concat([p1, p2], axis=1), epsilon=EPS, name=f"{name}.bn")
    if p.shape[1] != filters:
        return conv_bn(b, b.relu(p), filters, 1, epsilon=EPS, name=f"{name}.projection")
    return p


def _avg3(b: GraphBuilder, x: Tensor) -> Tensor:
    return b.avg_pool(x, 3, stride=1, padding=1, count_include_pad=False)


def normal_cell(b: GraphBuilder, ip: Tensor, p: Tensor | None, filters: int, name: str) -> Tensor:
    p = adjust(b, p, ip, filters, f"{name}.adjust")
    h = conv_bn(b, b.relu(ip), filters, 1, epsilon=EPS, name=f"{name}.conv1")
    x1 = b.add(separable(b, h, filters, 5, name=f"{name}.left1"),
               separable(b, p, filters, 3, name=f"{name}.right1"))
    x2 = b.add(separable(b, p, filters, 5, name=f"{name}.left2"),
               separable(b, p, filters, 3, name=f"{name}.right2"))
    x3 = b.add(_avg3(b, h), p)
    x4 = b.add(_avg3(b, p), _avg3(b, p))
    x5 = b.add(separable(b, h, filters, 3, name=f"{name}.left5"), h)
    return b.concat([p, x1, x2, x3, x4, x5], axis=1)


def reduction_cell(b: GraphBuilder, ip: Tensor, p: Tensor | None, filters: int,
                   name: str) -> Tensor:
    p = adjust(b, p, ip, filters, f"{name}.adjust")
    h = conv_bn(b, b.relu(ip), filters, 1, epsilon=EPS, name=f"{name}.conv1")
    h3 = b.pad(h, [0, 0] + _correct_pad(h, 3)[:2] + [0, 0] + _correct_pad(h, 3)[2:])
    x1 = b.add(separable(b, h, filters, 5, 2, name=f"{name}.left1"),
               separable(b, p, filters, 7, 2, name=f"{name}.right1"))
    x2 = b.add(b.max_pool(h3, 3, stride=2),
               separable(b, p, filters, 7, 2, name=f"{name}.right2"))
    x3 = b.add(b.avg_pool(h3, 3, stride=2, count_include_pad=True),
               separable(b, p, filters, 5, 2, name=f"{name}.right3"))
    x4 = b.add(_avg3(b, x1), x2)
    x5 = b.add(separable(b, x1, filters, 3, name=f"{name}.left5"), b.max_pool(h3, 3, stride=2))
    return b.concat([x2, x3, x4, x5], axis=1)


@register("nasnet_a")
def nasnet_a(penultimate_filters: int = 1056, num_blocks: int = 4, stem_filters: int = 32,
             filter_multiplier: int = 2, image_size: int = 224, num_classes: int = 1000,
             batch_size: int = 1, seed: int | None = 0) -> Graph:
    """NASNet-A (Mobile by default: 4 normal cells per stack, 1056 penultimate filters);
    `seed=None` builds a shape-only graph."""
    if penultimate_filters % (24 * filter_multiplier ** 2):
        raise ValueError("penultimate_filters must be a multiple of 24 * filter_multiplier**2")
    filters = penultimate_filters // 24
    b = GraphBuilder("nasnet_a", seed=seed)
    x = b.input("input", [batch_size, 3, image_size, image_size])
    x = conv_bn(b, x, stem_filters, 3, stride=2, epsilon=EPS, name="stem")
    x, p = reduction_cell(b, x, None, filters // filter_multiplier ** 2, "stem_1"), x
    x, p = reduction_cell(b, x, p, filters // filter_multiplier, "stem_2"), x
    cell = 0
    for stack in range(3):
        width = filters * filter_multiplier ** stack
        if stack > 0:
            x, p = reduction_cell(b, x, p, width, f"reduce{stack}"), x
        for _ in range(num_blocks):
            x, p = normal_cell(b, x, p, width, f"cell{cell}"), x
            cell += 1
    x = b.gemm(b.flatten(b.global_avg_pool(b.relu(x))), num_classes, name="predictions")
    b.output(x, "output")
    return b.build()
