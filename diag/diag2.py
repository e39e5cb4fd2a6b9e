import os, numpy as np
import taso_env as te
from taso_env.engine import reference
from taso_env.engine.builder import GraphBuilder
from taso_env.gpu import cuda_backend as cb

def mk(name, fn, shape):
    b = GraphBuilder(name, seed=0)
    x = b.input("x", shape)
    b.output(fn(b, x), "y")
    return b.build()

def report(tag, g, math):
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)["y"]
    got = cb.run(g, feeds, math=math)["y"]
    bad = np.abs(got - want) > 1e-2 * max(np.abs(want).max(), 1e-6)
    idx = np.flatnonzero(bad)
    print(f"{tag} {math} n={want.size} bad={idx.size} first={idx[:6].tolist()} got={got.ravel()[idx[:3]].tolist()} want={want.ravel()[idx[:3]].tolist()}", flush=True)

os.environ["RLFLOW_FUSE"] = "0"
for n in (105, 1024, 4096, 65536, 200704):
    for math in ("fp16", "fp32"):
        report(f"relu_unfused", mk("r", lambda b, x: b.relu(x), [1, n]), math)
report("bn_unfused", mk("bn", lambda b, x: b.batch_norm(x), [1, 8, 4, 4]), "fp16")
report("bn_unfused", mk("bn", lambda b, x: b.batch_norm(x), [1, 64, 56, 56]), "fp16")
os.environ["RLFLOW_FUSE"] = "1"
for c, hw in ((4, 8), (16, 8), (64, 8), (64, 16), (16, 56), (64, 56)):
    report(f"conv3x3 c{c} hw{hw}", mk("c", lambda b, x: b.conv2d(x, c, 3, padding=1, bias=False), [1, c, hw, hw]), "fp16")
for c, hw in ((64, 56),):
    report(f"conv1x1 c{c} hw{hw}", mk("c", lambda b, x: b.conv2d(x, c, 1, bias=False), [1, c, hw, hw]), "fp16")
os.environ["RLFLOW_TUNE_LOG"] = "1"
report("conv3x3 c64 hw56 log", mk("c", lambda b, x: b.conv2d(x, 64, 3, padding=1, bias=False), [1, 64, 56, 56]), "fp16")
