"""`KBBuilder`: MetaSchedule's Builder on kb's persistent build workers (`pipeline.py`); it serves
stock MetaSchedule searches as well as KBSearch."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

from ..arguments import check_option
from .pipeline import BuildPool
from .workers import argument_signature, built_arguments, cuda_compiler

if TYPE_CHECKING:
    from .runner import KBRunner


@derived_object
class KBBuilder(PyBuilder):
    """Builds candidates in persistent worker processes (TVM imported once per worker, recycled
    after `builds_per_worker` builds), each with its own timeout, to loadable shared libraries
    (nothing is linked per candidate at run time; KBRunner and LocalRunner both load them).
    `stream_to`: a KBRunner that starts timing each candidate as soon as it is built, while the
    rest of the batch still builds (worth it where builds and measurements use different
    hardware, i.e. on a GPU; on a CPU they would share cores and disturb the timings).
    `seconds_left`: what is left of the job's budget, e.g. `lambda: budget.remaining`; no build
    runs past it."""

    def __init__(self, *, workers: int, timeout_s: float = 30.0, builds_per_worker: int = 256,
                 stream_to: KBRunner | None = None, seconds_left: Callable[[], float] | None = None) -> None:
        super().__init__()
        check_option("stream_to", stream_to, stream_to is None or hasattr(stream_to, "prefetch"),
                     "must be a KBRunner or None")
        self.pool = BuildPool(workers_count=workers, timeout_s=timeout_s, builds_per_worker=builds_per_worker,
                              seconds_left=seconds_left)
        self.stream_to = stream_to
        self.last_batch: list = []  # the last batch's Outcomes: seconds and worker per candidate
        # each result's Outcome until the candidate log takes it: with several tasks' batches in
        # flight, the batch joined is not always the last one built
        self.outcomes: dict = {}
        self.cuda_compiler: tuple[str, str] | None = None  # (compiler, why), said once

    def build(self, build_inputs):
        if self.cuda_compiler is None and any(b.target.kind.name == "cuda" for b in build_inputs):
            self.cuda_compiler = cuda_compiler()  # the workers decide the same way
            logging.getLogger("kb_tvm").warning("CUDA kernels compile with %s: %s", *self.cuda_compiler)
        on_built = None
        if self.stream_to is not None:
            self.stream_to.forget_prefetched()  # a batch MetaSchedule never ran

            def on_built(index: int, outcome) -> None:
                if outcome.error is None:
                    signature = argument_signature(built_arguments(build_inputs[index].mod))
                    self.stream_to.prefetch(outcome.value, signature)

        self.last_batch = self.pool.build([(b.mod, b.target) for b in build_inputs], on_built)
        results = [BuilderResult(o.value, None) if o.error is None else BuilderResult(None, o.error)
                   for o in self.last_batch]
        self.outcomes.update(zip(results, self.last_batch))  # TVM objects hash by identity
        return results

    def outcome_of(self, result):
        """The Outcome (seconds, worker) of a BuilderResult this builder returned, once."""
        return self.outcomes.pop(result, None)

    def close(self) -> None:
        self.pool.close()
