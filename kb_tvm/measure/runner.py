"""`KBRunner`: MetaSchedule's Runner on kb's persistent measuring process (`pipeline.py`) or an RPC
tracker's servers (`remote.py`); it serves stock MetaSchedule searches as well as KBSearch."""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, PyRunnerFuture, RunnerResult

from ..arguments import check_option
from .pipeline import Measurer
from .remote import RemoteMeasurer
from .timing import TimingPolicy
from .workers import argument_signature


@derived_object
class KBRunner(PyRunner):
    """Times built candidates in one persistent measuring process for `device` ("cpu" or "cuda",
    index `device_id`), or, given `tracker` (HOST:PORT) and `key`, on every server registered
    there (`measure/remote.py`): arguments allocated once per task, repeats adapted to the latency under
    `policy`, a median per candidate (one record each), and candidates 3x slower than the best
    stopped early (recorded as measured, not failed). A candidate that crashes or hangs fails
    alone: the process is restarted and the tune goes on. `run` returns at once; its futures
    resolve as the candidates are timed, one after another."""

    def __init__(self, *, device: str = "cpu", device_id: int = 0, policy: TimingPolicy | None = None,
                 timeout_s: float = 60.0, tracker: str | None = None, key: str | None = None) -> None:
        super().__init__()
        check_option("device", device, device in ("cpu", "cuda"), 'must be "cpu" or "cuda"')
        check_option("key", key, (tracker is None) == (key is None), "goes with tracker (HOST:PORT), both or neither")
        if tracker is not None:  # every server under the key at a TVM RPC tracker (raises TrackerError)
            self.measurer = RemoteMeasurer(tracker=tracker, key=key, device_type=device, policy=policy,
                                           hang_s=timeout_s)
        else:
            self.measurer = Measurer(device_type=device, device_id=device_id, policy=policy, timeout_s=timeout_s)
        self._batch: list = []  # the last batch's measurement futures
        self.batches_run = 0
        self._by_artifact: dict[str, object] = {}  # artifact -> its measurement future, until taken
        self._prefetched: dict[str, tuple[tuple, object]] = {}  # artifact -> (signature, future)
        # start the measuring process now: the first batch should not pay TVM's import
        self.measurer.start()

    def prefetch(self, artifact: str, signature: tuple) -> None:
        """Start timing a candidate before `run` asks for it (KBBuilder's streaming)."""
        self._prefetched[artifact] = (signature, self.measurer.submit(artifact, signature))

    def forget_prefetched(self) -> None:
        self._prefetched.clear()

    def run(self, runner_inputs):
        self._batch = []
        for r in runner_inputs:
            artifact, signature = str(r.artifact_path), argument_signature(r.args_info)
            started = self._prefetched.pop(artifact, None)
            if started is not None and started[0] == signature:
                self._batch.append(started[1])
            else:
                self._batch.append(self.measurer.submit(artifact, signature))
            self._by_artifact[artifact] = self._batch[-1]
        self.batches_run += 1
        return [_MeasurementFuture(future) for future in self._batch]

    @property
    def devices(self) -> int:
        """How many devices measure at once: the servers held, or this machine's one."""
        return max(1, self.measurer.live) if isinstance(self.measurer, RemoteMeasurer) else 1

    @property
    def latest_futures(self) -> list:
        """The measurement futures of the batch `run` started last."""
        return list(self._batch)

    @property
    def last_batch(self) -> list:
        """The last batch's Outcomes (waits for them): the worker's report per candidate."""
        return [future.result() for future in self._batch]

    def outcome_of(self, artifact: str):
        """The Outcome (seconds, report, server) of the candidate built to `artifact`, once."""
        future = self._by_artifact.pop(str(artifact), None)
        return None if future is None else future.result()

    def close(self) -> None:
        self.measurer.close()


@derived_object
class _MeasurementFuture(PyRunnerFuture):
    """A candidate being timed by KBRunner's measuring thread, as MetaSchedule's RunnerFuture."""

    def __init__(self, future) -> None:
        super().__init__()
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    def result(self):
        outcome = self.future.result()
        if outcome.error is not None:
            return RunnerResult(run_secs=None, error_msg=outcome.error)
        return RunnerResult(run_secs=[outcome.value["median_s"]], error_msg=None)
