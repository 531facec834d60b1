"""What pinned input shapes make constant is folded before TVM imports a model: the shape
arithmetic real exports carry, which TVM's importer cannot always take."""

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")

WORKLOADS = Path(__file__).resolve().parent.parent / "workloads"


def test_shape_arithmetic_becomes_weights_and_computes_the_same():
    from kb_tvm.model_tuning import onnxruntime_outputs
    from kb_tvm.model_tuning.onnx_input import fold_constants

    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
             helper.make_node("Unsqueeze", ["rows", "zero_axis"], ["rows_1d"]),
             helper.make_node("Concat", ["rows_1d", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Relu", ["flat"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])],
                              initializer=[numpy_helper.from_array(np.array(0, "int64"), "zero"),
                                           numpy_helper.from_array(np.array([0], "int64"), "zero_axis"),
                                           numpy_helper.from_array(np.array([-1], "int64"), "minus_one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folded = fold_constants(model)
    assert [n.op_type for n in folded.graph.node] == ["Reshape", "Relu"]
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 4)).astype("float32")
    np.testing.assert_array_equal(onnxruntime_outputs(folded, [x])[0][0], onnxruntime_outputs(model, [x])[0][0])


def test_a_transformers_5_decoder_imports_once_its_shape_arithmetic_is_folded():
    """TVM's importer alone refuses the causal mask transformers 5 builds from the sequence length."""
    from tvm.relax.frontend.onnx import from_onnx

    from kb_tvm.model_tuning import load_onnx, to_relax

    model = load_onnx(WORKLOADS / "llama_tiny.onnx", {"input_ids": (1, 16), "attention_mask": (1, 16)})
    with pytest.raises(ValueError, match="broadcast_to expects"):
        from_onnx(model, keep_params_in_input=False)
    assert "R.matmul" in to_relax(model)["main"].script()
