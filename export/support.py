"""What the ONNX exporter (export/onnx_model.py) does with each primitive: its column of docs/primitives.md.

Declared here, apart from the lowering, so that the support matrix is generated without the `onnx`
package; tests/test_onnx.py checks that the lowering's `HANDLERS` are exactly `SUPPORT.implemented`.
A call of a refused primitive in an exported function is E0607 at the call, with the reason below.
"""

from __future__ import annotations

from dl.lang.primitives import Prim, Support

EFFECT = "an effect: an ONNX model computes values and has no output but its results"
RANDOM = "random: an ONNX model is a function of its inputs (draw the values outside and pass them in)"
DATA = "data loading happens before the model: pass the data in as inputs"
DERIVATIVE = "derivative code: export an inference function (its `grad` is expanded before export)"
DISTRIBUTED = "a data-parallel run's collective: there is one process in an ONNX runtime"

REFUSED: dict[Prim, str] = {
    Prim.RANDN: RANDOM,
    Prim.RAND: RANDOM,
    Prim.PERMUTATION: RANDOM,
    Prim.CATEGORICAL: RANDOM,
    Prim.DROPOUT: RANDOM + "; export the inference path, which has no dropout",
    Prim.TIME: "a clock reading: an ONNX model is a function of its inputs",
    Prim.STR: "text: ONNX tensors hold numbers",
    Prim.PRINT: EFFECT,
    Prim.LOG_METRIC: EFFECT,
    Prim.PROGRESS: EFFECT,
    Prim.SAVE: EFFECT,
    Prim.LOAD: "a file read at run time: weights become initializers when exported",
    Prim.UNBROADCAST: DERIVATIVE,
    Prim.SCATTER_ADD: DERIVATIVE,
    Prim.ADD_ALONG_AXIS: DERIVATIVE,
    Prim.SPLIT_LIKE: DERIVATIVE,
    Prim.TAPE: DERIVATIVE,
    Prim.PUSH: DERIVATIVE,
    Prim.POP: DERIVATIVE,
    Prim.CONV2D_INPUT_GRAD: DERIVATIVE,
    Prim.CONV2D_WEIGHT_GRAD: DERIVATIVE,
    Prim.MAX_POOL2D_GRAD: DERIVATIVE,
    Prim.MAX_POOL2D_GATHER: DERIVATIVE,
    Prim.DIGITS: DATA,
    Prim.BATCHES: DATA,
    Prim.LOAD_CSV: DATA,
    Prim.LOAD_NPZ: DATA,
    Prim.TEXT_CORPUS: DATA,
    Prim.CHARS: DATA,
    Prim.RANK: DISTRIBUTED,
    Prim.WORLD_SIZE: DISTRIBUTED,
    Prim.ALLREDUCE_MEAN: DISTRIBUTED,
}

SUPPORT = Support("onnx", frozenset(Prim) - frozenset(REFUSED), REFUSED)
