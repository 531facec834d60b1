"""Measuring through a TVM RPC tracker, on llvm: a real tracker and two real servers on
127.0.0.1 (`kb-tvm worker`, TVM's rpc_server underneath), started here."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from kb_tvm.cli import main

KEY = "kb-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args):  # its own process group: TVM's server forks a child per session
    return subprocess.Popen([sys.executable, *args], start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _wait_free(address, count, seconds=60):
    """Until `count` servers under KEY are free (a closed session's server registers again)."""
    from kb_tvm.measure.remote import TrackerError, servers_under, tracker_summary

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if servers_under(tracker_summary(address), KEY)[1] >= count:
                return
        except TrackerError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"fewer than {count} servers free at {address}")


@pytest.fixture(scope="module")
def tracker_with_two_servers():  # started once: TVM's import makes each server ~5 s to start here
    port = _free_port()
    tracker = _start(["-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                      "--port-end", str(port + 1), "--silent"])
    address = f"127.0.0.1:{port}"
    servers = [_start(["-m", "kb_tvm.cli", "worker", "--tracker", address, "--key", KEY, "--host", "127.0.0.1",
                       "--port", str(_free_port())]) for _ in range(2)]
    _wait_free(address, 2)
    yield address, servers, tracker
    for proc in [*servers, tracker]:
        _kill(proc)


def _built_kernel(tmp_path):
    import tvm

    from kb_tvm.measure.targets import compile_kernel, make_target
    from kb_tvm.workloads import get_workload

    mod = get_workload("gemm-128").module()
    path = str(tmp_path / "gemm.so")
    compile_kernel(tvm.s_tir.Schedule(mod).mod, make_target("llvm")).export_library(path)
    return path, tuple(("TENSOR", "float32", (128, 128)) for _ in range(3))


def test_tune_op_measures_on_every_server_of_the_tracker(tracker_with_two_servers, tmp_path):
    from kb_tvm.measure.candidate_log import CandidateLog

    address, _, _ = tracker_with_two_servers
    _wait_free(address, 2)
    out = tmp_path / "result.json"
    result = CliRunner().invoke(main, ["tune-op", "gemm-128", "--target", "llvm", "--budget", "8s", "--rpc", address,
                                       "--key", KEY, "--work-dir", str(tmp_path / "work"), "--no-experience",
                                       "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"measuring at tracker {address}, key {KEY}, 2 servers" in result.output
    rows = list(CandidateLog.read(tmp_path / "work" / "candidates.jsonl"))
    measured = [r for r in rows if r["latency_s"] is not None]
    assert measured and json.loads(out.read_text())["final_ms"] > 0
    assert len({r["measured_on"] for r in measured}) == 2  # both servers timed candidates
    assert "best" in result.output and "re-timed" in result.output  # on a server too


def _two_matmul_model(path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.uniform(-1, 1, shape).astype("float32"), name)
               for name, shape in (("w1", (64, 128)), ("w2", (128, 64)))]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 64])], initializer=weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_model_tunes_its_tasks_on_both_servers_at_once(tracker_with_two_servers, tmp_path):
    """Two servers: while one task's batch is timed, the next task's is built and timed too;
    every candidate is recorded, and the report says what each server and task cost."""
    from kb_tvm.measure.candidate_log import CandidateLog

    address, _, _ = tracker_with_two_servers
    _wait_free(address, 2)
    work = tmp_path / "work"
    result = CliRunner().invoke(main, ["tune", str(_two_matmul_model(tmp_path / "mlp.onnx")), "--target", "llvm",
                                       "--budget", "12s", "--rpc", address, "--key", KEY, "--work-dir", str(work),
                                       "--no-experience"])
    assert result.exit_code == 0, result.output
    assert "measure)" in result.output  # a batch handed out while another was measuring
    report = json.loads((work / "report.json").read_text())
    rows = list(CandidateLog.read(work / "candidates.jsonl"))
    assert report["numerics"]["ok"] and len(rows) == report["trials"] > 0
    per_device, per_task = report["device_seconds"]["per_device"], report["device_seconds"]["per_task"]
    assert len(per_device) == 2 and all(s > 0 for s in per_device.values())  # both servers timed candidates
    # both are the candidate log's run seconds summed two ways, each sum rounded to the millisecond,
    # and together they cover every timed candidate (totals of rounded sums may differ by rounding)
    timed = [r for r in rows if r.get("run_s") is not None]
    assert per_task == {t: round(sum(r["run_s"] for r in timed if r["task"] == t), 3) for t in per_task}
    assert per_device == {d: round(sum(r["run_s"] for r in timed if r.get("measured_on") == d), 3) for d in per_device}
    assert set(per_device) == {r.get("measured_on") for r in timed}
    assert {t["task"] for t in report["tasks"] if t["device_seconds"]} == set(per_task) == {r["task"] for r in rows}


