"""ONNX in and out: `importer` (load_onnx, opaque ops, typed errors), `exporter`
(standard ONNX back out) and `check` (onnxruntime equivalence and round trips)."""
