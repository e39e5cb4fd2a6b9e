"""Cost of RolloutReader(untrusted=True): the check in a forked child, against a plain open.

    python benchmarks/bench_untrusted_open.py

Opens the fuzz corpus's seed rollout (one 2-step episode) and reads every episode, 30
times each way; prints median and minimum milliseconds. Output committed in
benchmarks/results/2026-11-28_fuzzing.txt.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from taso_env.env.rollouts import RolloutReader

SEEDS = Path(__file__).resolve().parent.parent / "fuzz" / "corpus" / "rollout_reader"
REPEATS = 30


def main() -> None:
    folder = Path(tempfile.mkdtemp())
    index = folder / "rollouts.h5"
    index.write_bytes((SEEDS / "valid_index").read_bytes()[1:])  # byte 0 is the harness's file tag
    (folder / "rollouts.h5.episodes").mkdir()
    episode = folder / "rollouts.h5.episodes" / "episode_0.h5"
    episode.write_bytes((SEEDS / "valid_episode").read_bytes()[1:])

    def open_and_read(untrusted: bool, new_content: bool) -> float:
        if new_content:  # a new modification time: the guard checks the file again
            os.utime(episode, ns=(0, time.time_ns()))
        start = time.perf_counter()
        reader = RolloutReader(index, untrusted=untrusted)
        for episode_id in reader.episode_ids:
            reader.episode(episode_id)
        return (time.perf_counter() - start) * 1e3

    for label, untrusted, new_content in [("trusted (default)", False, True),
                                          ("untrusted, first open of a content", True, True),
                                          ("untrusted, same content again", True, False)]:
        ms = [open_and_read(untrusted, new_content) for _ in range(REPEATS)]
        print(f"{label:40s} median {statistics.median(ms):7.2f} ms  min {min(ms):7.2f} ms")


if __name__ == "__main__":
    main()
