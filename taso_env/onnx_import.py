"""ONNX import (being written)."""


def load_onnx(path):
    raise NotImplementedError
