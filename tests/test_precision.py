"""`kb-tvm tune --precision`: half-precision matmuls with fp32 accumulation, checked against
onnxruntime's fp32 outputs within a tolerance per precision."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from kb_tvm.cli import main

SHIPPED = Path(__file__).resolve().parent.parent / "workloads" / "transformer_block.onnx"


def _matmul_dtypes(mod) -> set[str]:
    """The input dtypes of the model's matmuls after the precision pass, read off its script."""
    import re

    binding = re.compile(r'^\s*(\w+): R\.Tensor\(.*dtype="(\w+)"\) = (.*)$')
    dtypes, seen = {}, set()
    for line in mod["main"].script().splitlines():
        if line.lstrip().startswith("def main("):
            dtypes.update(re.findall(r'(\w+): R\.Tensor\([^)]*\), dtype="(\w+)"\)', line))
        match = binding.match(line)
        if not match:
            continue
        name, dtype, value = match.groups()
        dtypes[name] = dtype
        if value.startswith("R.matmul("):
            assert dtype == "float32"  # fp32 accumulation and output
            seen.add(dtypes.get(value[len("R.matmul("):].split(",")[0], "?"))
    return seen


@pytest.mark.parametrize("precision,dtype", [("fp16", "float16"), ("bf16", "bfloat16"), ("fp32", "float32")])
def test_each_precision_builds_and_stays_within_its_tolerance_of_onnxruntime(precision, dtype):
    """On llvm (TVM computes fp16 and bf16 there too), untuned: the precision pass alone."""
    from kb_tvm.measure.targets import make_target
    from kb_tvm.model_tuning import (
        TOLERANCES,
        build,
        example_inputs,
        load_onnx,
        lower_precision,
        onnxruntime_outputs,
        prepare,
        run_and_time,
        to_relax,
    )
    from kb_tvm.model_tuning.precision import max_abs_error, mismatch

    model = load_onnx(SHIPPED)
    mod = lower_precision(to_relax(model), precision)
    assert _matmul_dtypes(mod) == {dtype}
    target = make_target("llvm")
    input_sets = [example_inputs(model), example_inputs(model, seed=1)]
    (outputs, second), _ = run_and_time(build(prepare(mod, target), target), target, input_sets, repeat=1)
    reference, _ = onnxruntime_outputs(model, input_sets[0])
    assert mismatch(reference, outputs, TOLERANCES[precision]) is None
    # the second set, run on the same VM after the timing, gives its own outputs
    assert mismatch(onnxruntime_outputs(model, input_sets[1])[0], second, TOLERANCES[precision]) is None
    assert not np.allclose(outputs[0], second[0])
    error = max_abs_error(reference, outputs)
    if precision != "fp32":  # half precision really changed the numbers; fp32 did not
        assert error > 1e-4
        assert mismatch(reference, outputs, TOLERANCES["fp32"]) is not None
    else:
        assert error < 1e-4


def test_fast_math_replaces_libm_erf_and_exp_on_cpus_and_stays_within_fp32_tolerance():
    """The shipped block's GELU (erf) and softmax (exp), as TVM's fast approximations on llvm;
    CUDA and --exact-math keep libm's."""
    import tvm

    from kb_tvm.measure.targets import make_target
    from kb_tvm.model_tuning import (
        TOLERANCES,
        apply_math,
        build,
        example_inputs,
        load_onnx,
        math_for,
        onnxruntime_outputs,
        prepare,
        run_and_time,
        to_relax,
    )
    from kb_tvm.model_tuning.precision import mismatch

    target = make_target("llvm")
    assert math_for(target, exact=False) == "fast" and math_for(target, exact=True) == "exact"
    assert math_for(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}), exact=False) == "exact"
    with pytest.raises(ValueError, match="math='approximate'"):
        apply_math(None, "approximate")
    model = load_onnx(SHIPPED)
    exact, fast = (prepare(apply_math(to_relax(model), math), target) for math in ("exact", "fast"))
    assert "T.erf(" in exact.script() and "T.exp(" in exact.script()
    assert "T.erf(" not in fast.script() and "T.exp(" not in fast.script()
    assert any(name.name_hint.startswith("fast_softmax") for name in fast.get_global_vars())
    input_sets = [example_inputs(model), example_inputs(model, seed=1)]
    outputs, _ = run_and_time(build(fast, target), target, input_sets, repeat=1)
    for inputs, got in zip(input_sets, outputs):
        assert mismatch(onnxruntime_outputs(model, inputs)[0], got, TOLERANCES["fp32"]) is None


