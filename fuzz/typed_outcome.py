"""The contract every fuzz harness checks, and the atheris driver they share.

An input may succeed or be rejected with a typed rlflow error (`TasoEnvError`, whose
subclasses name the file and the field at fault). Any other exception escapes
`run_input` and is reported by the fuzzer as a crash; so are a dead process (a native
library's segfault) and an input running past `-timeout`.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

from taso_env.errors import TasoEnvError

CORPUS_ROOT = Path(__file__).resolve().parent / "corpus"
#: the outcome counts are printed every REPORT_EVERY inputs (and at powers of two);
#: FUZZ_REPORT_EVERY sets it, e.g. for runs stopped by -max_total_time (fuzz/run_parallel.py)
REPORT_EVERY = int(os.environ.get("FUZZ_REPORT_EVERY", "10000"))


class Outcomes:
    """Counts of inputs by outcome: "ok" or the typed error's class name."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        rejected = {k: v for k, v in sorted(self.counts.items()) if k != "ok"}
        return f"inputs {self.total}, ok {self.counts['ok']}, typed rejections {dict(rejected)}"


def run_input(target: Callable[[bytes], None], data: bytes, outcomes: Outcomes) -> None:
    """Runs `target(data)`; a TasoEnvError is a typed rejection, anything else escapes.

    With FUZZ_KEEP_GOING=1 in the environment an untyped exception is counted as
    "FINDING <type>" and its input and traceback saved as finding-<type>-<n> in the
    working folder, and the run goes on (a long run then reports every kind of finding
    instead of stopping at the first).
    """
    try:
        target(data)
    except TasoEnvError as e:  # a guard's error names its cause (CorruptRolloutError: hang or signal)
        cause = getattr(e, "cause", None)
        outcomes.counts[type(e).__name__ + (f" ({cause})" if cause else "")] += 1
    except Exception as e:
        if os.environ.get("FUZZ_KEEP_GOING") != "1":
            raise
        key = f"FINDING {type(e).__name__}"
        outcomes.counts[key] += 1
        if outcomes.counts[key] <= 3:
            stem = f"finding-{type(e).__name__}-{outcomes.counts[key]}"
            Path(stem + ".input").write_bytes(data)
            Path(stem + ".txt").write_text("".join(traceback.format_exception(e)))
    else:
        outcomes.counts["ok"] += 1
    total = outcomes.total
    if total % REPORT_EVERY == 0 or total & (total - 1) == 0:  # every 10,000, and at powers of two
        print(f"#outcomes {outcomes.summary()}", file=sys.stderr, flush=True)


def scratch_folder(prefix: str) -> Path:
    """A new temporary folder for the files a harness writes, in memory (/dev/shm) where
    the system has it: each input is written to a file, and a disk's open and truncate
    cost more than the loading being fuzzed."""
    memory = "/dev/shm"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=memory if os.path.isdir(memory) else None))


def corpus_inputs(target_name: str) -> list[bytes]:
    """The committed seed inputs of one target (fuzz/corpus/<target_name>/)."""
    folder = CORPUS_ROOT / target_name
    return [p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()]


def fuzz_main(target: Callable[[bytes], None], target_name: str) -> None:
    """Runs atheris (libFuzzer flags in sys.argv) on `target`; without a corpus folder on
    the command line it starts from the seed corpus, writing new inputs to a scratch folder."""
    import atheris

    outcomes = Outcomes()
    argv = list(sys.argv)
    if not any(os.path.isdir(a) for a in argv[1:]):
        # libFuzzer writes new inputs into (and prunes) the first folder: a scratch one,
        # so that the committed seed corpus stays as it is
        argv += [str(scratch_folder(f"fuzz_corpus_{target_name}_")), str(CORPUS_ROOT / target_name)]
    atheris.Setup(argv, lambda data: run_input(target, data, outcomes))
    atheris.Fuzz()
