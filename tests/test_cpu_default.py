"""The default schedule of CPU tasks nobody tuned (schedules/cpu_default.py): which blocks run
across threads and as vectors, and that what it schedules computes what the function says."""

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
import tvm_ffi  # noqa: E402
from tvm import te, tirx, topi  # noqa: E402

from kb_tvm.measure.targets import make_target  # noqa: E402
from kb_tvm.schedules import cpu_default  # noqa: E402
from kb_tvm.schedules.cpu_default import CpuFallback, CpuReduction, is_contraction  # noqa: E402

TARGET = make_target("llvm")


def prim_func(*tensors):
    return te.create_prim_func(list(tensors)).with_attr("global_symbol", "main")


def scheduled(func):
    with TARGET:
        sch = CpuReduction().apply(func, TARGET, False) or CpuFallback().apply(func, TARGET, False)
    assert sch is not None
    return sch.mod["main"]


def loop_kinds(func) -> list[str]:
    """The kinds of its loops, outermost first: SERIAL, PARALLEL, VECTORIZED, UNROLLED."""
    kinds = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda loop: kinds.append(tirx.ForKind(int(loop.kind)).name))],
                            order="pre")
    return kinds


def run(func, *arrays, out_shape, out_dtype="float32"):
    with TARGET:
        library = tvm.compile(tvm.IRModule({"main": func}), target=TARGET)
    args = [tvm.runtime.tensor(a) for a in arrays] + [tvm.runtime.tensor(np.zeros(out_shape, out_dtype))]
    library["main"](*args)
    return args[-1].numpy()


