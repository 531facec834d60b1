"""A kernel family plugs in through kernels/family.py alone: a second family, written here in a few
lines for llvm, is searched, checked against the task's output, timed and recorded by the shared
code (kernels/task_search.py), as the Hopper GEMM is on an H200."""

from dataclasses import dataclass

import numpy as np
import pytest

from kb_tvm.kernels.family import KernelFamily, NotApplicable


@dataclass(frozen=True)
class Split:
    factor: int  # the GEMM's row loop split by this (0: a wrong kernel that writes nothing)


class InOrder:
    """The family's variant search: its variants in the order given, the fastest kept."""

    def __init__(self, variants):
        self.pool, self.measured = list(variants), {}

    def ask(self):
        return next((v for v in self.pool if v not in self.measured), None)

    def tell(self, params, seconds):
        self.measured[params] = seconds

    @property
    def best(self):
        timed = [(p, s) for p, s in self.measured.items() if s is not None]
        return min(timed, key=lambda ps: ps[1]) if timed else None


class SplitGemm(KernelFamily):
    name = "split_gemm"
    source = "tests/test_kernel_family.py"

    def applies(self, target, precision=None):
        return None if target.kind.name == "llvm" else "a CPU family"

    def match(self, mod, target):
        func = mod["main"]
        if len(func.params) != 3:
            raise NotApplicable(f"{len(func.params)} buffers, not a GEMM's 3")
        return func

    def variants(self, problem, target, *, constants=frozenset()):
        return InOrder([Split(4), Split(16), Split(0)])

    def build(self, problem, params, target, task):
        import tvm
        from tvm import s_tir

        from kb_tvm.kernels.extern import ExternKernel

        sch = s_tir.Schedule(tvm.IRModule({"main": problem}))
        if params.factor:
            rows = sch.get_loops(sch.get_sblock("C"))[0]
            sch.split(rows, factors=[None, params.factor])
            func = sch.mod["main"]
        else:  # the wrong variant: an empty body, so C keeps its zeros
            func = problem.with_body(tvm.tirx.Evaluate(0))
        shapes = tuple(tuple(int(d) for d in p.ty.shape) for p in problem.params)
        return ExternKernel(task=task, symbol=f"split_gemm_{task}", func=func, shapes=shapes, pipeline="default")

    def describe(self, params):
        return f"split={params.factor}"

    def record(self, params):
        return {"factor": params.factor}

    def from_record(self, row):
        return Split(row["factor"])


@pytest.fixture
def gemm(llvm_target):
    from kb_tvm.workloads import get_workload

    mod = get_workload("gemm-128").module()
    return mod, SplitGemm().match(mod, llvm_target)


def test_a_family_registered_in_one_line_serves_its_targets(monkeypatch, llvm_target):
    from kb_tvm import kernels

    assert all(f.name != "split_gemm" for f in kernels.applicable(llvm_target))
    monkeypatch.setattr(kernels, "FAMILIES", (*kernels.FAMILIES, SplitGemm()))  # the one line
    # beside the CPU GEMM; the Hopper GEMM is sm_90's
    assert [f.name for f in kernels.applicable(llvm_target)] == ["cpu_gemm", "cpu_conv", "split_gemm"]


def test_the_shared_search_checks_times_records_and_resumes_a_new_family(gemm, llvm_target, tmp_path):
    from kb_tvm.kernels.task_search import FILE_NAME, local_device, read_rows, search_task, start_search

    mod, problem = gemm
    family = SplitGemm()

    def reference(arrays):
        a, b, _ = arrays
        return a.astype(np.float32) @ b.astype(np.float32)

    choice = search_task(family, problem, mod["main"], "gemm", llvm_target, local_device(llvm_target), reference,
                         until=lambda: False, work_dir=tmp_path, earlier=[])
    rows = read_rows(tmp_path)
    assert [r["factor"] for r in rows] == [4, 16, 0] and all(r["family"] == "split_gemm" for r in rows)
    right, wrong = rows[:2], rows[2]
    assert all(r["ok"] and r["seconds"] > 0 and r["error"] is None for r in right)
    assert not wrong["ok"] and wrong["seconds"] is None and wrong["error"].startswith("wrong result")
    assert choice.family is family and choice.seconds == min(r["seconds"] for r in right)
    assert choice.describe().startswith("split_gemm split=")
    events = []
    again = search_task(family, problem, mod["main"], "gemm", llvm_target, local_device(llvm_target), reference,
                        until=lambda: False, work_dir=tmp_path, earlier=rows, notify=events.append)
    assert again.params == choice.params and events == []  # resumed: nothing measured twice
    assert len((tmp_path / FILE_NAME).read_text().splitlines()) == 3
    # a stage's first pass: the first variant that runs right, then the next task; its second
    # pass goes on from there, measuring none twice
    (tmp_path / "first").mkdir()
    run = start_search(family, problem, mod["main"], "gemm", llvm_target, local_device(llvm_target), reference,
                       work_dir=tmp_path / "first", earlier=[])
    first = run(lambda: False, first_right_only=True)
    assert [r["factor"] for r in read_rows(tmp_path / "first")] == [4] and first.params.factor == 4
    best = run(lambda: False)
    rows = read_rows(tmp_path / "first")
    assert [r["factor"] for r in rows] == [4, 16, 0] and best.seconds == min(r["seconds"] for r in rows if r["ok"])
