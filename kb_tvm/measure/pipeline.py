"""The build-and-measure path behind kb's Builder and Runner (`KBBuilder`, `KBRunner` in
`builder.py` and `runner.py`), in processes that live across batches.

Where MetaSchedule's own path spends a trial's seconds (TVM 0.27): LocalBuilder starts a fresh
pool per batch, so every batch pays each worker's TVM import and intrinsic registration; its
artifacts are tars that the runner untars and links one at a time; LocalRunner allocates the
arguments again for every candidate and times each with number=3 and a 100-ms floor.

Here:
- `BuildPool`: persistent build workers (warmed up at start, recycled after a bounded number of
  builds for TVM's known builder leak); each candidate has its own timeout, and a hung or
  crashed worker fails its candidate alone and is replaced. Workers link a shared library.
- `Measurer`: one persistent measuring process per device. It keeps the arguments of the last
  few tasks, times under a `TimingPolicy` (adaptive repeats, a median, a race against the best),
  and is restarted after a candidate that crashed, hung or, on a GPU, may have broken the CUDA
  context; that candidate fails and the tune goes on. Measurements run one at a time on its own
  thread (`submit`), so a batch's first candidates can be timed while the rest still build
  (streaming: the builder hands each library over as soon as it is built).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass

from . import workers
from .timing import TimingPolicy, keep_best

# What a candidate that fails to build or run raises: TVM's rejections and device faults are
# RuntimeErrors (InternalError, ScheduleError, RPCError; nvcc's "Compilation error" too: every failed
# build of the recorded datasets was one of these or a timeout), a hang a TimeoutError, a crash a
# ChildProcessError. Anything else (a TypeError from a changed API, our own bugs) ends the tune.
CANDIDATE_FAILURES = (RuntimeError, TimeoutError, ChildProcessError)


@dataclass
class Outcome:
    """One candidate through the build or the measurement: a value or an error, and seconds."""
    value: object = None
    error: str | None = None
    seconds: float | None = None  # None: a failure that took no time anyone saw
    pid: int | None = None


def _failure(err: BaseException, what: str, timeout_s: float) -> str:
    if isinstance(err, TimeoutError):
        return f"{what}: timeout, killed after {timeout_s:g} s"
    if isinstance(err, ChildProcessError):
        return f"{what}: the worker process died (crash); it was replaced"
    return f"{what}: {type(err).__name__}: {str(err).strip()[-2000:]}"


# A build may take SLOW_BUILD_FACTOR times the slowest build that succeeded so far, never less than
# BUILD_FLOOR_S nor more than timeout_s (a worker imports TVM in its initializer, which no timeout
# covers, so the floor is for LLVM's own slow starts). A pathological schedule (a softmax unrolled
# into LLVM for minutes) then costs its worker 10 s, not the cold-start allowance: at 120 s two of
# them stalled a 60-s CPU budget for 4 minutes, and at 30 s one ate a 20-s budget whole. At 20x a
# softmax's 1.7-s builds, one such build still held a 4-candidate batch for 34 s of a 90-s budget;
# in the shipped datasets (in file order) no build that succeeded would have been cut at 8x.
SLOW_BUILD_FACTOR = 8
BUILD_FLOOR_S = 10.0
# and never past the job's budget by more than this: a build cut there fails, a build let run
# past it spends seconds the user did not give
BUDGET_GRACE_S = 1.0


class BuildPool:
    """Persistent build workers. `build(pairs)` builds (module, target) pairs in parallel and
    returns an Outcome per pair, in order, whose value is a shared library's path. `timeout_s`
    bounds the first builds (a cold machine); later ones get `limit_s`. `seconds_left`: what is
    left of the job's budget (None: no budget); no build runs past it."""

    def __init__(self, *, workers_count: int, timeout_s: float, builds_per_worker: int = 256,
                 floor_s: float = BUILD_FLOOR_S, slow_factor: float = SLOW_BUILD_FACTOR,
                 seconds_left: Callable[[], float] | None = None) -> None:
        from tvm.support.popen_pool import PopenPoolExecutor

        if not (isinstance(workers_count, int) and workers_count >= 1):
            raise ValueError(f"workers_count={workers_count!r}: must be an integer >= 1")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}: must be positive")
        if not 0 < floor_s <= timeout_s:
            raise ValueError(f"floor_s={floor_s!r}: must be positive and at most timeout_s={timeout_s!r}")
        if not slow_factor >= 1:
            raise ValueError(f"slow_factor={slow_factor!r}: must be at least 1")
        self.timeout_s = float(timeout_s)
        if seconds_left is not None and not callable(seconds_left):
            raise ValueError(f"seconds_left={seconds_left!r}: must be a callable returning seconds, or None")
        self.floor_s, self.slow_factor = float(floor_s), float(slow_factor)
        self.seconds_left = seconds_left
        self.slowest_ok_s: float | None = None
        self.workers_count = workers_count
        self.artifact_dir = tempfile.mkdtemp(prefix="kb-artifacts-")
        self._pool = PopenPoolExecutor(max_workers=workers_count, timeout=self.timeout_s,
                                       initializer=workers.warm_up, maximum_process_uses=builds_per_worker,
                                       stdout=subprocess.DEVNULL)
        # start every worker now, in the background: the first batch should not pay TVM's import
        self._warming = [self._pool.submit(workers.pid) for _ in range(workers_count)]
        self._finalizer = weakref.finalize(self, _close_pool, self._pool, self.artifact_dir)

    def build(self, pairs: list, on_built: Callable[[int, Outcome], None] | None = None) -> list[Outcome]:
        """on_built(index, outcome) is called as each candidate finishes, in the order they do."""
        limit_s = self.limit_s
        self._pool._timeout = limit_s  # read by each submit's worker (TVM's PopenPoolExecutor)
        futures = {self._pool.submit(workers.build, mod, target, self.artifact_dir): index
                   for index, (mod, target) in enumerate(pairs)}
        outcomes: list[Outcome | None] = [None] * len(pairs)
        for future in as_completed(futures):
            try:
                path, seconds, pid = future.result()
                outcome = Outcome(value=path, seconds=seconds, pid=pid)
                self.slowest_ok_s = max(self.slowest_ok_s or 0.0, seconds)
            except CANDIDATE_FAILURES as err:
                outcome = Outcome(error=_failure(err, "build", limit_s),
                                  seconds=limit_s if isinstance(err, TimeoutError) else None)
            outcomes[futures[future]] = outcome
            if on_built is not None:
                on_built(futures[future], outcome)
        return outcomes

    @property
    def limit_s(self) -> float:
        """Seconds the next batch's builds may each take."""
        limit = self.timeout_s
        if self.slowest_ok_s is not None:
            limit = min(limit, max(self.floor_s, self.slow_factor * self.slowest_ok_s))
        if self.seconds_left is not None:
            limit = min(limit, max(0.0, self.seconds_left()) + BUDGET_GRACE_S)
        return limit

    def worker_pids(self) -> set[int]:
        """The live workers' process ids (a test watches them stay the same across batches)."""
        return {w._proc.pid for w in self._pool._worker_map.values() if w._proc is not None}

    def close(self) -> None:
        self._finalizer()


