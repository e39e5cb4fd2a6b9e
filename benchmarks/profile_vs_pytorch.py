#!/usr/bin/env python
"""Where the GPU time goes: rlflow's CUDA executor against PyTorch, per kernel.

    python benchmarks/profile_vs_pytorch.py [--models resnet50 ...] [--math fp32 tf32 fp16 bf16] [--top 12]

Per model and math mode: end-to-end CUDA-graph replay time of both, and the kernels of
one forward pass of each (torch.profiler / CUPTI sees rlflow's cuDNN and own kernels as
well as PyTorch's), summed by kernel name, largest first, with rlflow's per-op-type GPU
time (each op timed in isolation). Prints one JSON line per (model, math).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import torch  # before taso_env: both use the same cuDNN wheel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.gpu import cuda_backend as cb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCHVISION = {"resnet18": 224, "resnet50": 224, "squeezenet1_1": 224, "inception_v3": 299, "mobilenet_v2": 224,
               "mobilenet_v3_large": 224, "efficientnet_b0": 224, "densenet121": 224, "convnext_tiny": 224,
               "vit_b_16": 224}


def set_math(math: str) -> None:
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = math == "tf32"


def torch_model(name: str):
    import torchvision

    kwargs = {"weights": None}
    if name == "inception_v3":
        kwargs.update(aux_logits=False, init_weights=False)
    size = TORCHVISION[name]
    return getattr(torchvision.models, name)(**kwargs).eval().cuda(), torch.randn(1, 3, size, size, device="cuda")


HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}


def in_math(model, x, math: str):
    """The PyTorch model and input of a math mode: a 16-bit copy for fp16 / bf16."""
    if math not in HALF:
        return model, x
    import copy

    def cast(t):
        return t.to(HALF[math]) if t.is_floating_point() else t

    return copy.deepcopy(model).to(HALF[math]), ({k: cast(v) for k, v in x.items()} if isinstance(x, dict) else cast(x))


def graph_replay_ms(fn, warmup: int = 5, samples: int = 20, inner: int = 10) -> float:
    """Median ms of one replay of `fn` captured into a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(warmup):
        g.replay()
    times = []
    for _ in range(samples):
        start.record()
        for _ in range(inner):
            g.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / inner)
    del g
    return float(np.median(times))


def kernels(fn, iters: int = 5) -> list[tuple[str, float, int]]:
    """(kernel name, µs per forward, calls per forward), largest first."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    total: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            total[e.name] += e.device_time
            count[e.name] += 1
    rows = [(k[:110], v / iters, count[k] // iters) for k, v in total.items()]
    return sorted(rows, key=lambda r: -r[1])


def profile_model(name: str, math: str, top: int) -> dict:
    set_math(math)
    path = os.path.join(ROOT, "data", "models", f"{name}.onnx")
    g = te.load_onnx(path) if os.path.exists(path) else te.graphs.build(name, seed=None)
    row: dict = {"model": name, "math": math, "device": cb.device_name(), "torch": torch.__version__}
    with cb.Executor(g, math=math) as ex:
        row["rlflow_ms"] = ex.measure(repeats=30).median_ms
        row["rlflow_steps"] = ex.num_steps
        feeds = {op.name: np.random.default_rng(0).standard_normal(op.outputs[0].shape).astype(np.float32)
                 for op in g.inputs}
        ks = kernels(lambda: ex.run(feeds))
        row["rlflow_kernel_us"] = round(sum(k[1] for k in ks), 1)
        row["rlflow_kernels"] = [(n, round(t, 1), c) for n, t, c in ks[:top]]
    by_type: dict[str, float] = collections.defaultdict(float)
    for i, op in enumerate(g.ops):
        if op.type in ("Input", "Weight"):
            continue
        try:
            by_type[op.type] += cb.measure_op(g, i, math) * 1000
        except Exception:  # folded or unsupported ops
            pass
    row["rlflow_op_us"] = {k: round(v, 1) for k, v in sorted(by_type.items(), key=lambda kv: -kv[1])}
    if name in TORCHVISION:
        model, x = in_math(*torch_model(name), math)
        with torch.no_grad():
            row["torch_ms"] = graph_replay_ms(lambda: model(x))
            ks = kernels(lambda: model(x))
        row["torch_kernel_us"] = round(sum(k[1] for k in ks), 1)
        row["torch_kernels"] = [(n, round(t, 1), c) for n, t, c in ks[:top]]
        del model
        torch.cuda.empty_cache()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["resnet50", "squeezenet1_1", "resnet18", "inception_v3"])
    ap.add_argument("--math", nargs="*", default=["fp32", "tf32"])
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args(argv)
    print(json.dumps({"device": cb.device_info(), "torch": torch.__version__,
                      "cudnn": torch.backends.cudnn.version()}), flush=True)
    for name in args.models:
        for math in args.math:
            try:
                print(json.dumps(profile_model(name, math, args.top)), flush=True)
            except Exception as e:
                print(json.dumps({"model": name, "math": math, "error": f"{type(e).__name__}: {e}"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
