"""Convolutions on a CPU become GEMMs (rewrites.convolutions_as_gemms): the patches of the image
times the weights, which the CPU GEMM family computes. Every kind a ResNet has: a 7x7 stem with
stride 2 and a bias, a strided 3x3, a 1x1, a strided 1x1 shortcut; a depthwise convolution (one
group per channel) is left as it is."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from kb_tvm.cli import main

pytest.importorskip("onnxruntime")


def _resnet_like(path):
    rng = np.random.default_rng(0)

    def weights(name, *shape):
        return numpy_helper.from_array((0.2 * rng.standard_normal(shape)).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[7, 7], strides=[2, 2], pads=[3, 3, 3, 3]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], kernel_shape=[1, 1]),
        helper.make_node("Conv", ["r1", "w4"], ["c4"], kernel_shape=[1, 1], strides=[2, 2]),
        helper.make_node("Add", ["c3", "c4"], ["sum"]),
        helper.make_node("Conv", ["sum", "w5"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=16),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])],
        initializer=[weights("w1", 8, 3, 7, 7), weights("b1", 8), weights("w2", 16, 8, 3, 3),
                     weights("w3", 16, 16, 1, 1), weights("w4", 16, 8, 1, 1), weights("w5", 16, 1, 3, 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return path


def test_every_convolution_of_one_group_becomes_a_gemm(tmp_path):
    from kb_tvm.model_tuning import load_onnx, to_relax
    from kb_tvm.model_tuning.rewrites import convolutions_as_gemms

    imported = to_relax(load_onnx(_resnet_like(tmp_path / "convs.onnx")))
    assert imported["main"].script().count("R.nn.conv2d(") == 5
    rewritten = convolutions_as_gemms()(imported)["main"].script()
    assert rewritten.count("R.nn.conv2d(") == 1 and "groups=16" in rewritten  # the depthwise one
    assert rewritten.count("R.matmul(") == 4


@pytest.mark.tuning
def test_a_tuned_cnn_computes_right_with_its_convolutions_as_gemm_kernels(tmp_path):
    """The untuned build and the tuned one match onnxruntime, and the CPU GEMM family's kernels
    compute the convolutions' GEMMs."""
    work_dir = tmp_path / "work"
    run = CliRunner().invoke(main, ["tune", str(_resnet_like(tmp_path / "convs.onnx")), "--budget", "15s",
                                    "--target", "llvm", "--work-dir", str(work_dir), "--no-experience"])
    assert run.exit_code == 0, run.output[-3000:]
    report = json.loads((work_dir / "report.json").read_text())
    assert report["numerics"]["untuned"]["ok"] and report["numerics"]["ok"], report["numerics"]
    kernels = {k["task"] for k in report["family_kernels"] if k["family"] == "cpu_gemm"}
    assert kernels and all("matmul" in task for task in kernels)
    assert len([t for t in report["tasks"] if "conv2d" in t["task"]]) == 1  # the depthwise one