def test_fast_math_computes_a_decoders_silu_through_fast_exp_which_the_cpu_gemm_family_still_fuses():
    """A SwiGLU's sigmoid lowered to a scalar libm exp per element on llvm; under fast math it is
    1 / (1 + fast_exp(-x)), and the gate projection with it stays one CPU GEMM kernel."""
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.kernels.cpu_gemm.family import CpuGemm, match_cpu_gemm
    from kb_tvm.schedules.cpu_gemm import CpuGemmTile
    from kb_tvm.measure.targets import make_target
    from kb_tvm.model_tuning import TOLERANCES, build, example_inputs, load_onnx, onnxruntime_outputs, run_and_time
    from kb_tvm.model_tuning.precision import mismatch
    from kb_tvm.model_tuning.relax_build import relax_module

    target = make_target("llvm")
    model = load_onnx(SHIPPED.parent / "llama_tiny.onnx", {"input_ids": (1, 16), "attention_mask": (1, 16)})
    exact, fast = (relax_module(model, target, precision="fp32", math=math) for math in ("exact", "fast"))
    assert "T.sigmoid(" in exact.script() and "T.sigmoid(" not in fast.script()
    gate = [t for t in ms.relax_integration.extract_tasks(fast, target) if "fast_exp" in str(t.task_name)]
    assert len(gate) == 1 and "matmul" in str(gate[0].task_name)
    problem = match_cpu_gemm(gate[0].dispatched[0])
    assert problem.epilogue and CpuGemm().build(problem, CpuGemmTile(rows=4, cols=16), target, "gate")  # fast_exp's
    # bit operations fuse into the kernel's epilogue (they raised NotAGemm)
    inputs = [example_inputs(model), example_inputs(model, seed=1)]
    outputs, _ = run_and_time(build(fast, target), target, inputs, repeat=1)
    for one, got in zip(inputs, outputs):
        assert mismatch(onnxruntime_outputs(model, one)[0], got, TOLERANCES["fp32"]) is None


def test_tolerances_scale_with_the_outputs_and_loosen_with_fewer_bits():
    from kb_tvm.model_tuning.precision import TOLERANCES, mismatch

    want = [np.array([100.0, -50.0, 0.0])]
    fp16 = TOLERANCES["fp16"]
    assert fp16.atol(want[0]) == pytest.approx(1.0)  # 1% of the largest magnitude
    assert mismatch(want, [want[0] + 0.9], fp16) is None
    assert "max abs difference 3" in mismatch(want, [want[0] + 3.0], fp16)
    assert mismatch(want, [want[0] + 3.0], TOLERANCES["bf16"]) is None
    assert "shape" in mismatch(want, [want[0][:2]], fp16)


def test_half_precision_casts_each_tensor_once_however_many_matmuls_read_it():
    """Q, K and V read the same layer norm output: one cast kernel serves them (before the
    fix, ToMixedPrecision's one cast per consumer made three identical launches)."""
    import tvm
    from tvm import relax

    from kb_tvm.model_tuning import load_onnx, lower_precision, prepare, to_relax

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    mod = prepare(lower_precision(to_relax(load_onnx(SHIPPED)), "fp16"), target)
    call_tir = tvm.ir.Op.get("relax.call_tir")
    casts = []

    def visit(expr):
        if isinstance(expr, relax.Call) and expr.op.same_as(call_tir) and expr.args[0].name_hint.startswith("cast"):
            casts.append(str(expr.args[1]))

    relax.analysis.post_order_visit(mod["main"], visit)
    assert casts, "the fp16 module casts the layer norms' outputs for the matmuls"
    assert len(casts) == len(set(casts)), casts


