"""Measuring on every device behind a TVM RPC tracker.

Servers are TVM's own (`python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`, which
`kb-tvm worker` starts). Each server this process can get from the tracker gets one persistent
session, kept for the whole run, and a thread that takes candidates from a shared queue: it
uploads the built shared library (nothing is linked on the server), loads it, and times it as
the local measuring process does (`timer.time_function`: the same adaptive repeats and race).
Servers that register later are picked up at the next `submit`.

Faults:
- A server that dies mid-candidate gives its candidate back to the queue: another server measures
  it, and it is not counted as failed.
- A candidate that fails on a live server (it does not load, or it crashes the kernel launch) is
  a failed candidate, as it would be locally.
- A server whose device is not the one the run measures on (another GPU model under the same
  key) is refused at connection, with its name in the log.
- With no server left and the tracker unreachable, the queued candidates fail with one line that
  says so; the tune's records stay, and `--resume` continues.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

from . import workers
from .pipeline import CANDIDATE_FAILURES, Outcome
from .timer import time_function
from .timing import TimingPolicy, keep_best

log = logging.getLogger("kb_tvm")


class TrackerError(RuntimeError):
    """The tracker cannot be reached, or holds no server under the key: one line for the user."""


def parse_tracker(address: str) -> tuple[str, int]:
    """"HOST:PORT" -> (host, port), or ValueError naming the rule."""
    host, sep, port = str(address).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"tracker {address!r}: use HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


def tracker_summary(tracker: str) -> dict:
    """The tracker's summary (its queues and servers), or TrackerError if it cannot be reached."""
    from tvm import rpc

    host, port = parse_tracker(tracker)
    try:
        # TVM's connect_tracker retries for a minute: a closed port should be one line at once
        socket.create_connection((host, port), timeout=5).close()
        return rpc.connect_tracker(host, port).summary()
    except (OSError, RuntimeError) as err:
        raise TrackerError(f"no RPC tracker at {tracker} ({type(err).__name__}: {err})") from None


def servers_under(summary: dict, key: str) -> tuple[int, int]:
    """(registered, free) servers under `key` in a tracker summary."""
    registered = sum(1 for s in summary.get("server_info", []) if str(s.get("key", "")).split(":", 1)[-1] == key)
    free = int(summary.get("queue_info", {}).get(key, {}).get("free", 0))
    return registered, free


@dataclass
class _Job:
    artifact: str
    signature: tuple
    future: Future


