"""Runs one fuzz harness as N independent atheris processes (distinct seeds) for a fixed
time and adds up what they did: inputs executed, outcomes, crashes and hangs.

    python fuzz/run_parallel.py fuzz/fuzz_rollout_reader.py --workers 16 --seconds 300 \\
        --out fuzz_runs/rollouts -- --guarded --guard-timeout 0.5

Arguments after `--` go to each harness process (harness flags and libFuzzer flags).
Each worker runs in its own folder OUT/worker_<i> (libFuzzer writes `crash-*`,
`timeout-*`, `oom-*` and `leak-*` inputs there) with `-seed=<base + i>
-max_total_time=<seconds> -timeout=<hang_s> -print_final_stats=1` and
FUZZ_REPORT_EVERY=100 (so its last outcome line is at most 99 inputs short), writing
its output to OUT/worker_<i>.log. The inputs executed are libFuzzer's
`stat::number_of_executed_units`; a worker that reports none (killed) counts as a
finding. Prints one JSON line and a markdown table; exit status 1 when any worker found
a crash, a hang or an untyped exception, or did not report.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

_EXECUTED = re.compile(r"stat::number_of_executed_units:\s*(\d+)")
_OUTCOMES = re.compile(r"#outcomes inputs (\d+), ok (\d+), typed rejections (\{.*\})")
_FINDING_FILES = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")


def worker_report(folder: Path, log: Path) -> dict:
    """What one worker did, read from its log and the files libFuzzer left in its folder."""
    text = log.read_text(errors="replace") if log.exists() else ""
    executed = [int(m) for m in _EXECUTED.findall(text)]
    outcomes = _OUTCOMES.findall(text)
    counts: collections.Counter[str] = collections.Counter()
    counted = 0
    if outcomes:
        total, ok, rejected = outcomes[-1]
        counted = int(total)
        counts["ok"] = int(ok)
        counts.update(ast.literal_eval(rejected))
    findings = sorted(p.name for p in folder.iterdir() if p.name.startswith(_FINDING_FILES)
                      or p.name.startswith("finding-")) if folder.exists() else []
    return {"executed": executed[-1] if executed else None, "counted": counted,
            "outcomes": dict(counts), "findings": findings,
            "untyped": {k: v for k, v in counts.items() if k.startswith("FINDING")}}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    passed: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, passed = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("harness", help="a fuzz/fuzz_*.py harness")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--seconds", type=int, default=300, help="each worker's -max_total_time")
    ap.add_argument("--hang-s", type=int, default=10, help="libFuzzer's -timeout: an input past it is a hang")
    ap.add_argument("--seed", type=int, default=1000, help="worker i runs with -seed=SEED+i")
    ap.add_argument("--out", required=True, help="a folder for the workers' folders and logs")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args(argv)
    if args.workers < 1 or args.seconds < 1:
        ap.error("--workers and --seconds must be positive")
    harness = Path(args.harness).resolve()
    if not harness.is_file():
        ap.error(f"no harness file {harness}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, FUZZ_KEEP_GOING="1", FUZZ_REPORT_EVERY="100")
    started = time.time()
    procs = []
    for i in range(args.workers):
        folder = out / f"worker_{i}"
        folder.mkdir(exist_ok=True)
        cmd = [args.python, str(harness), *passed, f"-seed={args.seed + i}",
               f"-max_total_time={args.seconds}", f"-timeout={args.hang_s}", "-print_final_stats=1"]
        log = open(out / f"worker_{i}.log", "w")
        procs.append((subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    rcs = []
    for proc, log in procs:
        rcs.append(proc.wait())
        log.close()
    wall = time.time() - started
    reports = [worker_report(out / f"worker_{i}", out / f"worker_{i}.log") for i in range(args.workers)]
    outcomes: collections.Counter[str] = collections.Counter()
    for r in reports:
        outcomes.update(r["outcomes"])
    silent = [i for i, r in enumerate(reports) if r["executed"] is None]
    findings = {i: r["findings"] for i, r in enumerate(reports) if r["findings"]}
    untyped = sum(sum(r["untyped"].values()) for r in reports)
    hangs = sum(1 for r in reports for f in r["findings"] if f.startswith(("timeout-", "slow-unit-")))
    crashes = sum(1 for r in reports for f in r["findings"] if f.startswith(("crash-", "oom-", "leak-")))
    executed = sum(r["executed"] or 0 for r in reports)
    summary = {"harness": harness.name, "args": passed, "workers": args.workers,
               "seconds_each": args.seconds, "wall_s": round(wall, 1), "inputs": executed,
               "exec_per_s": round(executed / wall, 1) if wall else None,
               "outcomes_counted": sum(r["counted"] for r in reports),
               "outcomes": dict(sorted(outcomes.items())), "crashes": crashes,
               f"hangs_over_{args.hang_s}s": hangs, "untyped_findings": untyped,
               "workers_without_report": silent, "worker_exit_codes": rcs,
               "finding_files": findings}
    print(json.dumps(summary))
    print(f"\n| harness | workers x s | inputs | exec/s | ok | typed rejections | crashes | hangs > {args.hang_s} s "
          "| untyped | silent workers |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rejected = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()) if k != "ok" and not k.startswith("FINDING"))
    print(f"| {harness.name} {' '.join(passed)} | {args.workers} x {args.seconds} | {executed} | "
          f"{summary['exec_per_s']} | {outcomes['ok']} | {rejected} | {crashes} | {hangs} | {untyped} | "
          f"{len(silent)} |")
    return 1 if (crashes or hangs or untyped or silent) else 0


if __name__ == "__main__":
    sys.exit(main())
