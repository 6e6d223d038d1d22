"""int8 weights: an ONNX model's weight matrices and kernels stored as per-channel symmetric int8.

`quantize_int8(model)` replaces each float initializer with two or more axes longer than 1 by its int8 codes
and one f32 scale per output channel, and a `DequantizeLinear` at the head of the graph that gives the float tensor back
under its old name, so the rest of the graph is unchanged. The output channel is the last axis of a matrix
(DL stores a linear layer's weight `[in, out]`, used as `x @ w`) and the first of a convolution kernel
(OIHW). Symmetric: the zero point is 0 and the scale is the channel's largest magnitude over 127, so the
codes are -127..127 and a weight is off by at most half a scale. Vectors (biases) and scalars stay f32,
a vector shaped to broadcast (a convolution's bias `[C, 1, 1]`) too: they are few, a scale per channel
would take more bytes than it saves, and rounding a bias shifts every output it feeds.

Only the weights are quantized, so the graph holds `DequantizeLinear` and no `QuantizeLinear`: quantizing
the activations too would need calibration data to choose their scales, and the int8 file is already as
small as the weights allow.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def quantizable(array: np.ndarray) -> bool:
    """Whether `quantize_int8` stores this weight as int8: a float tensor with two or more axes longer than 1."""
    return sum(size > 1 for size in array.shape) >= 2 and array.dtype in (np.float32, np.float64)


def not_finite(tensors: dict[str, np.ndarray]) -> str | None:
    """The name of the first weight `quantize_int8` would store as int8 that holds a nan or an infinity (no
    code stands for it, and the largest magnitude, the scale, would be one), else None."""
    return next((name for name, array in tensors.items() if quantizable(array) and not np.isfinite(array).all()), None)


def channel_axis(array: np.ndarray) -> int:
    return array.ndim - 1 if array.ndim == 2 else 0


def quantized(array: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The int8 codes, the per-channel scales and the channel axis of a float tensor."""
    axis = channel_axis(array)
    others = tuple(a for a in range(array.ndim) if a != axis)
    largest = np.max(np.abs(array), axis=others)
    scale = np.where(largest > 0, largest / 127.0, 1.0).astype(np.float32)
    shape = [1] * array.ndim
    shape[axis] = -1
    codes = np.clip(np.round(array / scale.reshape(shape)), -127, 127).astype(np.int8)
    return codes, scale, axis


def quantize_int8(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with its float weight matrices and kernels stored as int8."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    kept, dequantize = [], []
    for initializer in graph.initializer:
        array = numpy_helper.to_array(initializer)
        if not quantizable(array):
            kept.append(initializer)
            continue
        codes, scale, axis = quantized(array)
        name = initializer.name
        kept += [
            numpy_helper.from_array(codes, f"{name}.q"),
            numpy_helper.from_array(scale.astype(array.dtype), f"{name}.s"),
        ]
        dequantize.append(helper.make_node("DequantizeLinear", [f"{name}.q", f"{name}.s"], [name], axis=axis))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = [*dequantize, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    return result
