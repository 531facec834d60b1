"""The user's ONNX model: read it, check it, pin its dynamic input shapes, make example
inputs for it and, where onnxruntime is installed, its reference outputs. Every problem with
the model is a one-line `ModelError`."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class ModelError(ValueError):
    """A problem with the user's model, said in one line."""


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`--input-shape`'s value: "input_ids=1x128" -> ("input_ids", (1, 128))."""
    name, sep, dims = text.partition("=")
    parts = dims.replace(",", "x").split("x")
    if not (sep and name and all(p.isdigit() and int(p) > 0 for p in parts)):
        raise ModelError(f"--input-shape {text!r}: write NAME=DIMS with positive dimensions, e.g. input_ids=1x128")
    return name, tuple(int(p) for p in parts)


def load_onnx(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None):
    """The ONNX model at `path`, checked for what kb-tvm needs: readable, and static input
    shapes once `input_shapes` (input name -> dims) pins the dynamic ones."""
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"model file {path} does not exist")
    try:
        model = onnx.load(str(path))
    except Exception as err:  # noqa: BLE001 - protobuf raises several kinds
        raise ModelError(f"{path} is not an ONNX model ({type(err).__name__})") from None
    if not model.graph.node:
        raise ModelError(f"{path} is not an ONNX model (no graph nodes)")
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = {i.name: i for i in model.graph.input if i.name not in initializers}
    for name, dims in (input_shapes or {}).items():
        if name not in graph_inputs:
            raise ModelError(f"--input-shape names '{name}', which is not an input of {path.name}; "
                             f"its inputs: {', '.join(graph_inputs)}")
        _pin(graph_inputs[name], dims)
    for graph_input in graph_inputs.values():
        shape = graph_input.type.tensor_type.shape.dim
        for axis, dim in enumerate(shape):
            if dim.dim_param or dim.dim_value <= 0:
                label = f"'{dim.dim_param}'" if dim.dim_param else "unknown"
                example = "x".join(str(d.dim_value) if d.dim_value > 0 else "N" for d in shape)
                raise ModelError(
                    f"input '{graph_input.name}' has a dynamic dimension {axis} ({label}); kb-tvm tunes static "
                    f"shapes: pin it with --input-shape {graph_input.name}={example}, N the size you will run")
    return model


def _pin(graph_input, dims: tuple[int, ...]) -> None:
    """Fix a graph input's dimensions in place (the dynamic ones; a static one must agree)."""
    shape = graph_input.type.tensor_type.shape.dim
    given = "x".join(map(str, dims))
    if len(dims) != len(shape):
        raise ModelError(f"--input-shape {graph_input.name}={given} has {len(dims)} dimensions; "
                         f"input '{graph_input.name}' has {len(shape)}")
    for axis, (dim, size) in enumerate(zip(shape, dims)):
        if dim.dim_value > 0 and dim.dim_value != size:
            raise ModelError(f"--input-shape {graph_input.name}={given}: dimension {axis} of "
                             f"'{graph_input.name}' is fixed at {dim.dim_value} in the model")
        dim.dim_value = size  # setting the value clears dim_param (a oneof)



def example_inputs(model, seed: int = 0) -> list[np.ndarray]:
    """One input per graph input: floats uniform in [-1, 1]; integers and booleans 1 with the
    end of the last axis 0 (its last quarter for seed 0, its last half otherwise), a padded
    batch. Ids 0 and 1 are valid in any vocabulary, and an attention mask so made masks
    something (all ones would leave the mask path untried). Two seeds give two different sets."""
    from onnx import helper

    initializers = {init.name for init in model.graph.initializer}
    rng = np.random.default_rng(seed)
    arrays = []
    for graph_input in model.graph.input:
        if graph_input.name in initializers:
            continue
        tensor_type = graph_input.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        shape = [d.dim_value for d in tensor_type.shape.dim]
        if dtype.kind in "iub":
            array = np.ones(shape, dtype=dtype)
            if shape:
                array[..., shape[-1] - shape[-1] // (4 if seed == 0 else 2):] = 0
            arrays.append(array)
        else:
            arrays.append(rng.uniform(-1, 1, size=shape).astype(dtype))
    return arrays


def fold_constants(model):
    """The model with what its pinned input shapes decide computed ahead of time: onnxruntime's
    basic graph optimizations (constant folding, redundant nodes removed; standard ONNX ops
    only). Exports carry their dynamic axes' arithmetic (Shape, Gather, Range, mask building),
    which TVM's importer cannot always take (transformers 5's causal masks: `broadcast_to
    expects ...`); once shapes are pinned it is constant. Without onnxruntime: the model as it is."""
    try:
        import onnxruntime
    except ImportError:
        return model
    import tempfile

    import onnx

    with tempfile.TemporaryDirectory(prefix="kb-fold-") as folder:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(Path(folder) / "folded.onnx")
        onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def onnxruntime_outputs(model, inputs: list[np.ndarray]) -> tuple[list[np.ndarray] | None, str]:
    """The model's outputs from onnxruntime (CPU), or None where it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None, ""
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return list(session.run(None, dict(zip(names, inputs)))), f"onnxruntime {onnxruntime.__version__}"