def _close_pool(pool, artifact_dir: str) -> None:
    pool.shutdown(wait=False)
    shutil.rmtree(artifact_dir, ignore_errors=True)


class Measurer:
    """One persistent measuring process for one device. `submit(...)` queues a built candidate
    for timing and returns a Future of an Outcome whose value is the worker's report (median_s,
    repeats, verdict...)."""

    def __init__(self, *, device_type: str, device_id: int = 0, policy: TimingPolicy | None = None,
                 timeout_s: float = 60.0) -> None:
        from tvm.support.popen_pool import PopenWorker

        self.device_type = device_type
        self.device_id = device_id
        self.policy = policy or TimingPolicy()
        self.timeout_s = float(timeout_s)
        self.restarts = 0
        self.best_s: dict[tuple, float] = {}  # per argument signature: the race's reference
        self.measured = 0
        self._worker = PopenWorker(stdout=subprocess.DEVNULL)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kb-measure")  # one at a time: one device
        self._finalizer = weakref.finalize(self, _close_measurer, self._thread, self._worker)

    def submit(self, artifact: str, signature: tuple) -> Future:
        """Measure on the measuring thread, after what was submitted before; a Future of its Outcome."""
        return self._thread.submit(self._measure, artifact, signature)

    def _measure(self, artifact: str, signature: tuple) -> Outcome:  # on the measuring thread only
        self.measured += 1
        best = self.best_s.get(signature)
        self._worker.send(workers.measure, (artifact, self.device_type, self.device_id, signature, self.policy,
                                            best), timeout=self.timeout_s)
        try:
            report = self._worker.recv()
        except CANDIDATE_FAILURES as err:
            if isinstance(err, (TimeoutError, ChildProcessError)) or self.device_type != "cpu":
                self._restart()  # hung, dead, or a GPU context the fault may have broken
            return Outcome(error=_failure(err, "run", self.timeout_s),
                           seconds=self.timeout_s if isinstance(err, TimeoutError) else None)
        keep_best(self.best_s, signature, report)
        return Outcome(value=report, seconds=report["load_s"] + report["timed_s"], pid=report["pid"])

    def _restart(self) -> None:
        self.restarts += 1
        self._worker.kill()  # the next send starts a fresh process

    def start(self) -> Future:
        """Start the measuring process (if it is not running) without waiting; a Future of its id."""
        return self._thread.submit(self._ask_pid)

    def pid(self) -> int:
        return self.start().result()

    def _ask_pid(self) -> int:
        self._worker.send(workers.pid, ())
        return self._worker.recv()

    def close(self) -> None:
        self._finalizer()


def _close_measurer(thread: ThreadPoolExecutor, worker) -> None:
    thread.shutdown(wait=False, cancel_futures=True)
    worker.kill()  # a measurement still running fails at once
