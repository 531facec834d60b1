"""The machine's ceiling: measured once per machine on a CPU, kept, and a task's roofline."""

import json

import pytest


def test_the_host_ceiling_is_measured_once_and_kept(tmp_path, llvm_target):
    from kb_tvm.measure.ceiling import Ceiling, host_ceiling, machine_key

    path = tmp_path / "ceilings.json"
    first = host_ceiling(llvm_target, path)
    kept = json.loads(path.read_text())["machines"]
    assert list(kept) == [machine_key(llvm_target)]
    # a CPU does more than a GFLOP/s and a GB/s, and no machine here a hundred TFLOP/s
    assert 1e9 < first.flops < 1e14 and 1e9 < first.bytes_per_s < 1e13
    assert "numpy matmul" in first.source
    # kept: what the file says is what a later run uses, not a new measurement
    kept[machine_key(llvm_target)] = {"flops": 1e11, "bytes_per_s": 2e10, "source": "edited"}
    path.write_text(json.dumps({"schema": 1, "machines": kept}))
    assert host_ceiling(llvm_target, path) == Ceiling(1e11, 2e10, "edited")


def test_a_task_ceiling_is_its_slower_roof_and_gpus_have_none(tmp_path):
    import tvm

    from kb_tvm.measure.ceiling import Ceiling, buffer_bytes, host_ceiling
    from kb_tvm.workloads import get_workload

    ceiling = Ceiling(flops=1e11, bytes_per_s=1e10, source="test")
    gemm = get_workload("gemm-512").module()["main"]
    assert buffer_bytes(gemm) == 3 * 512 * 512 * 4
    assert ceiling.seconds(2 * 512**3, buffer_bytes(gemm)) == pytest.approx(2 * 512**3 / 1e11)  # compute-bound
    linear = get_workload("linear-128x768x768-fp16").module()["main"]
    assert buffer_bytes(linear) == 2 * (128 * 768 + 768 * 768 + 128 * 768)  # float16: two bytes a value
    assert ceiling.seconds(0, 4e6) == pytest.approx(4e-4)  # a copy: bandwidth-bound
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90", "host": {"kind": "llvm"}})
    assert host_ceiling(cuda, tmp_path / "ceilings.json") is None
    assert not (tmp_path / "ceilings.json").exists()
