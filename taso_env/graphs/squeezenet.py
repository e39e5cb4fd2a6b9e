"""SqueezeNet 1.1 (Iandola et al., "SqueezeNet: AlexNet-level accuracy with 50x fewer
parameters and <0.5MB model size", 2016; version 1.1 from the SqueezeNet GitHub
repository), laid out as `torchvision.models.squeezenet1_1` exported to ONNX in eval mode.

Input "input" [1, 3, 224, 224] -> output "output" [1, 1000].

    conv 3x3/2 64 + relu                  111x111
    maxpool 3x3/2 (ceil_mode)              55x55
    fire(16, 64, 64) x2                    55x55  (128 channels)
    maxpool 3x3/2 (ceil_mode)              27x27
    fire(32, 128, 128) x2                  27x27  (256)
    maxpool 3x3/2 (ceil_mode)              13x13
    fire(48, 192, 192) x2, fire(64, 256, 256) x2   13x13 (384, 384, 512, 512)
    conv 1x1 1000 + relu -> global avg pool -> flatten

A fire module is squeeze conv 1x1 + relu, then expand conv 1x1 + relu and expand conv
3x3 (pad 1) + relu, concatenated on channels. Dropout is the identity at inference.
26 convolutions, 8 concats, 3 max pools; 1,235,496 parameters (as torchvision, which
has no BatchNorm here).
"""

from __future__ import annotations

from taso_env.engine.builder import GraphBuilder, Tensor
from taso_env.engine.graph import Graph
from taso_env.graphs import register
from taso_env.graphs.blocks import conv_relu

# (squeeze, expand 1x1, expand 3x3) of the 8 fire modules; None marks a max pool.
FIRE_CONFIG_1_1 = [None, (16, 64, 64), (16, 64, 64), None, (32, 128, 128), (32, 128, 128),
                   None, (48, 192, 192), (48, 192, 192), (64, 256, 256), (64, 256, 256)]


def fire(b: GraphBuilder, x: Tensor, squeeze: int, expand1x1: int, expand3x3: int,
         name: str = "fire") -> Tensor:
    """Squeeze 1x1 -> (expand 1x1 | expand 3x3) -> concat, every conv with a ReLU."""
    s = conv_relu(b, x, squeeze, 1, name=f"{name}.squeeze")
    e1 = conv_relu(b, s, expand1x1, 1, name=f"{name}.expand1x1")
    e3 = conv_relu(b, s, expand3x3, 3, padding=1, name=f"{name}.expand3x3")
    return b.concat([e1, e3], axis=1)


@register("squeezenet")
def squeezenet(batch_size: int = 1, image_size: int = 224, num_classes: int = 1000,
               seed: int | None = 0) -> Graph:
    """SqueezeNet 1.1; `seed=None` builds a shape-only graph (weights without data)."""
    b = GraphBuilder("squeezenet", seed=seed)
    x = b.input("input", [batch_size, 3, image_size, image_size])
    x = conv_relu(b, x, 64, 3, stride=2, name="features.conv")
    for i, cfg in enumerate(FIRE_CONFIG_1_1):
        if cfg is None:
            x = b.max_pool(x, 3, stride=2, ceil_mode=True)
        else:
            x = fire(b, x, *cfg, name=f"features.fire{i}")
    x = conv_relu(b, x, num_classes, 1, name="classifier.conv")
    b.output(b.flatten(b.global_avg_pool(x)), "output")
    return b.build()
