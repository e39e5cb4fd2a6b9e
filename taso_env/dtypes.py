"""Element types: ONNX TensorProto codes (what the C++ core uses) and numpy dtypes."""

from __future__ import annotations

import numpy as np

FLOAT32 = 1
UINT8 = 2
INT8 = 3
INT32 = 6
INT64 = 7
BOOL = 9
FLOAT16 = 10
FLOAT64 = 11

_TO_NUMPY = {
    FLOAT32: np.dtype(np.float32),
    UINT8: np.dtype(np.uint8),
    INT8: np.dtype(np.int8),
    INT32: np.dtype(np.int32),
    INT64: np.dtype(np.int64),
    BOOL: np.dtype(np.bool_),
    FLOAT16: np.dtype(np.float16),
    FLOAT64: np.dtype(np.float64),
}
_FROM_NUMPY = {v: k for k, v in _TO_NUMPY.items()}
NUMPY_BY_CODE = _TO_NUMPY  # read-only use: code -> numpy dtype


def to_numpy(code: int) -> np.dtype:
    """numpy dtype of an ONNX element-type code; ValueError for unsupported codes."""
    try:
        return _TO_NUMPY[code]
    except KeyError:
        raise ValueError(f"unsupported element type code {code}; supported: "
                         f"{sorted(_TO_NUMPY)}") from None


def from_numpy(dtype) -> int:
    """ONNX element-type code of a numpy dtype; ValueError for unsupported dtypes."""
    try:
        return _FROM_NUMPY[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"unsupported numpy dtype {np.dtype(dtype)}") from None


def is_float(code: int) -> bool:
    return code in (FLOAT32, FLOAT16, FLOAT64)
