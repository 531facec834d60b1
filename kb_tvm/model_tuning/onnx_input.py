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


def parse_dim(text: str) -> tuple[str, int]:
    """`--dim`'s value: "past=511" -> ("past", 511)."""
    name, sep, size = text.rpartition("=")
    if not (sep and name and size.isdigit() and int(size) > 0):
        raise ModelError(f"--dim {text!r}: write AXIS=SIZE with the axis as the export names it and a positive "
                         f"size, e.g. sequence=128")
    return name, int(size)


def load_onnx(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None,
              axes: dict[str, int] | None = None):
    """The ONNX model at `path`, checked for what kb-tvm needs: readable, and static input
    shapes once `input_shapes` (input name -> dims) and `axes` (a dynamic axis's name -> its
    size, on every input that has it) pin the dynamic ones."""
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
    axes = axes or {}
    named = list(dict.fromkeys(d.dim_param for i in graph_inputs.values() for d in i.type.tensor_type.shape.dim
                               if d.dim_param))
    for name in axes:
        if name not in named:
            raise ModelError(f"--dim names axis '{name}', which no input of {path.name} has; its dynamic axes: "
                             f"{', '.join(named) or 'none'}")
    for name, dims in (input_shapes or {}).items():
        if name not in graph_inputs:
            raise ModelError(f"--input-shape names '{name}', which is not an input of {path.name}; "
                             f"its inputs: {', '.join(graph_inputs)}")
        _pin(graph_inputs[name], dims)
    for graph_input in graph_inputs.values():  # the axes --input-shape left, by name
        for dim in graph_input.type.tensor_type.shape.dim:
            if dim.dim_param in axes:
                dim.dim_value = axes[dim.dim_param]  # clears dim_param (a oneof)
    for graph_input in graph_inputs.values():
        shape = graph_input.type.tensor_type.shape.dim
        for axis, dim in enumerate(shape):
            if dim.dim_param or dim.dim_value <= 0:
                label = f"'{dim.dim_param}'" if dim.dim_param else "unknown"
                example = "x".join(str(d.dim_value) if d.dim_value > 0 else "N" for d in shape)
                every = f", or on every input with --dim {dim.dim_param}=N" if dim.dim_param else ""
                raise ModelError(
                    f"input '{graph_input.name}' has a dynamic dimension {axis} ({label}); kb-tvm tunes static "
                    f"shapes: pin it with --input-shape {graph_input.name}={example}{every}, N the size you will run")
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


# ops whose output shape depends on input values: past one, a Shape is no longer constant
VALUE_DEPENDENT_SHAPES = frozenset({"NonZero", "Unique", "Compress", "TopK", "Loop", "If", "Scan"})
NOT_FOLDED = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})


def fold_constants(model):
    """The model with what its pinned input shapes decide computed ahead of time: every node
    whose inputs are weights, constants or the shapes of tensors becomes a weight (its value
    from onnxruntime). Exports carry their dynamic axes' arithmetic (Shape, Gather, Range, the
    building of masks), which TVM's importer cannot always take (transformers 5's causal
    masks: `broadcast_to expects ...`); once shapes are pinned it is constant. Only that: no
    other rewrite (onnxruntime's own optimizer also fuses MatMul+Add into Gemm between
    reshapes, which TVM then runs as separate kernels). Unchanged without onnxruntime, or for
    a graph with control flow or value-dependent shapes."""
    try:
        import onnxruntime
    except ImportError:
        return model
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    ops = {node.op_type for node in graph.node}
    if ops & VALUE_DEPENDENT_SHAPES or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                          for node in graph.node for a in node.attribute):
        return model
    known = {init.name for init in graph.initializer}
    folded = set()  # node indices
    for index, node in enumerate(graph.node):
        if node.op_type in NOT_FOLDED:
            continue
        if node.op_type in ("Shape", "Size") or all(name in known for name in node.input if name):
            folded.add(index)
            known.update(name for name in node.output if name)
    used_later = {name for index, node in enumerate(graph.node) if index not in folded for name in node.input}
    used_later |= {o.name for o in graph.output}
    frontier = [name for index in sorted(folded) for name in graph.node[index].output if name in used_later]
    if not frontier:
        return model
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    del probe.graph.output[:]
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in frontier)
    session = onnxruntime.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], _numpy_dtype(i.type))
             for i in session.get_inputs()}
    values = dict(zip(frontier, session.run(frontier, feeds)))
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [node for index, node in enumerate(graph.node) if index not in folded]
    del result.graph.node[:]
    result.graph.node.extend(kept)
    result.graph.initializer.extend(numpy_helper.from_array(np.asarray(values[name]), name) for name in frontier)
    return result


def _numpy_dtype(onnxruntime_type: str):
    """onnxruntime's "tensor(float16)" as numpy's dtype."""
    name = onnxruntime_type[len("tensor("):-1]
    return np.dtype({"float": "float32", "double": "float64", "bool": "bool"}.get(name, name))


def onnxruntime_outputs(model, inputs: list[np.ndarray]) -> tuple[list[np.ndarray] | None, str]:
    """The model's outputs from onnxruntime (CPU), or None where it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None, ""
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return list(session.run(None, dict(zip(names, inputs)))), f"onnxruntime {onnxruntime.__version__}"
