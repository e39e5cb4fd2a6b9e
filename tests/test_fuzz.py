"""A short fuzz run of the three input loaders (fuzz/; the long runs:
benchmarks/results/2026-11-28_fuzzing.txt), and the guard that opens untrusted rollout
files.

Every input must load or be refused with a typed rlflow error (TasoEnvError). The seeded
mutation loop needs nothing but the committed corpus; the atheris runs are skipped when
atheris is not installed.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from taso_env.env.rollouts import CorruptRolloutError, RolloutFormatError, RolloutReader, untrusted_open
from taso_env.errors import TasoEnvError

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"
sys.path.insert(0, str(FUZZ))

import fuzz_onnx_loader  # noqa: E402
import fuzz_rollout_reader  # noqa: E402
import fuzz_rule_loader  # noqa: E402
from typed_outcome import corpus_inputs  # noqa: E402

TARGETS = {"onnx_loader": (fuzz_onnx_loader.load_onnx_bytes, 150),
           "rule_loader": (fuzz_rule_loader.load_rule_bytes, 150),
           "rollout_reader": (fuzz_rollout_reader.read_rollout_bytes, 40)}


def _mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One to four random edits: flip, overwrite, insert or delete bytes, or truncate."""
    buf = bytearray(data)
    for _ in range(int(rng.integers(1, 5))):
        kind = int(rng.integers(5))
        at = int(rng.integers(len(buf) + 1))
        if kind == 0 and buf:
            buf[min(at, len(buf) - 1)] ^= 1 << int(rng.integers(8))
        elif kind == 1 and buf:
            buf[min(at, len(buf) - 1)] = int(rng.integers(256))
        elif kind == 2:
            buf[at:at] = rng.integers(256, size=int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
        elif kind == 3:
            del buf[at:at + int(rng.integers(1, 9))]
        else:
            del buf[at:]
    if data[:1] and buf[:1] != data[:1]:
        buf[:1] = data[:1]  # keep the rollout harness's file tag: mutate the file, not the choice
    return bytes(buf)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_seed_corpus_is_accepted_or_typed(target):
    load, _ = TARGETS[target]
    ok = 0
    for data in corpus_inputs(target):
        try:
            load(data)
            ok += 1
        except TasoEnvError:
            pass
    assert ok >= 1, f"no valid input in fuzz/corpus/{target}"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_seeded_mutations_end_in_success_or_typed_error(target):
    load, count = TARGETS[target]
    rng = np.random.default_rng(44)
    seeds = corpus_inputs(target)
    outcomes = {"ok": 0, "typed": 0}
    for _ in range(count):
        data = _mutate(seeds[int(rng.integers(len(seeds)))], rng)
        try:
            load(data)
            outcomes["ok"] += 1
        except TasoEnvError:
            outcomes["typed"] += 1
    assert outcomes["typed"] > 0, outcomes


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
@pytest.mark.parametrize("harness,runs", [("fuzz_onnx_loader.py", 300), ("fuzz_rule_loader.py", 100),
                                          ("fuzz_rollout_reader.py", 30)])
def test_atheris_short_run(harness, runs, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FUZZ_KEEP_GOING"}
    proc = subprocess.run([sys.executable, str(FUZZ / harness), f"-atheris_runs={runs}", "-timeout=10",
                           "-max_total_time=8", "-seed=44"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Done" in proc.stderr


REGRESSIONS = {"onnx": fuzz_onnx_loader.load_onnx_bytes, "rules": fuzz_rule_loader.load_rule_bytes,
               "rollout": fuzz_rollout_reader.read_rollout_bytes}


@pytest.mark.parametrize("name", sorted(p.name for p in (FUZZ / "regressions").iterdir()
                                        if "hangs_libhdf5" not in p.name))
def test_earlier_findings_end_in_a_typed_error(name):
    """Inputs the fuzzers found raising a bare KeyError, ValueError, RuntimeError or
    UnicodeDecodeError (fuzz/regressions/<target>_<what>)."""
    with pytest.raises(TasoEnvError):
        REGRESSIONS[name.split("_")[0]]((FUZZ / "regressions" / name).read_bytes())


@pytest.mark.parametrize("name", ["rollout_index_hangs_libhdf5", "rollout_index_hangs_libhdf5_2"])
def test_an_index_that_hangs_libhdf5_is_refused_by_the_guard(name, monkeypatch):
    """libhdf5 loops on these indexes (found by fuzzing): opened as untrusted, the child
    reading one is stopped and the reader refuses it."""
    monkeypatch.setattr(untrusted_open, "CHECK_TIMEOUT_S", 2.0)
    data = (FUZZ / "regressions" / name).read_bytes()
    with pytest.raises(CorruptRolloutError, match="libhdf5 hung"):
        fuzz_rollout_reader.read_rollout_bytes(data, guarded=True)


def _valid_rollout(tmp_path) -> Path:
    index = tmp_path / "rollouts.h5"
    index.write_bytes(fuzz_rollout_reader._VALID_INDEX)
    (tmp_path / "rollouts.h5.episodes").mkdir()
    (tmp_path / "rollouts.h5.episodes" / "episode_0.h5").write_bytes(fuzz_rollout_reader._VALID_EPISODE)
    return index


def test_untrusted_open_reads_a_valid_file_once(tmp_path, monkeypatch):
    index = _valid_rollout(tmp_path)
    reader = RolloutReader(index, untrusted=True)
    assert reader.episode(0).num_steps >= 1
    monkeypatch.setattr(untrusted_open, "_read_everything", lambda path: os._exit(3))
    RolloutReader(index, untrusted=True)  # already checked: no second child
    os.utime(index, ns=(0, time.time_ns() + 10**9))
    with pytest.raises(CorruptRolloutError, match="exited with code 3"):
        RolloutReader(index, untrusted=True)


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="the crash is simulated in a forked child")
def test_a_native_crash_while_reading_becomes_corrupt_rollout_error(tmp_path, monkeypatch):
    index = _valid_rollout(tmp_path)
    def crash(path):
        faulthandler.disable()  # no traceback printed by the dying child
        os.kill(os.getpid(), signal.SIGSEGV)

    monkeypatch.setattr(untrusted_open, "_read_everything", crash)
    with pytest.raises(CorruptRolloutError, match="SIGSEGV") as info:
        RolloutReader(index, untrusted=True)
    assert str(index) in str(info.value)
    assert isinstance(info.value, RolloutFormatError)


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="the crash is simulated in a forked child")
def test_the_child_dies_by_the_signal_not_by_a_handler_the_parent_installed(tmp_path, monkeypatch):
    """A fuzzer (or faulthandler) in the parent installs handlers for fatal signals; the
    forked child must not run them (a fuzzer's would write the input out as a crash of
    its own), but die by the signal, which the parent reports as the cause."""
    import taso_env.env.rollouts.reader as reader_module

    index = _valid_rollout(tmp_path)
    marker = tmp_path / "parent_handler_ran"
    previous = signal.signal(signal.SIGABRT, lambda *_: marker.write_text("ran"))
    try:
        def abort(path):
            os.kill(os.getpid(), signal.SIGABRT)
            time.sleep(1)  # a Python-level handler would run here and the child exit 0

        monkeypatch.setattr(reader_module, "RolloutReader", abort)
        with pytest.raises(CorruptRolloutError, match="SIGABRT") as info:
            RolloutReader(index, untrusted=True)
        assert info.value.cause == "SIGABRT"
        assert not marker.exists()
    finally:
        signal.signal(signal.SIGABRT, previous)


@pytest.mark.skipif("fork" not in __import__("multiprocessing").get_all_start_methods(),
                    reason="the hang is simulated in a forked child")
def test_a_hang_while_reading_becomes_corrupt_rollout_error(tmp_path, monkeypatch):
    index = _valid_rollout(tmp_path)
    monkeypatch.setattr(untrusted_open, "_read_everything", lambda path: time.sleep(60))
    monkeypatch.setattr(untrusted_open, "CHECK_TIMEOUT_S", 0.5)
    monkeypatch.setattr(untrusted_open, "CHECK_SECONDS_PER_MB", 0.0)
    with pytest.raises(CorruptRolloutError, match="did not finish in 0.5 s") as info:
        RolloutReader(index, untrusted=True)
    assert info.value.cause == "hang"
