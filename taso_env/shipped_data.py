"""Where the data rlflow ships lives: shape-only ONNX models, measured GPU cost tables and
the GPU algorithm choices those tables were measured with.

The repository's `data/` installs as the package `taso_env.data` (setup.py), so an
installed rlflow finds it wherever it runs; a source checkout on PYTHONPATH finds the
checkout's `data/`.

    shipped_data.models()            # {"resnet50": Path(".../models/resnet50.onnx"), ...}
    shipped_data.cost_tables()["h100_fp32"]
    shipped_data.algorithm_choices("gemm")  # [Path(".../costs/h100_gemm_algos.tsv")]
"""

from __future__ import annotations

import functools
from pathlib import Path


@functools.cache
def root() -> Path | None:
    """The shipped data folder (None when neither the package nor a checkout has one)."""
    try:
        import taso_env.data as data

        return Path(next(iter(data.__path__)))
    except ImportError:
        checkout = Path(__file__).resolve().parent.parent / "data"
        return checkout if checkout.is_dir() else None


def _files(folder: str, pattern: str) -> list[Path]:
    """The shipped files under `folder` matching `pattern`, sorted (none without data)."""
    where = root() / folder if root() else None
    return sorted(where.glob(pattern)) if where and where.is_dir() else []


def models() -> dict[str, Path]:
    """Shipped ONNX models by stem (e.g. "squeezenet1_1")."""
    return {p.stem: p for p in _files("models", "*.onnx")}


def cost_tables() -> dict[str, Path]:
    """Shipped cost tables (HDF5) by stem (e.g. "h100_fp32")."""
    return {p.stem: p for p in _files("costs", "*.h5")}


def algorithm_choices(kind: str) -> list[Path]:
    """Shipped algorithm choice files of `kind` ("conv" or "gemm"): the cuDNN / cuBLASLt
    algorithms the shipped cost tables were measured with, as lines "key<TAB>choice" whose
    keys name the device and library version (taso_env/csrc/gpu/config_cache.h)."""
    return _files("costs", f"*_{kind}_algos.tsv")
