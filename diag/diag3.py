import collections
import taso_env as te
from taso_env.gpu import cuda_backend as cb
g = te.load_onnx("data/models/resnet50.onnx")
for math in ("tf32", "fp16"):
    rows, _ = cb.measure_op_costs(g, math=math)
    by = collections.Counter()
    for sig, t, ms, _ in rows:
        by[t] += ms
    print(math, {k: round(v, 3) for k, v in by.most_common()}, "measured", round(cb.measure(g, math=math).median_ms, 3), flush=True)
rows16 = {s: ms for s, t, ms, _ in cb.measure_op_costs(g, math="fp16")[0] if t == "Conv2D"}
rows32 = {s: ms for s, t, ms, _ in cb.measure_op_costs(g, math="tf32")[0] if t == "Conv2D"}
worst = sorted(rows16, key=lambda s: rows16[s] - rows32[s], reverse=True)[:5]
for s in worst:
    print(round(rows32[s], 4), round(rows16[s], 4), s[:120])