def test_a_server_on_another_device_is_refused(tracker_with_two_servers):
    from kb_tvm.measure.remote import RemoteMeasurer, TrackerError

    address, _, _ = tracker_with_two_servers
    _wait_free(address, 2)
    measurer = RemoteMeasurer(tracker=address, key=KEY, device_name="NVIDIA H200")  # these servers are CPUs
    with pytest.raises(TrackerError, match="refused: .* measures on 'cpu', this run on 'NVIDIA H200'"):
        measurer.start()


def test_a_server_killed_mid_batch_loses_no_candidate(tracker_with_two_servers, tmp_path):
    """It kills one of the shared servers: the next test takes the rest."""
    from kb_tvm.measure.remote import RemoteMeasurer

    address, servers, _ = tracker_with_two_servers
    _wait_free(address, 2)
    artifact, signature = _built_kernel(tmp_path)
    measurer = RemoteMeasurer(tracker=address, key=KEY)
    measurer.start()
    deadline = time.monotonic() + 30  # the tracker's free count lags a server that just registered again
    while measurer.live < 2 and time.monotonic() < deadline:  # the watcher picks it up
        time.sleep(0.3)
    assert measurer.live == 2
    futures = [measurer.submit(artifact, signature) for _ in range(40)]
    futures[0].result(timeout=60)
    _kill(servers[0])
    outcomes = [f.result(timeout=120) for f in futures]
    measurer.close()
    assert [o.error for o in outcomes if o.error] == []  # re-queued on the other server, none failed
    assert measurer.requeued >= 1 and measurer.live == 1


def _sleeping_kernel(tmp_path):
    """A kernel whose first call sleeps for 1000 s (libc's sleep: it hangs without using a core)."""
    import tvm
    from tvm.script import tirx as T

    from kb_tvm.measure.targets import compile_kernel, make_target

    @T.prim_func
    def main(a: T.Buffer((1,), "float32")):
        T.func_attr({"global_symbol": "main", "tir.noalias": True})
        T.evaluate(T.call_extern("int32", "sleep", 1000))
        a[0] = T.float32(1)

    path = str(tmp_path / "sleep.so")
    compile_kernel(tvm.IRModule({"main": main}), make_target("llvm")).export_library(path)
    return path, (("TENSOR", "float32", (1,)),)


def test_a_candidate_that_hangs_a_server_fails_alone_and_the_others_go_on(tracker_with_two_servers, tmp_path):
    """After the kill above one server is left; another joins for this test. The hung one
    stays busy until the last test kills every server."""
    from kb_tvm.measure.remote import RemoteMeasurer

    address, servers, _ = tracker_with_two_servers
    servers.append(_start(["-m", "kb_tvm.cli", "worker", "--tracker", address, "--key", KEY, "--host", "127.0.0.1",
                           "--port", str(_free_port())]))
    _wait_free(address, 2)
    sleeping, sleeping_signature = _sleeping_kernel(tmp_path)
    artifact, signature = _built_kernel(tmp_path)
    measurer = RemoteMeasurer(tracker=address, key=KEY, hang_s=3)
    measurer.start()
    deadline = time.monotonic() + 30
    while measurer.live < 2 and time.monotonic() < deadline:
        time.sleep(0.3)
    live = measurer.live
    assert live >= 2
    hanging = measurer.submit(sleeping, sleeping_signature)
    others = [measurer.submit(artifact, signature) for _ in range(6)]
    outcome = hanging.result(timeout=60)
    assert "no answer in 3 s" in outcome.error and outcome.error.startswith("run on kb-test#")
    assert [o.error for o in (f.result(timeout=60) for f in others)] == [None] * 6  # the other server timed them
    assert measurer.live == live - 1 and list(measurer.hung) == [outcome.error.split()[2].rstrip(":")]
    measurer.close()


