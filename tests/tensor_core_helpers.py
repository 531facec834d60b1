"""The H200's CUDA target and KBSearch's candidate factory outside a tune, shared by the tests of
the tensor-core space (no GPU needed: sampling, postprocessing and lowering for sm_90 run on the CPU)."""

from __future__ import annotations

# the H200 as kb's cuda target describes it, without needing the GPU
H200 = {"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
        "thread_warp_size": 32, "registers_per_block": 65536, "host": {"kind": "llvm"}}


def candidate_factory(workload, target, *, fitted_tiles: bool, seed: int, log_dir: str):
    """KBSearch's candidate factory for `workload`'s space on `target` (the tensor-core space for
    the workloads marked for it on CUDA, as tune-op picks it), outside a tune."""
    from kb_tvm import TensorCoreSpace
    from kb_tvm.decision_log import DecisionLog
    from kb_tvm.search import CandidateFactory, SearchOptions

    tensor_cores = target.kind.name == "cuda" and workload.cuda_space == "cuda-tensorcore"
    return CandidateFactory.outside_tune(
        workload.module(), target, space_generator=TensorCoreSpace() if tensor_cores else "post-order-apply",
        options=SearchOptions(seed=seed, repeatable=True, fitted_tiles=fitted_tiles), task_name=workload.name,
        log=DecisionLog.for_task(log_dir, workload.name, None))
