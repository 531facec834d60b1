"""kb's tensor-core design space for `cuda -arch=sm_90` (no GPU needed: sketches, sampling,
postprocessing and lowering run here): bf16 gets tensor-core sketches, which TVM's own space lacks;
software-pipelined WMMA sketches join the plain ones; a sampling deadline leaves no space unsampled."""

import numpy as np
import pytest

from kb_tvm.search.tensor_core_tiles import WmmaLimits, draw_tiles, fits, shared_bytes


def test_a_pipelined_sketch_stages_its_tiles_twice_and_needs_two_k1_steps():
    plain = WmmaLimits(max_warps=32, max_shared_bytes=49152)
    piped = WmmaLimits(max_warps=32, max_shared_bytes=49152, stages=2)
    i, j, k = [64, 1, 1, 2, 1], [64, 1, 2, 1, 1], [128, 2, 1]
    assert shared_bytes(i, j, k, piped) == 2 * shared_bytes(i, j, k, plain)
    assert fits(i, j, [256, 1, 1], plain) and not fits(i, j, [256, 1, 1], piped)  # k1 = 1: nothing to overlap
    rng = np.random.default_rng(0)
    for _ in range(100):
        i, j, k = draw_tiles(rng, (256, 256, 256), piped)
        assert k[1] >= 2 and shared_bytes(i, j, k, piped) <= 49152


def _stock_space():
    import tvm.s_tir.tensor_intrin.cuda  # noqa: F401 - TVM's own space needs its intrinsics registered
    from tvm.s_tir import meta_schedule as ms

    return ms.space_generator.PostOrderApply(sch_rules="cuda-tensorcore", postprocs="cuda-tensorcore",
                                             mutator_probs="cuda-tensorcore")


def _spaces(workload_name, space_generator):
    import tvm
    from kb_tvm.workloads import get_workload
    from tvm.s_tir import meta_schedule as ms

    from tensor_core_helpers import H200

    context = ms.TuneContext(mod=get_workload(workload_name).module(), target=tvm.target.Target(H200),
                             space_generator=space_generator, task_name=workload_name, num_threads=2)
    return context.generate_design_space()


def _annotations(sch) -> list[str]:
    return [str(inst.attrs[0]) for inst in sch.trace.insts if inst.kind.name == "Annotate"]


def test_bf16_gets_tensor_core_sketches_that_tvms_own_space_lacks_with_padded_staging():
    from kb_tvm import TensorCoreSpace

    stock = _spaces("gemm-4096-bf16", _stock_space())
    assert not any("wmma" in str(sch.mod) for sch in stock)  # TVM 0.27: CUDA cores only
    ours = _spaces("gemm-4096-bf16", TensorCoreSpace())
    assert ours and all("kb_wmma_sync_16x16x16_bf16bf16f32" in str(sch.trace) for sch in ours)
    for sch in ours:  # both staging buffers padded, as the C++ rule pads fp16 ones
        aligns = [inst for inst in sch.trace.insts if inst.kind.name == "StorageAlign"]
        assert [[int(a) for a in inst.attrs] for inst in aligns] == [[0, -2, 32, 8]] * 2
    assert {"double_buffer_scope" in _annotations(sch) for sch in ours} == {True, False}


def test_fp16_space_holds_the_stock_sketches_and_their_pipelined_twins():
    from kb_tvm import TensorCoreSpace

    stock = _spaces("gemm-1024-fp16", _stock_space())
    ours = _spaces("gemm-1024-fp16", TensorCoreSpace())
    assert len(ours) == 2 * len(stock)
    def steps(sch):  # the sketch's instructions, not its random decisions
        return [(inst.kind.name, str(inst.attrs)) for inst in sch.trace.insts]

    assert [steps(sch) for sch in ours[:len(stock)]] == [steps(sch) for sch in stock]
    assert all("software_pipeline_stage" in _annotations(sch) for sch in ours[len(stock):])


@pytest.mark.tuning
@pytest.mark.parametrize("workload_name", ["gemm-4096-bf16", "gemm-1024-fp16"])
def test_kbs_sampler_yields_mostly_valid_samples_in_every_space_and_they_lower(tmp_path, workload_name):
    import tvm
    from kb_tvm.workloads import get_workload

    from tensor_core_helpers import H200, candidate_factory
    from kb_tvm.measure.targets import build_config
    from kb_tvm.search import lowers_cleanly

    target = tvm.target.Target(H200)
    factory = candidate_factory(get_workload(workload_name), target, fitted_tiles=True, seed=1, log_dir=str(tmp_path))
    per_space = [factory.sample(space, 16) for space in range(len(factory.spaces))]
    assert len(per_space) == 4 and all(per_space)  # plain and pipelined sketches alike
    valid = [c for found in per_space for c in found]
    assert len(valid) / (16 * len(per_space)) >= 0.5  # measured: 61-71%
    assert factory.dropped["verify"] == 0  # the tile rules keep lowering failures out
    assert all(lowers_cleanly(c.sch.mod, target, build_config(target, c.sch.mod)) for c in valid[::4])


