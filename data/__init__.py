"""Shipped data: shape-only ONNX models (models/) and measured GPU cost tables (costs/)."""
