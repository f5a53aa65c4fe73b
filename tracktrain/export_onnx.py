"""The old path of `tracktrain.export.onnx`, kept so that existing imports work; new code imports from there.
Re-exports only."""

from tracktrain.export.onnx import OnnxModel, export_onnx, load_onnx

__all__ = ["OnnxModel", "export_onnx", "load_onnx"]
