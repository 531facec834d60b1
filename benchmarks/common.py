"""What the harnesses in benchmarks/ share (a script run by path finds this module beside it)."""

from __future__ import annotations


def design_space(workload, target):
    """The design space a tune searches for `workload` on `target`, as kb-tvm tune-op picks it:
    the tensor-core space for the workloads marked for it on CUDA, else MetaSchedule's default."""
    if target.kind.name == "cuda" and workload.cuda_space == "cuda-tensorcore":
        from kb_tvm import TensorCoreSpace

        return TensorCoreSpace()
    return "post-order-apply"
