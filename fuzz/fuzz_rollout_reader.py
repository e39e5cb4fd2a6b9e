"""Fuzzes the rollout reader: bytes -> an .h5 file -> RolloutReader + every episode's arrays.

    python fuzz/fuzz_rollout_reader.py -atheris_runs=100000 -timeout=10
    python fuzz/fuzz_rollout_reader.py --guarded ...   # RolloutReader(untrusted=True)
    python fuzz/fuzz_rollout_reader.py --guarded --guard-timeout 0.5 ...   # the guard's limit, s

Byte 0 of an input picks the file the rest becomes: even -> the index file
(rollouts.h5), beside the seed's valid episode file; odd -> episode 0's file, beside the
seed's valid index. Every input must read or be refused with RolloutFormatError (or its
subclasses RuleSetMismatchError, CorruptRolloutError). In-process (the default) a crash
of libhdf5 kills the fuzzer and is reported as a crash; with --guarded each input is
opened as an untrusted file, so such a crash must come back as CorruptRolloutError.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

try:
    import atheris
except ImportError:  # the targets stay importable without it (tests/test_fuzz.py's mutation loop)
    atheris = None

with atheris.instrument_imports(include=["taso_env.env.rollouts"]) if atheris else contextlib.nullcontext():
    from taso_env.env.rollouts import RolloutReader, untrusted_open

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typed_outcome import CORPUS_ROOT, fuzz_main, scratch_folder  # noqa: E402

TARGET = "rollout_reader"
GUARDED = "--guarded" in sys.argv
GUARD_TIMEOUT_S = 5.0  # a hang is reported by the guard before libFuzzer's -timeout=10
_FOLDER = Path(scratch_folder("fuzz_rollouts_"))
_INDEX = _FOLDER / "rollouts.h5"
_EPISODE = _FOLDER / "rollouts.h5.episodes" / "episode_0.h5"
_VALID_INDEX = (CORPUS_ROOT / TARGET / "valid_index").read_bytes()[1:]
_VALID_EPISODE = (CORPUS_ROOT / TARGET / "valid_episode").read_bytes()[1:]


def read_rollout_bytes(data: bytes, guarded: bool = GUARDED) -> None:
    """Writes `data` as the index or episode file (see the module docstring) and reads
    the index and every episode it links to."""
    is_episode = bool(data) and data[0] % 2 == 1
    _EPISODE.parent.mkdir(exist_ok=True)
    _INDEX.write_bytes(_VALID_INDEX if is_episode else data[1:])
    _EPISODE.write_bytes(data[1:] if is_episode else _VALID_EPISODE)
    # a new modification time for each input, so the guard's once-per-content cache never skips one
    os.utime(_EPISODE, ns=(0, read_rollout_bytes.calls))
    read_rollout_bytes.calls += 1
    reader = RolloutReader(_INDEX, untrusted=guarded)
    for episode_id in reader.episode_ids:
        reader.episode(episode_id)
    reader.total_steps()


read_rollout_bytes.calls = 1

if __name__ == "__main__":
    if "--guard-timeout" in sys.argv:  # a shorter limit for long runs: valid seeds read in ~10 ms
        i = sys.argv.index("--guard-timeout")
        GUARD_TIMEOUT_S = float(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    if GUARDED:
        sys.argv.remove("--guarded")
        untrusted_open.CHECK_TIMEOUT_S = GUARD_TIMEOUT_S
    fuzz_main(read_rollout_bytes, TARGET)
