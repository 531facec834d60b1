"""The numerics check before the budget: the untuned build against onnxruntime, the first
diverging operator named, a constant reference flagged; and the fp16 lowering of operators
with scalar arguments (TVM's ToMixedPrecision fails on them: a causal mask's Trilu)."""

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from kb_tvm.cli import main

pytest.importorskip("onnxruntime")


def _model(nodes, initializers, path, *, opset: int = 17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
                              initializer=[numpy_helper.from_array(a, name) for name, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return str(path)


def _weights(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (16, 16)).astype("float32")


def overflowing(path):
    """x scaled past fp16's range (65504) before a matmul: right in fp32, infinite in fp16."""
    return _model([helper.make_node("Mul", ["x", "scale"], ["scaled"], name="scale_up"),
                   helper.make_node("MatMul", ["scaled", "w"], ["product"], name="the_matmul"),
                   helper.make_node("Relu", ["product"], ["y"], name="relu")],
                  {"scale": np.array([1e5], "float32"), "w": _weights()}, path)


def constant(path):
    """An output that ignores its input: what a classifier head initialised to zero gives."""
    return _model([helper.make_node("Mul", ["x", "zero"], ["nothing"]),
                   helper.make_node("Add", ["nothing", "bias"], ["y"])],
                  {"zero": np.array([0.0], "float32"), "bias": np.linspace(-1, 1, 16, dtype="float32")}, path)


def masked(path):
    """A causal mask after a matmul: Trilu, whose k TVM imports as a scalar argument."""
    return _model([helper.make_node("MatMul", ["x", "w"], ["product"]),
                   helper.make_node("Trilu", ["product", "k"], ["y"], upper=1)],
                  {"w": _weights(), "k": np.array(1, "int64")}, path)


def _check(path, precision):
    return CliRunner().invoke(main, ["tune", path, "--target", "llvm", "--precision", precision,
                                     "--check-numerics-only"])


def test_a_mismatch_names_the_first_diverging_operator(tmp_path):
    path = overflowing(tmp_path / "overflow.onnx")
    right = _check(path, "fp32")
    assert right.exit_code == 0, right.output
    assert "matches onnxruntime" in right.output

    wrong = _check(path, "fp16")
    assert wrong.exit_code == 3, wrong.output
    line = wrong.output.strip()
    assert "\n" not in line
    assert "disagrees with onnxruntime" in line and "infinite" in line
    # the scaling agrees (it stays fp32); the matmul, whose fp16 inputs overflow, is where it starts
    assert "first diverging operator: MatMul 'the_matmul'" in line


def test_a_mismatch_stops_tune_before_the_budget_unless_told(tmp_path):
    path = overflowing(tmp_path / "overflow.onnx")
    work = tmp_path / "work"
    stopped = CliRunner().invoke(main, ["tune", path, "--target", "llvm", "--precision", "fp16", "--budget", "10m",
                                        "--work-dir", str(work), "--no-experience"])
    assert stopped.exit_code == 3, stopped.output
    assert "the_matmul" in stopped.output and "--tune-anyway" in stopped.output
    assert not (work / "model.so").exists() and not list(work.glob("database_*"))


def test_a_constant_reference_is_flagged_not_passed(tmp_path):
    result = _check(constant(tmp_path / "constant.onnx"), "fp32")
    assert result.exit_code == 0, result.output
    assert "matches onnxruntime" in result.output
    assert "cannot tell a right build from a wrong one" in result.output


def test_is_constant_needs_every_output_the_same():
    from kb_tvm.model_tuning.numerics import is_constant

    same = [[np.ones(3), np.zeros(2)], [np.ones(3), np.zeros(2)]]
    assert is_constant(same)
    assert not is_constant([[np.ones(3), np.zeros(2)], [np.ones(3), np.array([0.0, 1e-9])]])
    assert not is_constant(same[:1])  # one set shows nothing


def padded(path):
    """A Pad after a matmul, which TVM imports as a call_tir of a PrimFunc of its own (Swin pads
    its windows so)."""
    return _model([helper.make_node("MatMul", ["x", "w"], ["product"]),
                   helper.make_node("Pad", ["product", "pads"], ["y"])],
                  {"w": _weights(), "pads": np.zeros(4, "int64")}, path)


@pytest.mark.parametrize("model,argument,kept", [(masked, "T.int64", "R.triu("), (padded, "R.Callable", "R.call_tir(")])
def test_operators_with_arguments_other_than_tensors_lower_to_fp16(model, argument, kept, tmp_path):
    """ToMixedPrecision stops at a call with an argument other than a tensor (a minimal
    reproduction of TVM 0.27's failure, kept to tell when a TVM release fixes it);
    lower_precision goes around it."""
    import tvm
    from tvm import relax

    from kb_tvm.model_tuning import load_onnx, lower_precision, to_relax

    path = model(tmp_path / "model.onnx")
    with pytest.raises(tvm.error.InternalError, match=f"Expected TensorType, but got {argument}"):
        relax.transform.ToMixedPrecision(out_dtype="float32")(to_relax(load_onnx(path)))
    lowered = lower_precision(to_relax(load_onnx(path)), "fp16").script()
    assert 'dtype="float16"' in lowered and kept in lowered  # the matmul's inputs, and the operator
    for precision in ("fp16", "bf16"):
        result = _check(path, precision)
        assert result.exit_code == 0, result.output
        assert "matches onnxruntime" in result.output


def test_integer_powers_become_exact_products(tmp_path):
    """x ** 2 (RMSNorm) and x ** 3 (GPT-2's GELU) on negative x: CUDA's fast-math powf gives
    NaN there, which made a decoder's every output NaN; the rewrite leaves no power behind."""
    from kb_tvm.measure.targets import make_target
    from kb_tvm.model_tuning import load_onnx, relax_module, run_and_time

    path = _model([helper.make_node("Pow", ["x", "two"], ["square"]),
                   helper.make_node("Pow", ["square", "half"], ["root"]),  # not an integer: stays a power
                   helper.make_node("Pow", ["x", "three"], ["cube"]),
                   helper.make_node("Add", ["root", "cube"], ["y"])],
                  {"two": np.array(2.0, "float32"), "three": np.array(3.0, "float32"),
                   "half": np.array(0.5, "float32")}, tmp_path / "powers.onnx")
    from kb_tvm.model_tuning import build, to_relax
    from kb_tvm.model_tuning.rewrites import integer_powers_as_products

    imported = to_relax(load_onnx(path))
    assert imported["main"].script().count("R.power(") == 3
    assert integer_powers_as_products()(imported)["main"].script().count("R.power(") == 1  # the square root's
    target = make_target("llvm")
    mod = relax_module(load_onnx(path), target, precision="fp32", math="exact")
    x = np.linspace(-2, 2, 64, dtype="float32").reshape(4, 16)
    (got,), _ = run_and_time(build(mod, target), target, [[x]], repeat=1)
    np.testing.assert_allclose(got[0], np.abs(x) + x ** 3, rtol=1e-5, atol=1e-5)


def test_rmsnorms_mean_of_squares_is_one_kernel_with_the_norm(tmp_path):
    """Relax fuses neither the square into the mean nor a sum with what follows it: the square
    was a task of its own. After the rewrite the norm is one task and computes what it did."""
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.measure.targets import make_target
    from kb_tvm.model_tuning import build, load_onnx, relax_module, run_and_time

    path = _model([helper.make_node("Pow", ["x", "two"], ["square"]),
                   helper.make_node("ReduceMean", ["square"], ["variance"], axes=[-1], keepdims=1),
                   helper.make_node("Add", ["variance", "eps"], ["shifted"]),
                   helper.make_node("Sqrt", ["shifted"], ["root"]),
                   helper.make_node("Div", ["x", "root"], ["normed"]),
                   helper.make_node("Mul", ["x", "w"], ["scaled"]),  # a broadcasting product: left as it is
                   helper.make_node("ReduceMean", ["scaled"], ["row_mean"], axes=[0], keepdims=1),
                   helper.make_node("Add", ["normed", "row_mean"], ["y"])],
                  {"two": np.array(2.0, "float32"), "eps": np.array(1e-5, "float32"),
                   "w": np.linspace(0.5, 1.5, 16, dtype="float32")}, tmp_path / "rmsnorm.onnx")
    target = make_target("llvm")
    mod = relax_module(load_onnx(path), target, precision="fp32", math="exact")
    names = [str(t.task_name) for t in ms.relax_integration.extract_tasks(mod, target)]
    # one multiply task: the broadcasting product's (the square is the norm's)
    assert sum("mean_of_product" in n for n in names) == 1 and sum("multiply" in n for n in names) == 1, names
    x = np.linspace(-2, 2, 64, dtype="float32").reshape(4, 16)
    (got,), _ = run_and_time(build(mod, target), target, [[x]], repeat=1)
    w = np.linspace(0.5, 1.5, 16, dtype="float32")
    expected = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) + (x * w).mean(0, keepdims=True)
    np.testing.assert_allclose(got[0], expected, rtol=1e-5, atol=1e-5)


def test_cuda_kernels_read_bool_masks_one_value_at_a_time(tmp_path):
    """TVM 0.27's CUDA code reads two bools as a `ushort2` (2-byte lanes over 1-byte values):
    wrong masks, or a misaligned address that kills the process. Kernels on bool tensors are
    built unvectorized (`build_config`). Compiles CUDA (nvcc), runs nothing: no GPU needed."""
    import re
    import shutil

    import tvm

    from kb_tvm.measure.targets import build_config
    from kb_tvm.model_tuning import build, load_onnx, relax_module

    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        pytest.skip("compiling CUDA needs nvcc")
    causal = np.tril(np.ones((4, 16), bool))
    path = _model([helper.make_node("MatMul", ["x", "w"], ["scores"]),
                   helper.make_node("Where", ["causal", "scores", "low"], ["y"])],
                  {"w": _weights(), "causal": causal, "low": np.array(-1e4, "float32")}, tmp_path / "mask.onnx")
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                                "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
                                "registers_per_block": 65536, "host": {"kind": "llvm"}})
    mod = relax_module(load_onnx(path), target, precision="fp16", math="exact")
    masked = [f for f in mod.functions.values() if isinstance(f, tvm.tirx.PrimFunc) and "where" in str(f)]
    assert masked and build_config(target, masked[0]).get("tirx.disable_vectorize") is True

    def sources(module):
        found = []
        for sub in module.imports:
            if sub.kind == "cuda":
                found.append(sub.inspect_source())
            found += sources(sub)
        return found

    source = "".join(sources(build(mod, target, cuda_graph=False).mod))
    bools = set(re.findall(r"bool\* __restrict__ (\w+)", source))
    assert bools, "the mask reaches the kernel as a bool buffer"
    assert not re.findall(r"\*\(\w+\*\)\((?:%s) " % "|".join(bools), source)


