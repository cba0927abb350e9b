"""GE-like IR, ONNX import and the generic graph passes."""