def test_losing_the_tracker_and_every_server_fails_the_queue_with_why(tracker_with_two_servers, tmp_path):
    """Last of the tests that share the servers: it kills the tracker and the server left."""
    from kb_tvm.measure.remote import RemoteMeasurer, TrackerError

    address, servers, tracker = tracker_with_two_servers
    artifact, signature = _built_kernel(tmp_path)
    _wait_free(address, 1)
    measurer = RemoteMeasurer(tracker=address, key=KEY)
    assert measurer.start() == 1
    for proc in (*servers, tracker):  # whichever server it holds
        _kill(proc)
    outcome = measurer.submit(artifact, signature).result(timeout=60)
    assert outcome.error.startswith(f"run: no RPC tracker at {address}")
    assert "no RPC server is left to measure on" in outcome.error
    with pytest.raises(TrackerError, match="no RPC server is left"):  # the next batch stops the run
        measurer.submit(artifact, signature)
    measurer.close()


@pytest.mark.parametrize("args,message", [
    (["--rpc", "127.0.0.1:{closed}", "--key", KEY], "no RPC tracker at 127.0.0.1:{closed}"),
    (["--rpc", "nohost", "--key", KEY], "tracker 'nohost': use HOST:PORT"),
    (["--key", KEY], "--rpc HOST:PORT and --key KEY go together"),
])
def test_tracker_mistakes_are_one_line_errors(tmp_path, args, message):
    closed = _free_port()
    args = [a.format(closed=closed) for a in args]
    result = CliRunner().invoke(main, ["tune-op", "gemm-128", "--target", "llvm", "--budget", "5s",
                                       "--work-dir", str(tmp_path), *args])
    assert result.exit_code == 1
    assert message.format(closed=closed) in result.output and len(result.output.strip().splitlines()) == 1


def _tracker_and_server():
    port = _free_port()
    tracker = _start(["-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(port),
                      "--port-end", str(port + 1), "--silent"])
    address = f"127.0.0.1:{port}"
    server = _start(["-m", "kb_tvm.cli", "worker", "--tracker", address, "--key", KEY, "--host", "127.0.0.1",
                     "--port", str(_free_port())])
    _wait_free(address, 1)
    return address, [server, tracker]


def test_a_run_whose_tracker_dies_stops_in_one_line_keeps_its_records_and_resumes(tmp_path):
    """kb-tvm tune through a tracker that dies mid-run (server and all), then --resume through a
    new one: the first run ends with one line, and nothing it measured is lost."""
    import threading

    from tvm.s_tir import meta_schedule as ms

    model, work = str(_two_matmul_model(tmp_path / "mlp.onnx")), tmp_path / "work"
    args = ["tune", model, "--target", "llvm", "--key", KEY, "--work-dir", str(work), "--no-experience", "--seed", "1"]
    address, procs = _tracker_and_server()
    saw = []

    def kill_once_measured() -> None:  # the run itself stays in this process's main thread
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not saw:
            saw.extend([True] if _measured(work / "candidates.jsonl") else [])
            time.sleep(0.3)
        for proc in procs:
            _kill(proc)

    killer = threading.Thread(target=kill_once_measured)
    killer.start()
    first = CliRunner().invoke(main, args + ["--budget", "30s", "--rpc", address])
    killer.join()
    assert saw, "no candidate was measured through the tracker"
    assert first.exit_code == 1, first.output[-3000:]
    last = first.output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and f"no RPC tracker at {address}" in last
    assert f"Records are kept in {work}; `--resume` continues once servers are back" in last
    state = json.loads((work / "kb_state.json").read_text())
    measured_before = {str(r.trace) for r in ms.database.JSONDatabase(work_dir=str(work)).get_all_tuning_records()
                       if r.run_secs}
    assert measured_before and state["spent_s"] > 0

    address, procs = _tracker_and_server()
    try:
        # a few seconds past what the first run spent: resuming is what is checked, not more tuning
        budget = f"{state['spent_s'] + 5:.0f}s"
        second = CliRunner().invoke(main, args + ["--budget", budget, "--rpc", address, "--resume"])
    finally:
        for proc in procs:
            _kill(proc)
    assert second.exit_code == 0, second.output[-3000:]
    assert "resuming:" in second.output
    report = json.loads((work / "report.json").read_text())
    assert report["seconds_spent"] >= state["spent_s"] and report["numerics"]["ok"]
    after = {str(r.trace) for r in ms.database.JSONDatabase(work_dir=str(work)).get_all_tuning_records()}
    assert measured_before <= after


def _measured(path) -> bool:
    from kb_tvm.measure.candidate_log import CandidateLog

    return path.exists() and any(r.get("latency_s") is not None for r in CandidateLog.read(path))