def test_half_precision_tasks_get_the_tensor_core_space_on_cuda():
    """No GPU needed: the CUDA design spaces of the fp16 model's tasks are made on the CPU."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tensor_core_helpers import H200
    from kb_tvm.model_tuning import load_onnx, lower_precision, prepare, to_relax
    from kb_tvm.model_tuning.precision import model_space

    target = tvm.target.Target(H200)
    assert model_space(target, "fp32") == "post-order-apply"
    mod = prepare(lower_precision(to_relax(load_onnx(SHIPPED)), "fp16"), target)
    tasks = {str(t.task_name): t for t in ms.relax_integration.extract_tasks(mod, target)}
    kinds = {}
    for name in ("fused_matmul_cast_add", "layer_norm"):
        ctx = ms.TuneContext(mod=tasks[name].dispatched[0], target=target, space_generator=model_space(target, "fp16"),
                             task_name=name)
        kinds[name] = ["wmma" in str(space.trace) for space in ctx.generate_design_space()]
    assert kinds["fused_matmul_cast_add"] and all(kinds["fused_matmul_cast_add"])  # tensor cores only
    assert kinds["layer_norm"] and not any(kinds["layer_norm"])  # CUDA cores, each sketch once


def test_a_cuda_library_mixing_tensor_core_records_and_default_reductions_builds(tmp_path):
    """No GPU needed (compile only). Tensor-core kernels lower only with merged shared memory,
    dlight's layer norm and softmax only without (TVM 0.27): the model build lowers each as
    it was tuned."""
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tensor_core_helpers import H200
    from kb_tvm.decision_log import DecisionLog
    from kb_tvm.measure.targets import build_config, uses_tensor_cores
    from kb_tvm.model_tuning import build, load_onnx, lower_precision, prepare, to_relax
    from kb_tvm.model_tuning.precision import model_space
    from kb_tvm.search import CandidateFactory, SearchOptions
    from kb_tvm.templates import load_templates

    target = tvm.target.Target(H200)
    mod = prepare(lower_precision(to_relax(load_onnx(SHIPPED)), "fp16"), target)
    tasks = {str(t.task_name): t for t in ms.relax_integration.extract_tasks(mod, target)}
    assert "layer_norm" in tasks and any("softmax" in name for name in tasks)
    task = tasks["fused_matmul_cast_add"]
    context = ms.TuneContext(mod=task.dispatched[0], target=target, space_generator=model_space(target, "fp16"),
                             task_name=task.task_name, num_threads=2, rand_state=1)
    factory = CandidateFactory(context=context, design_spaces=context.generate_design_space(),
                               templates=load_templates("cuda"), options=SearchOptions(seed=1, repeatable=True),
                               rng=np.random.default_rng(1), log=DecisionLog.for_task(str(tmp_path), "t", None))
    candidate = next(c for space in range(len(factory.spaces)) for c in factory.sample(space, 8))
    assert uses_tensor_cores(candidate.sch.mod)
    assert build_config(target, candidate.sch.mod) == {"tirx.merge_static_smem": True}
    layer_norm = tasks["layer_norm"].dispatched[0]
    assert not uses_tensor_cores(layer_norm) and build_config(target, layer_norm) == {}

    database = ms.database.MemoryDatabase()
    workload = database.commit_workload(task.dispatched[0])
    database.commit_tuning_record(ms.database.TuningRecord(candidate.sch.trace, workload, [1e-5], target))
    library = build(mod, target, database)
    # the VM launches the kernels between input and output as captured CUDA graphs
    assert "vm.builtin.cuda_graph.run_or_capture" in library.as_text()
    modules, sources = [library.mod], ""
    while modules:  # the VM executable imports the host library, which imports the CUDA one
        module = modules.pop()
        modules += list(module.imports)
        sources += module.inspect_source() if module.kind == "cuda" else ""
    assert "wmma::mma_sync" in sources  # the record's kernel, beside dlight's for the rest


@pytest.mark.tuning
def test_tune_in_fp16_reports_precision_and_tolerance(tmp_path):
    work_dir = tmp_path / "work"
    run = CliRunner().invoke(main, ["tune", str(SHIPPED), "--budget", "8s", "--target", "llvm",
                                    "--precision", "fp16", "--work-dir", str(work_dir), "--seed", "1"])
    assert run.exit_code == 0, run.output[-3000:]
    assert "in fp16" in run.stdout
    report = json.loads((work_dir / "report.json").read_text())
    assert report["precision"] == "fp16" and report["trials"] > 0
    numerics = report["numerics"]
    assert numerics["ok"] and numerics["checked_against"].startswith("onnxruntime")
    assert 0 < numerics["max_abs_error"] and numerics["tolerance"]["rtol"] == 1e-2
    assert "precision: fp16" in (work_dir / "report.md").read_text()
    assert report["math"] == "fast" and "math: fast" in (work_dir / "report.md").read_text()
    # the tuned kernels are the half-precision ones
    from kb_tvm.measure.candidate_log import CandidateLog

    tuned = list(CandidateLog.read(report["candidates"], kind="workload"))
    assert tuned and any('"float16"' in w["module"] for w in tuned)
    # resuming needs the same precision: other precisions are other kernels
    again = CliRunner().invoke(main, ["tune", str(SHIPPED), "--target", "llvm", "--precision", "bf16",
                                      "--work-dir", str(work_dir), "--resume"])
    assert again.exit_code != 0 and "holds a --precision fp16 run, not bf16" in again.output
    # and the same math: fast math is other kernels too
    exact = CliRunner().invoke(main, ["tune", str(SHIPPED), "--target", "llvm", "--precision", "fp16",
                                      "--exact-math", "--work-dir", str(work_dir), "--resume"])
    assert exact.exit_code != 0 and "holds a run with fast math, not exact: drop --exact-math" in exact.output
