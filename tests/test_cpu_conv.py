"""The CPU convolution family (schedules/cpu_conv.py, kb_tvm/kernels/cpu_conv/): which tasks it reads
and how, which register blocks it tries (plain Python), its kernels computing real tasks on llvm
checked against numpy, the weights packed once in a model's build, and a small ResNet-style
network tuned through it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kb_tvm.kernels.cpu_conv.variants import VariantSearch, variants
from kb_tvm.kernels.cpu_gemm.variants import VectorUnit
from kb_tvm.schedules.cpu_conv import CpuConvTile

AVX512 = VectorUnit(lanes=16, registers=32)
AVX2 = VectorUnit(lanes=8, registers=16)


def _conv_model(ci, co, size, kernel, *, stride=1, pad=0, dilation=1, residual=False, groups=1,
                layout="NCHW", weight_input=False):
    """A Relax module: ReLU(conv2d(x, W) + bias (+ r)), W a constant unless `weight_input`."""
    from tvm import relax
    from tvm.script import relax as R

    rng = np.random.default_rng(0)
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    nchw = layout == "NCHW"
    x = relax.Var("x", R.Tensor((1, ci, size, size) if nchw else (1, size, size, ci), "float32"))
    r = relax.Var("r", R.Tensor((1, co, out, out), "float32"))
    w_shape = (co, ci // groups, kernel, kernel) if nchw else (kernel, kernel, ci // groups, co)
    w = relax.Var("w", R.Tensor(w_shape, "float32")) if weight_input else \
        relax.const(rng.standard_normal(w_shape).astype("float32"))
    b = relax.const(rng.standard_normal((1, co, 1, 1) if nchw else (1, 1, 1, co)).astype("float32"))
    params = [x] + ([r] if residual else []) + ([w] if weight_input else [])
    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv2d(x, w, strides=stride, padding=pad, dilation=dilation, groups=groups,
                                           data_layout=layout, kernel_layout="OIHW" if nchw else "HWIO"))
            y = bb.emit(relax.op.add(y, b))
            if residual:
                y = bb.emit(relax.op.add(y, r))
            y = bb.emit_output(bb.emit(relax.op.nn.relu(y)))
        bb.emit_func_output(y)
    return bb.get()


def _task(mod, target):
    """The prepared module and its convolution task."""
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.model_tuning.relax_build import prepare

    prepared = prepare(mod, target)
    (task,) = [t for t in ms.relax_integration.extract_tasks(prepared, target) if "conv2d" in str(t.task_name)]
    return prepared, task


def _numpy_conv(x, w, *, stride, pad, dilation):
    n, _, size, _ = x.shape
    co, _, kernel, _ = w.shape
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    y = np.zeros((n, co, out, out), np.float32)
    for r in range(kernel):
        for s in range(kernel):
            patch = xp[:, :, r * dilation:r * dilation + stride * (out - 1) + 1:stride,
                       s * dilation:s * dilation + stride * (out - 1) + 1:stride]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, r, s])
    return y


CONVS = {  # ci, co, size, kernel, stride, pad, dilation, residual
    "3x3, a residual": (16, 32, 12, 3, 1, 1, 1, True),
    "3x3 at stride 2": (16, 32, 14, 3, 2, 1, 1, False),
    "1x1 at stride 2, no padding": (16, 32, 14, 1, 2, 0, 1, False),
    "ResNet's 7x7 stem": (3, 16, 20, 7, 2, 3, 1, False),
    "3x3 dilated": (8, 16, 12, 3, 1, 2, 2, True),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_the_reader_reads_stride_padding_and_dilation(name, llvm_target):
    from kb_tvm.kernels.cpu_conv import FAMILY

    ci, co, size, kernel, stride, pad, dilation, residual = CONVS[name]
    _, task = _task(_conv_model(ci, co, size, kernel, stride=stride, pad=pad, dilation=dilation,
                                residual=residual), llvm_target)
    p = FAMILY.match(task.dispatched[0], llvm_target).problem
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    assert (p.in_channels, p.out_channels, p.height, p.kernel) == (ci, co, size, (kernel, kernel))
    assert (p.stride, p.pad, p.dilation, p.out) == ((stride,) * 2, (pad,) * 2, (dilation,) * 2, (out, out))
    assert p.pixels == out * out


def test_grouped_and_channels_last_convolutions_are_refused_with_the_reason(llvm_target):
    from kb_tvm.kernels.cpu_conv import FAMILY
    from kb_tvm.kernels.fused_conv import NotAConv

    _, grouped = _task(_conv_model(16, 16, 8, 3, pad=1, groups=4), llvm_target)
    with pytest.raises(NotAConv, match="one group"):
        FAMILY.match(grouped.dispatched[0], llvm_target)
    _, nhwc = _task(_conv_model(16, 16, 8, 3, pad=1, layout="NHWC"), llvm_target)
    with pytest.raises(NotAConv, match="NCHW"):
        FAMILY.match(nhwc.dispatched[0], llvm_target)


@pytest.mark.parametrize("unit", [AVX512, AVX2])
def test_register_blocks_divide_the_pixels_and_channels_and_fit_the_registers(unit):
    pool = variants(49, 512, unit)  # ResNet's last stage: 7x7 pixels
    assert pool
    for tile in pool:
        vectors = tile.cols // unit.lanes
        assert 49 % tile.rows == 0 and 512 % tile.cols == 0 and tile.cols % unit.lanes == 0
        assert tile.rows * vectors + vectors + 1 <= unit.registers and tile.rows * tile.cols * 4 < 1024
    assert variants(3136, 64, AVX512)[:2] == [CpuConvTile(rows=14, cols=16), CpuConvTile(rows=7, cols=32)]
    assert all(t.prepacked for t in variants(3136, 64, AVX512, prepacked=True))
    assert variants(3136, 24, AVX512) == []  # no vector of channels divides 24


def test_the_family_refuses_a_convolution_no_block_divides(llvm_target):
    from kb_tvm.kernels.cpu_conv import FAMILY
    from kb_tvm.kernels.family import NotApplicable

    _, task = _task(_conv_model(8, 12, 8, 3, pad=1), llvm_target)
    fused = FAMILY.match(task.dispatched[0], llvm_target)
    with pytest.raises(NotApplicable, match="no register block divides 64 pixels x 12 channels"):
        FAMILY.variants(fused, llvm_target)
    with pytest.raises(ValueError, match="pixels=0"):
        VariantSearch(pixels=0, channels=16, unit=AVX512)


@pytest.mark.parametrize("name", list(CONVS))
@pytest.mark.parametrize("weights", ["constant", "an input"])
def test_every_variant_tried_computes_its_task(name, weights, llvm_target, tmp_path):
    """Through the shared search, which checks each variant against numpy's convolution before it
    times it: a wrong kernel would be a row with an error, and no choice. Constant weights are
    taken prepacked; others are packed by the kernel on each call."""
    from kb_tvm.kernels.cpu_conv import FAMILY
    from kb_tvm.kernels.task_search import local_device, read_rows, search_task

    ci, co, size, kernel, stride, pad, dilation, residual = CONVS[name]
    _, task = _task(_conv_model(ci, co, size, kernel, stride=stride, pad=pad, dilation=dilation,
                                residual=residual), llvm_target)
    mod = task.dispatched[0]
    fused = FAMILY.match(mod, llvm_target)
    names = [buf.name for buf in mod["main"].params]

    def reference(arrays):
        given = dict(zip(names, arrays))
        x, w = arrays[0], given[fused.w.name]
        bias = next(a for a in arrays[1:-1] if a.shape == (1, co, 1, 1))
        y = _numpy_conv(x, w, stride=stride, pad=pad, dilation=dilation) + bias
        if residual:
            y = y + next(a for a in arrays[1:-1] if a.shape == y.shape)
        return np.maximum(y, 0)

    asked = []
    constants = frozenset({fused.weight_index}) if weights == "constant" else frozenset()
    choice = search_task(FAMILY, fused, mod["main"], "conv", llvm_target, local_device(llvm_target), reference,
                         until=lambda: len(asked) >= 2 or asked.append(1), work_dir=tmp_path, earlier=[],
                         constants=constants)
    rows = read_rows(tmp_path)
    assert len(rows) == 2 and all(r["ok"] and r["error"] is None for r in rows), rows
    assert all(r["tile"]["prepacked"] == (weights == "constant") for r in rows)
    assert choice is not None and choice.describe().startswith("cpu_conv rows=")


@pytest.mark.parametrize("weight_input", [False, True])
def test_a_model_packs_constant_weights_once_at_build_and_others_on_each_call(weight_input, llvm_target):
    import tvm
    from tvm import relax

    from kb_tvm.kernels.cpu_conv import FAMILY
    from kb_tvm.kernels.extern import constant_inputs, use_kernels
    from kb_tvm.model_tuning.relax_build import build

    model = _conv_model(16, 32, 10, 3, pad=1, residual=True, weight_input=weight_input)
    prepared, task = _task(model, llvm_target)
    name = str(task.task_name)
    fused = FAMILY.match(task.dispatched[0], llvm_target)
    assert (fused.weight_index in constant_inputs(prepared)[name]) != weight_input
    kernel = FAMILY.build(fused, CpuConvTile(rows=4, cols=16, prepacked=True), llvm_target, name)
    calls = use_kernels(prepared, [kernel])["main"].script()
    assert (f"{kernel.symbol}_pack" in calls) == weight_input  # a constant's packing is folded away

    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal([int(d) for d in p.ty.shape]).astype("float32") for p in prepared["main"].params]
    outputs = []
    for kernels in ([], [kernel]):
        vm = relax.VirtualMachine(build(prepared, llvm_target, kernels=kernels), tvm.cpu())
        outputs.append(vm["main"](*[tvm.runtime.tensor(a) for a in inputs]).numpy())
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-4)


@pytest.mark.tuning
def test_a_residual_network_is_tuned_through_the_family(tmp_path):
    from kb_tvm.workloads.make_model import residual_cnn

    model = tmp_path / "cnn.onnx"
    model.write_bytes(residual_cnn(size=16, channels=16).SerializeToString())
    work = tmp_path / "work"
    done = subprocess.run([sys.executable, "-m", "kb_tvm.cli", "tune", str(model), "--budget", "10s",
                           "--target", "llvm", "--work-dir", str(work), "--no-experience"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((work / "report.json").read_text())
    assert report["numerics"]["ok"] and report["numerics"]["checked_against"].startswith("onnxruntime")
    convs = [t for t in report["tasks"] if "conv2d" in t["task"]]
    assert len(convs) == 6, convs
    # the families' stage (a fifth of the 10 s) searches the hottest first: at least it gets a
    # right kernel, and the task ends on it or on a MetaSchedule schedule the job timed faster
    # (on so small a convolution which one wins is the timer's call)
    hottest = max(convs, key=lambda t: t["share_of_model_time"])
    rows = [json.loads(line) for line in (work / "kernels.jsonl").read_text().splitlines()]
    right = [r["seconds"] for r in rows if r["task"] == hottest["task"] and r["family"] == "cpu_conv" and r["ok"]]
    assert right, (hottest["task"], rows)
    assert hottest["schedule"].startswith("cpu_conv rows=") or hottest["schedule"] == "tuned", convs
    assert "cpu_conv: fused_conv2d" in done.stdout
    # TVM 0.27 logs "Scope Saving:" for each memory scope the library saves: noise, not shown
    assert "Scope Saving" not in done.stderr
