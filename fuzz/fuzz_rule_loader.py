"""Fuzzes the rule-file loader: bytes -> a rule JSON file -> load_rule_specs -> build_rule_set.

    python fuzz/fuzz_rule_loader.py -atheris_runs=100000 -timeout=10

Every input must load or be refused with RuleFormatError (taso_env.rules).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

try:
    import atheris
except ImportError:  # the targets stay importable without it (tests/test_fuzz.py's mutation loop)
    atheris = None

with atheris.instrument_imports(include=["taso_env"]) if atheris else contextlib.nullcontext():
    from taso_env import rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typed_outcome import fuzz_main, scratch_folder  # noqa: E402

TARGET = "rule_loader"
_FOLDER = Path(scratch_folder("fuzz_rules_"))


def load_rule_bytes(data: bytes) -> None:
    """Writes `data` as the only rule file of a folder and loads and compiles it."""
    (_FOLDER / "rules.json").write_bytes(data)
    rules.build_rule_set(rules.load_rule_specs(_FOLDER))


if __name__ == "__main__":
    fuzz_main(load_rule_bytes, TARGET)
