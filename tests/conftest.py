"""Shared fixtures: paths of the shipped ONNX models (copies under data/models)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "data" / "models"
MODEL_FILES = sorted(p.name for p in MODELS.glob("*.onnx"))


@pytest.fixture(scope="session")
def models_dir() -> Path:
    return MODELS
