"""Readable properties of a concrete schedule, read off its TIR after postprocessing.

Templates bound these properties, and the search logs them, so a person can see what
kind of kernel a candidate is (threads per block, vector width, unroll, ...).
"""

from __future__ import annotations

import math

PROPERTY_NAMES = (
    "threads_per_block",  # product of threadIdx extents (largest kernel)
    "blocks",  # product of blockIdx extents (largest kernel)
    "vector_lanes",  # widest vectorized loop
    "unroll_max_step",  # largest pragma_auto_unroll_max_step
    "shared_buffers",  # buffers staged in shared memory
    "local_buffers",  # thread-local (register) buffers
    "parallel_extent",  # extent of the outer parallel loop (CPU)
    "parallel_per_core",  # parallel_extent / cores (CPU)
    "loop_depth",  # deepest loop nest
)

_CHILD_FIELDS = ("body", "block", "init", "then_case", "else_case")


def _int_or(value, default: int = 1) -> int:
    if isinstance(value, int):
        return value
    return int(value.value) if hasattr(value, "value") else default


def schedule_properties(func, num_cores: int = 1) -> dict[str, float]:
    """Properties of a scheduled PrimFunc (see PROPERTY_NAMES)."""
    from tvm import tirx

    props = dict.fromkeys(PROPERTY_NAMES, 0.0)
    kernel_threads: dict[str, int] = {}
    kernel_blocks: dict[str, int] = {}

    def close_kernel() -> None:
        threads = math.prod(kernel_threads.values()) if kernel_threads else 0
        blocks = math.prod(kernel_blocks.values()) if kernel_blocks else 0
        props["threads_per_block"] = max(props["threads_per_block"], threads)
        props["blocks"] = max(props["blocks"], blocks)

    def note_buffer(buffer) -> None:
        scope = buffer.scope()
        # counts, not bytes: before lowering compacts them, buffers still have their full shape
        if scope.startswith("shared"):
            props["shared_buffers"] += 1
        elif scope == "local":
            props["local_buffers"] += 1

    def visit(stmt, depth: int, outermost_loop: bool) -> None:
        if isinstance(stmt, tirx.For):
            extent = _int_or(stmt.extent)
            kind = stmt.kind
            if kind == tirx.ForKind.THREAD_BINDING and stmt.thread_binding is not None:
                tag = stmt.thread_binding.thread_tag
                if tag.startswith("threadIdx"):
                    kernel_threads[tag] = max(kernel_threads.get(tag, 1), extent)
                elif tag.startswith("blockIdx"):
                    kernel_blocks[tag] = max(kernel_blocks.get(tag, 1), extent)
            elif kind == tirx.ForKind.VECTORIZED:
                props["vector_lanes"] = max(props["vector_lanes"], extent)
            elif kind == tirx.ForKind.PARALLEL and outermost_loop:
                props["parallel_extent"] = max(props["parallel_extent"], extent)
            step = stmt.annotations.get("pragma_auto_unroll_max_step") if stmt.annotations else None
            if step is not None:
                props["unroll_max_step"] = max(props["unroll_max_step"], _int_or(step, 0))
            props["loop_depth"] = max(props["loop_depth"], depth + 1)
            visit(stmt.body, depth + 1, False)
            return
        if isinstance(stmt, tirx.SeqStmt):
            for child in stmt.seq:
                visit(child, depth, outermost_loop)
            return
        for buffer in getattr(stmt, "alloc_buffers", None) or ():
            note_buffer(buffer)
        if isinstance(stmt, tirx.AllocBuffer):
            note_buffer(stmt.buffer)
        for name in _CHILD_FIELDS:
            child = getattr(stmt, name, None)
            if child is not None and isinstance(child, tirx.Stmt):
                visit(child, depth, outermost_loop)

    # each top-level statement of the body is a kernel on GPU targets
    body = func.body
    top = list(body.block.body.seq) if _is_root_with_seq(body) else [body]
    for stmt in top:
        kernel_threads.clear()
        kernel_blocks.clear()
        visit(stmt, 0, True)
        close_kernel()
    if num_cores > 0 and props["parallel_extent"]:
        props["parallel_per_core"] = props["parallel_extent"] / num_cores
    return props


def _is_root_with_seq(body) -> bool:
    from tvm import s_tir, tirx

    return (
        isinstance(body, s_tir.SBlockRealize)
        and isinstance(body.block.body, tirx.SeqStmt)
    )
