"""Fuzzes the ONNX loader: bytes -> taso_env.load_onnx (from bytes, and from a file).

    python fuzz/fuzz_onnx_loader.py -atheris_runs=100000 -timeout=10

Every input must load or be refused with an OnnxImportError (MalformedOnnxError,
MissingShapeError, DynamicShapeError) or another TasoEnvError (ShapeError, GraphError,
CycleError, ...) naming the file and node.
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
    import taso_env

sys.path.insert(0, str(Path(__file__).resolve().parent))
from typed_outcome import fuzz_main, scratch_folder  # noqa: E402

TARGET = "onnx_loader"
_FILE = Path(scratch_folder("fuzz_onnx_")) / "model.onnx"


def load_onnx_bytes(data: bytes) -> None:
    """Loads `data` as a model: from bytes when byte 0 is even, else from a file."""
    if not data or data[0] % 2 == 0:
        taso_env.load_onnx(data)
    else:
        _FILE.write_bytes(data)
        taso_env.load_onnx(str(_FILE))


if __name__ == "__main__":
    fuzz_main(load_onnx_bytes, TARGET)