def empty_slice(path):
    """x's columns from 16 on (none: an empty slice, as Phi-3's rotary pass-through where the
    rotary covers the whole head) concatenated after all of x's columns, doubled: 2x."""
    return _model([helper.make_node("Slice", ["x", "start", "end", "axis"], ["nothing"]),
                   helper.make_node("Slice", ["x", "zero", "start", "axis"], ["left"]),
                   helper.make_node("Concat", ["left", "nothing"], ["joined"], axis=1),
                   helper.make_node("Add", ["joined", "joined"], ["y"])],
                  {"start": np.array([16], "int64"), "end": np.array([16], "int64"), "axis": np.array([1], "int64"),
                   "zero": np.array([0], "int64")}, path)


def test_an_empty_slice_s_loop_is_gone_before_the_gpu_default_schedule(tmp_path):
    """dlight's GPU fallback fuses a loop of extent 0 with the others and divides by zero (TVM
    0.27; kept to tell when a release fixes it): Phi-3 did not build on CUDA."""
    import tvm
    from tensor_core_helpers import H200
    from tvm import relax
    from tvm.s_tir import dlight as dl

    from kb_tvm.measure.targets import make_target
    from kb_tvm.model_tuning import build, load_onnx, relax_module, run_and_time, to_relax

    path = empty_slice(tmp_path / "empty.onnx")
    cuda = tvm.target.Target(H200)
    with cuda, tvm.transform.PassContext(opt_level=3):
        fused = relax.pipeline.zero_pipeline()(to_relax(load_onnx(path)))  # legalized and fused, as TVM has it
        with pytest.raises(tvm.error.InternalError, match="Divide by zero"):
            dl.ApplyDefaultSchedule(dl.gpu.Fallback())(fused)
    build(relax_module(load_onnx(path), cuda, precision="fp16", math="exact"), cuda)  # compiles, no GPU needed

    llvm = make_target("llvm")
    x = np.random.default_rng(0).standard_normal((4, 16)).astype("float32")
    (got,), _ = run_and_time(build(relax_module(load_onnx(path), llvm, precision="fp32", math="exact"), llvm),
                             llvm, [[x]], repeat=1)
    np.testing.assert_allclose(got[0], 2 * x, rtol=1e-6)
