"""Opening a rollout file that may be hostile or corrupt: libhdf5 checked in a child first.

libhdf5 (beneath h5py) is a C library; a corrupt or crafted file can crash it (a
segmentation fault, an abort) or make it loop, which would take the whole process
down with it instead of raising. `check_in_child(index_path)` reads the index and every
episode file it links to, exactly as `RolloutReader` does, in a forked child process;
if the child dies of a signal or runs past its time limit, that becomes a
`CorruptRolloutError` naming the file, and the parent never touches it. Errors h5py
raises as Python exceptions are left to the reader in the parent, which turns them
into `RolloutFormatError`s.

The check costs one fork and one extra read of the run (measured in
benchmarks/results/2026-11-28_fuzzing.txt), so it runs only for `RolloutReader(...,
untrusted=True)`, and once per file content: a file already checked in this process
with the same size and modification time is not checked again. Files that rlflow
wrote itself in its own run folder are read without it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal

from taso_env.env.rollouts.format import RolloutFormatError

CHECK_TIMEOUT_S = 60.0  # the child's time limit: this, plus CHECK_SECONDS_PER_MB for each MB of the files
CHECK_SECONDS_PER_MB = 1.0
_checked: set[tuple[str, int, int]] = set()


class CorruptRolloutError(RolloutFormatError):
    """Reading the rollout file crashed or hung libhdf5 (in a child process).

    Attributes:
        cause: "hang", the signal's name ("SIGSEGV", "SIGABRT", ...) or "exit <code>".
    """

    def __init__(self, path: str | os.PathLike, message: str, cause: str):
        self.cause = cause
        super().__init__(path, message)


def _signature(path: str) -> tuple[str, int, int]:
    st = os.stat(path)
    return (os.path.realpath(path), st.st_size, st.st_mtime_ns)


def _episode_files(index_path: str) -> list[str]:
    folder = os.path.join(index_path + ".episodes")
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder))


def _read_everything(index_path: str) -> None:
    """The child: everything RolloutReader reads; Python exceptions are the parent's.

    The fatal signals get their default action first: a crash in libhdf5 then ends the
    child by that signal, which the parent names, and no handler the parent installed
    (faulthandler's, a fuzzer's that writes the input out) runs in the child."""
    for name in ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGFPE", "SIGILL"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    from taso_env.env.rollouts.reader import RolloutReader

    try:
        reader = RolloutReader(index_path)
        for episode_id in reader.episode_ids:
            try:
                reader.episode(episode_id)
            except Exception:  # typed in the parent, which reads it again
                pass
    except Exception:
        pass
    os._exit(0)


def check_in_child(index_path: str, timeout_s: float | None = None) -> None:
    """Reads the rollout file at `index_path` in a child process, once per content.

    Args:
        index_path: the index file (rollouts.h5); its episode folder is read too.
        timeout_s: the child's time limit; default CHECK_TIMEOUT_S plus
            CHECK_SECONDS_PER_MB per MB of the index and episode files.

    Raises:
        CorruptRolloutError: the child crashed (naming the signal) or ran past the limit.
    """
    try:
        files = [index_path] + _episode_files(index_path)
        key = tuple(_signature(p) for p in files)
    except OSError:
        return  # a missing file: the reader's own error names it
    if all(k in _checked for k in key):
        return
    if timeout_s is None:
        timeout_s = CHECK_TIMEOUT_S + CHECK_SECONDS_PER_MB * sum(k[1] for k in key) / 1e6
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    child = context.Process(target=_read_everything, args=(index_path,), daemon=True)
    child.start()
    child.join(timeout_s)
    if child.is_alive():
        child.kill()
        child.join()
        raise CorruptRolloutError(index_path, f"reading it did not finish in {timeout_s:.1f} s (libhdf5 hung)",
                                  cause="hang")
    if child.exitcode is not None and child.exitcode < 0:
        try:
            name = signal.Signals(-child.exitcode).name
        except ValueError:
            name = f"signal {-child.exitcode}"
        raise CorruptRolloutError(index_path, f"reading it crashed libhdf5 ({name}): the file or one of its "
                                              "episode files is corrupt", cause=name)
    if child.exitcode != 0:
        raise CorruptRolloutError(index_path, f"the process checking it exited with code {child.exitcode}",
                                  cause=f"exit {child.exitcode}")
    _checked.update(key)