class RemoteMeasurer:
    """Measures on every server registered under `key` at `tracker` (HOST:PORT): `submit`
    returns a Future of an Outcome whose value is the timing report plus the server that
    measured it. `device_type` is "cpu" or "cuda"; `device_name` pins the device model (e.g.
    "NVIDIA H200"); None takes the first server's and refuses others. A candidate with no
    answer after `hang_s` seconds fails, as a hang does on this machine, and its server is left
    alone (its call cannot be taken back); the other servers go on with the queue."""

    def __init__(self, *, tracker: str, key: str, device_type: str = "cpu", policy: TimingPolicy | None = None,
                 device_name: str | None = None, hang_s: float = 60.0) -> None:
        parse_tracker(tracker)
        if not hang_s > 0:
            raise ValueError(f"hang_s={hang_s!r}: must be a positive number of seconds")
        self.hang_s = hang_s
        self.tracker, self.key, self.device_type = tracker, key, device_type
        self.policy = policy or TimingPolicy()
        self.device_name = device_name
        self.best_s: dict[tuple, float] = {}
        self.sessions: dict[str, threading.Thread] = {}  # server -> its measuring thread
        self.refused: dict[str, str] = {}  # server -> why
        self.requeued = 0
        self.hung: dict[str, str] = {}  # server -> why it was left
        self._current: dict[str, tuple[_Job, float]] = {}  # server -> (the job it times, since when)
        self._current_lock = threading.Lock()
        self.fatal: str | None = None  # why no measurement can happen any more
        self.registered = 0  # servers under the key at the last look, busy or free
        self.watch_s = 1.0
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------ the queue
    def submit(self, artifact: str, signature: tuple) -> Future:
        if self.fatal is not None:
            raise TrackerError(self.fatal)
        future: Future = Future()
        self._queue.put(_Job(artifact, signature, future))
        return future

    def start(self) -> int:
        """Connect to the free servers now, and keep watching the tracker for more; how many
        are live. TrackerError, in one line, when the tracker or every server is missing."""
        live = self.connect()
        if live == 0:
            raise TrackerError(f"no RPC server under key {self.key!r} at tracker {self.tracker}"
                               + (f" (refused: {'; '.join(self.refused.values())})" if self.refused else ""))
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, daemon=True, name="kb-rpc-watch")
            self._watcher.start()
        return live

    @property
    def live(self) -> int:
        return sum(thread.is_alive() for name, thread in self.sessions.items() if name not in self.hung)

    def connect(self) -> int:
        """Open a session to each free server under the key; how many this run holds."""
        with self._lock:
            if self._closed:  # the watcher's last look must not take a server another run waits for
                return self.live
            self.registered, free = servers_under(tracker_summary(self.tracker), self.key)
            for _ in range(free):
                session = self._request()
                if session is None:
                    break
                self._admit(session)
            return self.live

    def _watch(self) -> None:
        """Servers that register later join; with none left and no tracker, the queued
        candidates fail with why, and the next batch is refused (`fatal`)."""
        while not self._closed:
            time.sleep(self.watch_s)
            self._leave_hung()
            try:
                self.connect()
                lost = None if self.live or self.registered else \
                    f"no RPC server is left under key {self.key!r} at tracker {self.tracker}"
            except TrackerError as err:
                lost = None if self.live else f"{err}; no RPC server is left to measure on"
            if lost is not None:  # else the queue waits for servers that are busy elsewhere
                self.fatal = lost
                self._fail_queued(f"run: {lost}")
                return

    def _leave_hung(self) -> None:
        """A server past `hang_s` on one candidate: that candidate fails, the server is left."""
        now = time.monotonic()
        with self._current_lock:
            late = [(name, job) for name, (job, since) in self._current.items() if now - since > self.hang_s]
            for name, _ in late:
                del self._current[name]
        for name, job in late:
            if job.future.done():
                continue
            self.hung[name] = f"no answer in {self.hang_s:.0f} s"
            log.warning("RPC server %s gave no answer in %.0f s; its candidate fails and the server is left",
                        name, self.hang_s)
            job.future.set_result(Outcome(error=f"run on {name}: no answer in {self.hang_s:.0f} s (a kernel "
                                                f"that never ends?); the server is left"))

    def _request(self):
        from tvm import rpc

        host, port = parse_tracker(self.tracker)
        try:
            tracker = rpc.connect_tracker(host, port)
            # TVM waits without end for a free server; one counted free may have been taken since
            tracker._sock.settimeout(15.0)
            return tracker.request(self.key, priority=1, session_timeout=0, max_retry=1)
        except (OSError, RuntimeError) as err:
            log.warning("RPC tracker %s gave no session under %r: %s", self.tracker, self.key, err)
            return None

    def _admit(self, session) -> None:
        name = f"{self.key}#{uuid.uuid4().hex[:6]}"
        device = session.device(self.device_type, 0)
        found = device.device_name if self.device_type != "cpu" else "cpu"
        if not device.exist:
            self.refused[name] = f"{name} has no {self.device_type} device"
            return
        if self.device_name is None:
            self.device_name = found
        elif found != self.device_name:
            self.refused[name] = f"{name} measures on {found!r}, this run on {self.device_name!r}"
            log.warning("refused RPC server %s", self.refused[name])
            return
        thread = threading.Thread(target=self._serve, args=(name, session, device), daemon=True,
                                  name=f"kb-rpc-{name}")
        self.sessions[name] = thread
        thread.start()

    # ------------------------------------------------------------ one server
    def _serve(self, name: str, session, device) -> None:
        cache: OrderedDict = OrderedDict()
        while True:
            job = self._queue.get()
            if job is None or self._closed:
                self._queue.put(None)  # the others stop too
                return
            with self._current_lock:
                self._current[name] = (job, time.monotonic())
            try:
                outcome = self._measure(name, session, device, cache, job)
            except (*CANDIDATE_FAILURES, OSError) as err:  # RPC's faults are RPCErrors or OSErrors
                outcome = err
            except Exception as bug:  # kb's own: surfaces in the tune, never a failed candidate
                with self._current_lock:
                    self._current.pop(name, None)
                job.future.set_exception(bug)
                raise
            with self._current_lock:
                if self._current.pop(name, None) is None:  # the watcher left this server: its candidate failed
                    return
            if isinstance(outcome, Exception):
                if _server_gone(session):
                    self.requeued += 1
                    log.warning("RPC server %s went away (%s); its candidate goes back to the queue", name,
                                str(outcome).strip().splitlines()[-1][:200])
                    self._queue.put(job)
                    return
                outcome = Outcome(error=f"run on {name}: {type(outcome).__name__}: {str(outcome).strip()[-2000:]}")
            job.future.set_result(outcome)

    def _measure(self, name: str, session, device, cache, job: _Job) -> Outcome:
        started = time.perf_counter()
        remote_name = f"kb-{uuid.uuid4().hex}.so"
        session.upload(job.artifact, remote_name)
        module = session.load_module(remote_name)
        args = workers.arguments(device, job.signature, cache)
        loaded = time.perf_counter()
        report = time_function(module, module.entry_name, device, args, self.policy,
                               self.best_s.get(job.signature), cpu=self.device_type == "cpu")
        timed = time.perf_counter()
        session.remove(remote_name)
        keep_best(self.best_s, job.signature, report)
        return Outcome(value={**report, "load_s": loaded - started, "timed_s": timed - loaded, "server": name},
                       seconds=timed - started, pid=os.getpid())

    def _fail_queued(self, why: str) -> None:
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            if job is not None and not job.future.done():
                job.future.set_result(Outcome(error=why))

    def close(self) -> None:
        with self._lock:  # after a connect in progress: it admits no server after this
            self._closed = True
        self._fail_queued("run: the measurer was closed")
        self._queue.put(None)


def _server_gone(session) -> bool:
    """Whether an RPC call failed because the server (or the link to it) is gone."""
    try:
        session.get_function("runtime.GetDeviceAttr")
        return False
    except (RuntimeError, OSError):  # an RPCError or a broken link: the session is dead
        return True
