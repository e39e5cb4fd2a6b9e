#!/usr/bin/env python
"""Exports the model zoo of data/models/ (run on the GPU machine, which has torch,
torchvision and transformers; nothing is downloaded).

    python benchmarks/export_zoo.py OUT_DIR [--models resnet18 ...]

Every model: random init (torchvision `weights=None`), ±1e-3 uniform noise on every
float parameter and buffer (BatchNorm running_var positive only) so that no two
initializers are equal, eval mode, batch 1, TorchScript exporter (opset 17, constant
folding, which folds BatchNorm into Conv; the dynamo exporter, opset 18, for ViT),
then the float weights stripped: each weight initializer becomes a graph input of the same name, dtype and shape with
`doc_string = "weight: initializer data stripped"` (integer/bool initializers of at
most 4096 elements and float scalars stay). The full export is checked against PyTorch
in onnxruntime before stripping; the stripped file passes the ONNX checker and strict
shape inference. Prints one JSON line per model.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import sys

MODELS = {
    "resnet18": ("resnet18", 224), "resnet50": ("resnet50", 224), "squeezenet1_1": ("squeezenet1_1", 224),
    "inception_v3": ("inception_v3", 299), "mobilenet_v2": ("mobilenet_v2", 224),
    "mobilenet_v3_large": ("mobilenet_v3_large", 224), "efficientnet_b0": ("efficientnet_b0", 224),
    "densenet121": ("densenet121", 224), "convnext_tiny": ("convnext_tiny", 224), "vit_b_16": ("vit_b_16", 224),
}


def make(name: str):
    import torch
    import torchvision

    fn, size = MODELS[name]
    kwargs = {"weights": None}
    if name == "inception_v3":
        kwargs.update(aux_logits=False, init_weights=False)
    model = getattr(torchvision.models, fn)(**kwargs).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for pname, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.dtype.is_floating_point:
                continue
            noise = (torch.rand(t.shape, generator=g) * 2 - 1) * 1e-3
            t.add_(noise.abs() if pname.endswith("running_var") else noise)
    return model, torch.randn(1, 3, size, size, generator=g)


# The TorchScript exporter leaves ViT's class-token Expand with a dynamic dimension; the
# dynamo exporter gives a fully static graph (opset 18).
DYNAMO = {"vit_b_16"}


def export_full(name: str, model, x):
    """The ONNX export of `model` on input `x`, weights kept (a ModelProto)."""
    import onnx
    import torch

    if name in DYNAMO:
        prog = torch.onnx.export(model, (x,), input_names=["input"], output_names=["output"], opset_version=18,
                                 dynamo=True, optimize=True)
        return prog.model_proto
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, input_names=["input"], output_names=["output"], opset_version=17,
                      do_constant_folding=True, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def strip(model_bytes: bytes, source: str):
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    m = onnx.load_from_string(model_bytes)
    keep, inputs = [], []
    for init in m.graph.initializer:
        arr = numpy_helper.to_array(init)
        small_int = arr.dtype.kind in "iub" and arr.size <= 4096
        if small_int or (arr.dtype.kind == "f" and arr.size == 1):
            keep.append(init)
            continue
        vi = helper.make_tensor_value_info(init.name, init.data_type, list(init.dims))
        vi.doc_string = "weight: initializer data stripped"
        inputs.append(vi)
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    m.graph.input.extend(inputs)
    del m.metadata_props[:]
    for k, v in (("weights_stripped", "true"), ("source", source)):
        m.metadata_props.add(key=k, value=v)
    onnx.checker.check_model(m, full_check=True)
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    np.random.seed(0)
    return m


def export(name: str, out_dir: str) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort
    import torch

    model, x = make(name)
    full = export_full(name, model, x).SerializeToString()
    sess = ort.InferenceSession(full, providers=["CPUExecutionProvider"])
    got = sess.run(None, {"input": x.numpy()})[0]
    with torch.no_grad():
        want = model(x).numpy()
    diff = float(np.abs(got - want).max())
    m = strip(full, f"torchvision.models.{MODELS[name][0]}(weights=None), torch {torch.__version__}")
    path = os.path.join(out_dir, f"{name}.onnx")
    onnx.save(m, path)
    hist = collections.Counter(n.op_type for n in m.graph.node)
    params = sum(int(np.prod([d.dim_value for d in i.type.tensor_type.shape.dim]))
                 for i in m.graph.input if i.doc_string.startswith("weight"))
    return {"model": name, "ort_vs_torch_max_abs": diff, "nodes": len(m.graph.node),
            "weight_inputs": sum(1 for i in m.graph.input if i.doc_string.startswith("weight")),
            "params_m": round(params / 1e6, 2), "bytes": os.path.getsize(path), "ops": dict(hist.most_common())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    ok = True
    for name in args.models:
        try:
            print(json.dumps(export(name, args.out_dir)), flush=True)
        except Exception as e:  # report and go on with the other models
            ok = False
            print(json.dumps({"model": name, "error": f"{type(e).__name__}: {e}"}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
