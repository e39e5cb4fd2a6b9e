import os, sys, numpy as np
import taso_env as te
from taso_env.engine import reference
from taso_env.engine.builder import GraphBuilder
from taso_env.gpu import cuda_backend as cb

def rel(a, b):
    s = max(float(np.max(np.abs(b))), 1e-6)
    return float(np.max(np.abs(a.astype(np.float64) - b))) / s

def mk(name, fn, shape):
    b = GraphBuilder(name, seed=0)
    x = b.input("x", shape)
    b.output(fn(b, x), "y")
    return b.build()

cases = {
 "relu56": (lambda b, x: b.relu(x), [1, 64, 56, 56]),
 "relu_odd": (lambda b, x: b.relu(x), [1, 3, 5, 7]),
 "add_same": (lambda b, x: b.add(b.relu(x), x), [1, 64, 56, 56]),
 "conv3x3": (lambda b, x: b.conv2d(x, 64, 3, padding=1), [1, 64, 56, 56]),
 "conv3x3_nobias": (lambda b, x: b.conv2d(x, 64, 3, padding=1, bias=False), [1, 64, 56, 56]),
 "conv_relu": (lambda b, x: b.conv2d(x, 64, 3, padding=1, activation="relu"), [1, 64, 56, 56]),
 "conv_res_relu": (lambda b, x: b.relu(b.add(b.conv2d(x, 64, 3, padding=1), x)), [1, 64, 56, 56]),
 "conv7s2": (lambda b, x: b.conv2d(x, 64, 7, stride=2, padding=3), [1, 3, 224, 224]),
 "conv1x1": (lambda b, x: b.conv2d(x, 128, 1), [1, 64, 28, 28]),
 "conv_small": (lambda b, x: b.conv2d(x, 8, 3, padding=1), [1, 4, 8, 8]),
 "maxpool": (lambda b, x: b.max_pool(x, 3, 2, 1), [1, 64, 112, 112]),
 "gap": (lambda b, x: b.global_avg_pool(x), [1, 512, 7, 7]),
 "bn": (lambda b, x: b.batch_norm(x), [1, 64, 56, 56]),
 "gemm": (lambda b, x: b.gemm(x, 1000), [1, 512]),
 "linear": (lambda b, x: b.linear(x, 768), [1, 128, 768]),
 "concat": (lambda b, x: b.concat([b.relu(x), b.sigmoid(x)], 1), [1, 64, 28, 28]),
 "sigmoid": (lambda b, x: b.sigmoid(x), [1, 64, 28, 28]),
 "tanh": (lambda b, x: b.tanh(x), [1, 512]),
}
for fuse in ("1", "0"):
    os.environ["RLFLOW_FUSE"] = fuse
    for math in ("fp16",):
        for name, (fn, shape) in cases.items():
            g = mk(name, fn, shape)
            feeds = g.random_inputs(0)
            want = reference.run(g, feeds)
            try:
                got = cb.run(g, feeds, math=math)
                print(f"fuse={fuse} {math} {name}: {rel(got['y'], want['y']):.3g}", flush=True)
            except Exception as e:
                print(f"fuse={fuse} {math} {name}: ERROR {type(e).__name__}: {e}"[:300], flush=True)
        for name in ("resnet18", "nasrnn", "squeezenet"):
            g = te.graphs.build(name, seed=0)
            feeds = g.random_inputs(0)
            want = reference.run(g, feeds)
            got = cb.run(g, feeds, math=math)
            print(f"fuse={fuse} {math} builder {name}: {max(rel(got[k], want[k]) for k in want):.3g}", flush=True)
os.environ["RLFLOW_FUSE"] = "1"
os.environ["RLFLOW_CUDNN_FIND"] = "0"
g = te.graphs.build("resnet18", seed=0)
feeds = g.random_inputs(0)
want = reference.run(g, feeds)
got = cb.run(g, feeds, math="fp16")
print("heuristic conv resnet18 fp16", max(rel(got[k], want[k]) for k in want))