def data(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def test_an_elementwise_chain_runs_as_one_loop_across_threads_and_vectors():
    a = te.placeholder((256, 512), name="a")
    doubled = te.compute(a.shape, lambda i, j: a[i, j] * 2, name="doubled")
    out = te.compute(a.shape, lambda i, j: doubled[i, j] + 1, name="out")
    func = scheduled(prim_func(a, out))
    kinds = loop_kinds(func)
    assert "PARALLEL" in kinds and "VECTORIZED" in kinds, kinds
    assert len([k for k in kinds if "PARALLEL" in k]) == 1  # doubled is inlined into out: one loop nest
    x = data(256, 512)
    np.testing.assert_allclose(run(func, x, out_shape=(256, 512)), x * 2 + 1, rtol=1e-6)


def test_a_transpose_stays_scalar_and_what_precedes_it_is_not_inlined_into_it():
    a = te.placeholder((256, 512), name="a")
    shifted = te.compute(a.shape, lambda i, j: a[i, j] + 1, name="shifted")
    out = te.compute((512, 256), lambda j, i: shifted[i, j] * 2, name="out")
    func = scheduled(prim_func(a, out))
    kinds = loop_kinds(func)
    assert len([k for k in kinds if "PARALLEL" in k]) == 2  # shifted kept its own loop nest
    assert len([k for k in kinds if "VECTORIZED" in k]) == 1  # shifted's, not the strided transpose's
    x = data(256, 512)
    np.testing.assert_allclose(run(func, x, out_shape=(512, 256)), ((x + 1) * 2).T, rtol=1e-6)


def test_too_little_work_stays_on_one_thread(monkeypatch):
    a = te.placeholder((16, 64), name="a")
    out = te.compute(a.shape, lambda i, j: a[i, j] * 3, name="out")
    assert not [k for k in loop_kinds(scheduled(prim_func(a, out))) if "PARALLEL" in k]
    monkeypatch.setattr(cpu_default, "PARALLEL_MIN", 1)
    assert [k for k in loop_kinds(scheduled(prim_func(a, out))) if "PARALLEL" in k]


def test_a_matmul_keeps_serial_loops_and_a_softmax_sum_is_no_contraction():
    a, b = te.placeholder((128, 256), name="a"), te.placeholder((256, 128), name="b")
    k = te.reduce_axis((0, 256), name="k")
    mm = te.compute((128, 128), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="mm")
    func = scheduled(prim_func(a, b, mm))
    assert not [kind for kind in loop_kinds(func) if "PARALLEL" in kind]
    x, y = data(128, 256), data(256, 128, seed=1)
    np.testing.assert_allclose(run(func, x, y, out_shape=(128, 128)), x @ y, rtol=1e-4, atol=1e-4)

    softmax = tvm.s_tir.Schedule(prim_func(a, topi.nn.softmax(a)))
    assert not any(is_contraction(softmax.get(b)) for b in softmax.get_child_blocks(softmax.get_sblock("root")))
    matmul = tvm.s_tir.Schedule(prim_func(a, b, mm))
    assert is_contraction(matmul.get(matmul.get_sblock("mm")))


def test_a_masked_softmax_whose_mask_is_combined_as_bools_is_scheduled_and_right():
    # dlight's Reduction vectorizes every injective block, and LLVM refused its vector of bools
    # here ("and <16 x i1> ..., <16 x i8>"): the bool blocks are inlined first
    x = te.placeholder((1, 4, 128, 256), name="x")
    padding = te.placeholder((1, 1, 1, 256), name="padding", dtype="bool")
    causal = te.placeholder((1, 1, 128, 256), name="causal", dtype="bool")
    kept = te.compute(padding.shape, lambda *i: padding(*i), name="kept")
    both = te.compute(causal.shape, lambda n, h, i, j: te.all(causal[n, h, i, j], kept[n, h, 0, j]), name="both")
    masked = te.compute(x.shape, lambda n, h, i, j: te.if_then_else(both[n, 0, i, j], x[n, h, i, j],
                                                                    tvm.tirx.const(-1e30, "float32")), name="masked")
    func = prim_func(x, padding, causal, topi.nn.softmax(masked))
    with TARGET:
        assert CpuReduction().apply(func, TARGET, False) is not None
    rng = np.random.default_rng(0)
    values, pad, tri = data(1, 4, 128, 256), rng.random((1, 1, 1, 256)) > 0.2, np.tril(np.ones((128, 256), bool))
    pad[..., 0] = True  # every row keeps a key
    scores = np.where(tri & pad, values, -1e30)
    want = np.exp(scores - scores.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    got = run(scheduled(func), values, pad, tri.reshape(1, 1, 128, 256), out_shape=values.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_mask_computed_as_bools_builds_and_is_right():
    x = te.placeholder((512, 512), name="x")
    mask = te.compute(x.shape, lambda i, j: x[i, j] > 0, name="mask")
    out = te.compute(x.shape, lambda i, j: te.if_then_else(mask[i, j], x[i, j], tvm.tirx.const(0, "float32")),
                     name="out")
    values = data(512, 512)
    np.testing.assert_array_equal(run(scheduled(prim_func(x, out)), values, out_shape=(512, 512)),
                                  np.where(values > 0, values, 0))


def test_a_function_of_plain_loops_is_no_rule_s_and_builds_as_it_is():
    # TOPI writes a cumsum (OPT's positions, from the attention mask) as loops without blocks:
    # reading its blocks raised ("Cannot find a block with the name: root") and the build failed
    from plain_loops import cumsum_without_blocks

    func = cumsum_without_blocks(4, 32)
    with TARGET:
        assert CpuReduction().apply(func, TARGET, False) is None and CpuFallback().apply(func, TARGET, False) is None
    x = data(4, 32)
    np.testing.assert_allclose(run(func, x, out_shape=(4, 32)), np.cumsum(x, axis=1), rtol=1e-5)


def test_an_empty_tensor_s_loop_is_not_vectorized():
    # Phi-3's rotary slices at a short context: a loop of extent 0, which TVM cannot vectorize
    a = te.placeholder((4, 0), name="a")
    out = te.compute(a.shape, lambda i, j: a[i, j] * 2, name="out")
    func = scheduled(prim_func(a, out))
    assert "VECTORIZED" not in loop_kinds(func)
    assert run(func, np.zeros((4, 0), "float32"), out_shape=(4, 0)).shape == (4, 0)
