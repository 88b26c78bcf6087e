"""parity-gate: prove a PyTorch model computes the same after ONNX export as in eager."""

__version__ = "0.2.0"
