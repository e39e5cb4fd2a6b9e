#!/usr/bin/env python
"""`torch.compile` as the baseline of bench_vs_pytorch.py, and a warmer of its caches.

    python benchmarks/torch_compile_baseline.py --models resnet50 bert_base ... [--math tf32 fp16 bf16]
        [--compile-mode default max-autotune] [--jobs 6] [--time-limit 240] [--out cold.jsonl]

What bench_vs_pytorch.py and this script share: the PyTorch model of a name (export_zoo's
torchvision / Hugging Face model, or for bert_base transformers' BertModel(BertConfig()),
seq 128), its copy in a math mode, the inductor modes (COMPILE_MODES) and the compiled
call (compile_model: compiled, run once, that first call's time being the compile time).

Run as a script, it compiles every (model, math mode, inductor mode) in a process of its
own, `--jobs` at a time, and prints one JSON line each: {model, math, mode, compile_s,
ok} (compile_s: the first call, dynamo and inductor included, with whatever inductor's
caches held, while the other jobs compile beside it: an upper bound of a cold compile).
Inductor's on-disk caches (FX graphs, AOTAutograd, Triton kernels, autotuning results,
under TORCHINDUCTOR_CACHE_DIR) keep what was compiled, so that bench_vs_pytorch.py,
started afterwards with the same cache folder, compiles the same models from the cache
and its process spends its time on measuring (`--cold-compile` brings these lines into
its rows). Jobs still running after `--time-limit` seconds are stopped and reported
unfinished. Imports torch, torchvision and transformers only (no taso_env): it can run
while rlflow is being built.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from export_zoo import make, torch_outputs  # noqa: E402

HALF = {"fp16": torch.float16, "bf16": torch.bfloat16}

#: inductor mode name -> torch.compile's `mode`. Inductor's own CUDA graphs stay off, so
#: that every compiled call is captured in one CUDA graph by the benchmark, as eager is.
COMPILE_MODES = {"default": None, "max-autotune": "max-autotune-no-cudagraphs"}
#: the benchmark's column prefix of each mode
COLUMN = {"default": "compile", "max-autotune": "compile_ma"}


def set_math(math: str) -> None:
    """TF32 convolutions and GEMMs in "tf32" only (as profile_vs_pytorch.set_math)."""
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = math == "tf32"


def in_math(model, x, math: str):
    """The model and input of a math mode: a 16-bit copy for fp16 / bf16 (integer inputs
    stay as they are)."""
    if math not in HALF:
        return model, x

    def cast(t):
        return t.to(HALF[math]) if t.is_floating_point() else t

    return copy.deepcopy(model).to(HALF[math]), ({k: cast(v) for k, v in x.items()} if isinstance(x, dict) else cast(x))


def torch_bert():
    """transformers' BertModel(BertConfig()) with its pooler (random init, eval, on the
    GPU) and {input_ids, attention_mask} of [1, 128]."""
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(), add_pooling_layer=True).eval().cuda()
    ids = torch.randint(0, 30000, (1, 128), device="cuda")
    return model, {"input_ids": ids, "attention_mask": torch.ones(1, 128, dtype=torch.long, device="cuda")}


def torch_model(name: str):
    """(model on the GPU, input on the GPU) of a benchmark name."""
    if name == "bert_base":
        return torch_bert()
    model, x = make(name)
    return model.cuda(), ({k: v.cuda() for k, v in x.items()} if isinstance(x, dict) else x.cuda())


def channels_last(model, x):
    """A channels-last copy of the model and its image input; None for other inputs."""
    if isinstance(x, dict) or x.dim() != 4:
        return None
    return copy.deepcopy(model).to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)


def cache_counters() -> dict[str, int]:
    """Inductor's FX-graph cache hits and misses so far in this process."""
    from torch._dynamo.utils import counters

    return {k: int(counters["inductor"].get(f"fxgraph_cache_{k}", 0)) for k in ("hit", "miss", "bypass")}


def compile_model(model, x, mode: str = "default"):
    """(fn, compile_s, cache): `fn()` runs the compiled model on `x` without autograd;
    compile_s is the first call (dynamo, inductor and the first run), after a dynamo reset;
    cache says how inductor's FX-graph cache answered ("hit", "miss", "mixed", "bypass")."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(model, mode=COMPILE_MODES[mode])

    def fn():
        with torch.no_grad():
            return torch_outputs(compiled, x)

    before = cache_counters()
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    delta = {k: v - before[k] for k, v in cache_counters().items()}
    cache = ("mixed" if delta["hit"] and delta["miss"] else "hit" if delta["hit"] else "miss" if delta["miss"]
             else "bypass" if delta["bypass"] else "none")
    return fn, seconds, cache


def compile_one(name: str, math: str, mode: str) -> dict:
    set_math(math)
    model, x = in_math(*torch_model(name), math)
    _, seconds, cache = compile_model(model, x, mode)
    return {"model": name, "math": math, "mode": mode, "compile_s": round(seconds, 2), "cache": cache, "ok": True}


def warm(args) -> int:
    jobs = [(m, math, mode) for mode in args.compile_mode for m in args.models for math in args.math]
    pending, running, done = list(jobs), {}, []
    start = time.perf_counter()
    out = open(args.out, "a") if args.out else None
    while pending or running:
        while pending and len(running) < args.jobs and time.perf_counter() - start < args.time_limit:
            job = pending.pop(0)
            cmd = [sys.executable, os.path.abspath(__file__), "--one", *job]
            running[job] = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        for job, p in list(running.items()):
            late = time.perf_counter() - start > args.time_limit
            if p.poll() is None and not late:
                continue
            if p.poll() is None:
                p.kill()
            text = p.communicate()[0]
            del running[job]
            rows = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
            row = rows[-1] if rows else {"model": job[0], "math": job[1], "mode": job[2], "ok": False,
                                         "error": "stopped at the time limit" if late else f"exit {p.returncode}"}
            done.append(row)
            line = json.dumps(row)
            print(line, flush=True)
            if out:
                out.write(line + "\n")
                out.flush()
        if pending and time.perf_counter() - start >= args.time_limit:
            for job in pending:
                print(json.dumps({"model": job[0], "math": job[1], "mode": job[2], "ok": False,
                                  "error": "not started before the time limit"}), flush=True)
            pending = []
        time.sleep(0.5)
    print(json.dumps({"warmed": sum(1 for r in done if r.get("ok")), "jobs": len(jobs),
                      "wall_s": round(time.perf_counter() - start, 1)}), flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["resnet50", "bert_base"])
    ap.add_argument("--math", nargs="*", default=["tf32", "fp16"], choices=["fp32", "tf32", "fp16", "bf16"])
    ap.add_argument("--compile-mode", nargs="*", default=["default"], choices=list(COMPILE_MODES))
    ap.add_argument("--jobs", type=int, default=4, help="compiling processes at a time")
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds; later jobs are stopped")
    ap.add_argument("--out", help="also append the JSON lines to this file")
    ap.add_argument("--one", nargs=3, metavar=("MODEL", "MATH", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        try:
            row = compile_one(*args.one)
        except Exception as e:
            row = {"model": args.one[0], "math": args.one[1], "mode": args.one[2], "ok": False,
                   "error": f"{type(e).__name__}: {e}"[:300]}
        print(json.dumps(row), flush=True)
        return 0
    return warm(args)


if __name__ == "__main__":
    sys.exit(main())
