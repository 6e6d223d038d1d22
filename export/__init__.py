"""Exporting a DL function to other runtimes: ONNX (onnx_model.py), its int8 weights (quantize.py), and what
the exporter does with each primitive (support.py). Needs the `onnx` extra, except support.py."""
