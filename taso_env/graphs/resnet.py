"""ResNet-18 and ResNet-50 (He et al., "Deep Residual Learning for Image Recognition",
CVPR 2016), laid out as `torchvision.models.resnet18/50` exported to ONNX in eval mode:
every BatchNorm is folded into the preceding convolution's bias, and a conv followed by
ReLU carries it as a fused activation.

Input "input" [1, 3, 224, 224] -> output "output" [1, 1000].

    conv 7x7/2 64 + relu -> maxpool 3x3/2 pad 1             56x56
    layer1..layer4: blocks at 64, 128, 256, 512 planes      56, 28, 14, 7
    global avg pool -> flatten -> Gemm 1000

ResNet-18 uses basic blocks [2, 2, 2, 2] (conv3x3 + relu, conv3x3, add, relu); 20 convs,
11,684,712 parameters after folding. ResNet-50 uses bottlenecks [3, 4, 6, 3] of
expansion 4 (conv1x1 + relu, conv3x3 + relu, conv1x1, add, relu) with the stride on the
3x3 conv (ResNet v1.5, as torchvision); 53 convs, 25,530,472 parameters after folding.
The first block of a stage whose stride or width changes has a downsample conv 1x1
(with the stage's stride) on its shortcut.

`resnet_network` also builds ResNeXt (see resnext.py) through `groups` and
`width_per_group`.
"""

from __future__ import annotations

from collections.abc import Sequence

from taso_env.engine.builder import GraphBuilder, Tensor
from taso_env.engine.graph import Graph
from taso_env.graphs import register
from taso_env.graphs.blocks import classifier, conv_relu


def basic_block(b: GraphBuilder, x: Tensor, planes: int, stride: int, name: str) -> Tensor:
    """conv3x3(stride) + relu -> conv3x3 -> add shortcut -> relu (expansion 1)."""
    y = conv_relu(b, x, planes, 3, stride=stride, padding=1, name=f"{name}.conv1")
    y = conv_relu(b, y, planes, 3, padding=1, relu=False, name=f"{name}.conv2")
    if stride != 1 or x.shape[1] != planes:
        x = conv_relu(b, x, planes, 1, stride=stride, relu=False, name=f"{name}.downsample")
    return b.relu(b.add(y, x))


def bottleneck(b: GraphBuilder, x: Tensor, planes: int, stride: int, name: str,
               groups: int = 1, width_per_group: int = 64) -> Tensor:
    """conv1x1 + relu -> conv3x3(stride, groups) + relu -> conv1x1 (4 * planes) -> add
    shortcut -> relu. The inner width is planes * width_per_group / 64 * groups."""
    width = planes * width_per_group // 64 * groups
    out = planes * 4
    y = conv_relu(b, x, width, 1, name=f"{name}.conv1")
    y = conv_relu(b, y, width, 3, stride=stride, padding=1, groups=groups, name=f"{name}.conv2")
    y = conv_relu(b, y, out, 1, relu=False, name=f"{name}.conv3")
    if stride != 1 or x.shape[1] != out:
        x = conv_relu(b, x, out, 1, stride=stride, relu=False, name=f"{name}.downsample")
    return b.relu(b.add(y, x))


def resnet_network(name: str, layers: Sequence[int], block: str = "bottleneck",
                   groups: int = 1, width_per_group: int = 64, batch_size: int = 1,
                   image_size: int = 224, num_classes: int = 1000,
                   seed: int | None = 0) -> Graph:
    """A torchvision-style ResNet/ResNeXt with BN folded; `block` is "basic" or
    "bottleneck", `layers` the number of blocks of each of the four stages."""
    if block not in ("basic", "bottleneck"):
        raise ValueError(f"block must be 'basic' or 'bottleneck', got {block!r}")
    b = GraphBuilder(name, seed=seed)
    x = b.input("input", [batch_size, 3, image_size, image_size])
    x = conv_relu(b, x, 64, 7, stride=2, padding=3, name="conv1")
    x = b.max_pool(x, 3, stride=2, padding=1)
    for stage, (planes, count) in enumerate(zip((64, 128, 256, 512), layers)):
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            block_name = f"layer{stage + 1}.{i}"
            if block == "basic":
                x = basic_block(b, x, planes, stride, block_name)
            else:
                x = bottleneck(b, x, planes, stride, block_name, groups, width_per_group)
    b.output(classifier(b, x, num_classes), "output")
    return b.build()


@register("resnet18")
def resnet18(batch_size: int = 1, image_size: int = 224, num_classes: int = 1000,
             seed: int | None = 0) -> Graph:
    """ResNet-18 (basic blocks [2, 2, 2, 2]); `seed=None` builds a shape-only graph."""
    return resnet_network("resnet18", [2, 2, 2, 2], block="basic", batch_size=batch_size,
                          image_size=image_size, num_classes=num_classes, seed=seed)


@register("resnet50")
def resnet50(batch_size: int = 1, image_size: int = 224, num_classes: int = 1000,
             seed: int | None = 0) -> Graph:
    """ResNet-50 v1.5 (bottlenecks [3, 4, 6, 3]); `seed=None` builds a shape-only graph."""
    return resnet_network("resnet50", [3, 4, 6, 3], block="bottleneck", batch_size=batch_size,
                          image_size=image_size, num_classes=num_classes, seed=seed)