def test_a_sampling_deadline_leaves_no_design_space_unsampled(tmp_path):
    import tvm
    from kb_tvm.workloads import get_workload
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import TensorCoreSpace
    from tensor_core_helpers import H200
    from kb_tvm.budget import TuningBudget
    from kb_tvm.decision_log import DecisionLog
    from kb_tvm.search import SearchOptions, TaskSearch
    from kb_tvm.templates import load_templates

    context = ms.TuneContext(mod=get_workload("gemm-1024-fp16").module(), target=tvm.target.Target(H200),
                             space_generator=TensorCoreSpace(), task_name="gemm", num_threads=2, rand_state=1)
    # 256 samples wanted per space take longer than the 2-s floor of the deadline: one space at a
    # time, the deadline ran out inside the first
    task = TaskSearch(context=context, design_spaces=context.generate_design_space(), templates=load_templates("cuda"),
                      budget=TuningBudget("20s").start(), max_trials=1000, trials_per_batch=8,
                      options=SearchOptions(seed=1, sampling_time_share=0.01),
                      log=DecisionLog.for_task(str(tmp_path), "gemm", None))
    try:
        task._sample_regions()
        assert {c.space for c in task.pool} == set(range(len(task.factory.spaces))) == {0, 1, 2, 3}
    finally:
        task.stop("test over")


@pytest.mark.tuning
def test_a_bf16_record_replays_in_a_fresh_process_that_registered_kbs_intrinsics(tmp_path):
    """A bf16 record's trace names kb's intrinsics: replaying it later in a process of its own
    (compile_tir, as the README says) works once that process registered them, through kb's
    registration of TVM's (TVM's own import calls inspect.stack ~500 times: 30 s on 2 cores)."""
    import subprocess
    import sys

    import tvm
    from kb_tvm.workloads import get_workload

    from tensor_core_helpers import H200, candidate_factory

    factory = candidate_factory(get_workload("gemm-4096-bf16"), tvm.target.Target(H200), fitted_tiles=True,
                                seed=1, log_dir=str(tmp_path))
    (candidate, *_) = factory.sample(0, 4)
    (tmp_path / "trace.json").write_text(tvm.ir.save_json(candidate.sch.trace.as_json()))
    script = f"""
import inspect, json, tvm
from kb_tvm.search.tensor_core_space import register_bf16_intrinsics
from kb_tvm.workloads import get_workload
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import Trace
stack, stacks = inspect.stack, []
inspect.stack = lambda *args, **kwargs: stacks.append(1) or stack(*args, **kwargs)
register_bf16_intrinsics()
assert not stacks, f"inspect.stack ran {{len(stacks)}} times"
sch = Schedule(get_workload("gemm-4096-bf16").module())
Trace.apply_json_to_schedule(tvm.ir.load_json(open({str(tmp_path / "trace.json")!r}).read()), sch)
assert "kb_wmma" not in str(sch.mod) and "tvm_mma_sync" in str(sch.mod)
print("replayed")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert "replayed" in done.stdout, done.stderr[-2000:]


def test_a_sketch_rule_failing_on_a_random_draw_is_drawn_again_not_the_end_of_the_run():
    """TVM 0.27's rules failed a ResNet-50 conv + relu on a random compute location ("not a
    stage pipeline") and ended a stock run; each attempt draws again."""
    from tvm.s_tir.schedule import ScheduleError

    from kb_tvm.search.tensor_core_space import _sketches

    class Family:  # fails its first `failures` draws, as the rule did on some random states
        def __init__(self, failures):
            self.failures, self.calls = failures, 0

        def generate_design_space(self, mod):
            self.calls += 1
            if self.calls <= self.failures:
                raise ScheduleError("ScheduleError: The scope s_tir.SBlock#0 is not a stage pipeline.")
            return ["sketch a", "sketch b"]

    flaky = Family(failures=2)
    assert _sketches(flaky, mod=None) == ["sketch a", "sketch b"] and flaky.calls == 3
    broken = Family(failures=10)
    assert _sketches(broken, mod=None) == [] and broken.calls == 3


def test_a_task_whose_every_sample_fails_the_postprocessors_stops_after_sampling(tmp_path):
    # GPT-2's QKV split on CUDA (a reshape read by three outputs): no sample of its space passes
    # the postprocessors; the fine phase then sampled 192 more, 63 s of a 4-minute H100 job (16 s
    # here), for nothing. Its clock runs 10 s a reading: on a slow machine the sampling deadline
    # passed after 18 samples, and the fine phase was left to find the space empty
    import itertools

    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from tensor_core_helpers import H200
    from kb_tvm.budget import TuningBudget
    from kb_tvm.decision_log import DecisionLog, read_log
    from kb_tvm.measure.targets import register_tensor_intrinsics
    from kb_tvm.model_tuning.precision import model_space
    from kb_tvm.search import SearchOptions, TaskSearch
    from kb_tvm.templates import load_templates

    qkv = te.placeholder((16, 192), "float16", name="qkv")
    reshaped = te.compute((1, 16, 192), lambda b, i, j: qkv[i, j], name="reshape")

    def part(at):
        return te.compute((1, 16, 64), lambda b, i, j: reshaped[b, i, at * 64 + j], name=f"part{at}")

    mod = tvm.IRModule({"main": te.create_prim_func([qkv, *(part(at) for at in range(3))])})
    target = tvm.target.Target(H200)
    register_tensor_intrinsics()
    context = ms.TuneContext(mod=mod, target=target, space_generator=model_space(target, "fp16"),
                             task_name="split", num_threads=2, rand_state=1)
    task = TaskSearch(context=context, design_spaces=context.generate_design_space(),
                      templates=load_templates("cuda"), budget=TuningBudget("60s").start(), max_trials=1000,
                      trials_per_batch=16, options=SearchOptions(seed=1),
                      log=DecisionLog.for_task(str(tmp_path), "split", None),
                      clock=itertools.count(step=10.0).__next__)
    assert task.next_batch() is None
    assert task.stop_reason.startswith(f"none of its {task.sample_tries} samples passed MetaSchedule's postprocessors")
    (sampled,) = [e for e in read_log(tmp_path / "split.jsonl") if e["event"] == "coarse-sampled"]
    assert sampled["valid"] == 0 and sampled["dropped"]["postproc"] == task.sample_tries >= 32
