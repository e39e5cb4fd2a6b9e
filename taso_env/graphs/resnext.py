"""ResNeXt-50 32x4d (Xie et al., "Aggregated Residual Transformations for Deep Neural
Networks", CVPR 2017), laid out as `torchvision.models.resnext50_32x4d` exported to ONNX
in eval mode (BatchNorm folded into conv biases, ReLU fused into the convs).

Input "input" [1, 3, 224, 224] -> output "output" [1, 1000].

It is ResNet-50 v1.5 (see resnet.py: stem, bottleneck stages [3, 4, 6, 3], downsample
1x1 convs, global avg pool, Gemm) with each bottleneck's 3x3 conv grouped: cardinality
32 and 4 channels per group, so the inner width is planes / 64 * 4 * 32:

    stage   planes   inner width (32 groups)   output   spatial
    layer1     64            128                  256     56x56
    layer2    128            256                  512     28x28
    layer3    256            512                 1024     14x14
    layer4    512           1024                 2048      7x7

53 convs (16 of them grouped), 16 Adds; 24,994,792 parameters after BN folding
(torchvision's 25,028,904 less the BN scale and shift, 2 x 34,112 channels, plus one
bias per folded conv channel).

With groups=1 and width_per_group=64 this is ResNet-50 again (same structure, so the
same structural hash as `resnet50`).
"""

from __future__ import annotations

from taso_env.engine.graph import Graph
from taso_env.graphs import register
from taso_env.graphs.resnet import resnet_network


@register("resnext50")
def resnext50(batch_size: int = 1, image_size: int = 224, num_classes: int = 1000,
              groups: int = 32, width_per_group: int = 4, seed: int | None = 0) -> Graph:
    """ResNeXt-50 (32x4d by default); `seed=None` builds a shape-only graph.

    Args:
        groups: cardinality (groups of every bottleneck 3x3 conv).
        width_per_group: channels per group at the first stage (64 planes); each later
            stage doubles it.

    Raises:
        ValueError: `groups` or `width_per_group` not positive.
    """
    if groups < 1 or width_per_group < 1:
        raise ValueError(f"groups and width_per_group must be positive, got {groups}, "
                         f"{width_per_group}")
    return resnet_network("resnext50", [3, 4, 6, 3], block="bottleneck", groups=groups,
                          width_per_group=width_per_group, batch_size=batch_size,
                          image_size=image_size, num_classes=num_classes, seed=seed)
