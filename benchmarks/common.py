"""Shared helpers of the benchmarks: timing, machine description, output format
(one JSON line, then a markdown table)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence


def file_sha(path: str) -> str:
    """The first 16 hex digits of the file's SHA-256 (which cost table a run priced with)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of `fn()` over `repeats` runs after `warmup` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def machine() -> dict:
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "python": platform.python_version()}


def emit(benchmark: str, rows: Sequence[dict], columns: Sequence[str], **extra) -> None:
    """Prints the JSON line and the markdown table of a benchmark."""
    print(json.dumps({"benchmark": benchmark, "machine": machine(), **extra, "rows": list(rows)}))
    print()
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        cells = [f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in columns]
        print("| " + " | ".join(cells) + " |")
