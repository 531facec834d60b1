"""Where the first batch's seconds go on the H200 host: how long kb's build workers take to start,
with and without registering TVM's tensor intrinsics, and whether tensor-core candidates build in a
worker that never registered them. On the device (warm machine): python3 bench-results/h200-warmup.py"""
import subprocess
import sys
import time

from tvm.support.popen_pool import PopenPoolExecutor

from kb_tvm.measure import workers


def timed(command: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", command], check=True)
    return time.perf_counter() - started


def concurrent(command: str, count: int) -> float:
    started = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", command]) for _ in range(count)]
    for p in procs:
        p.wait()
    return time.perf_counter() - started


print("one process: import tvm %.1fs, + tvm.driver %.1fs, + tensor_intrin %.1fs" % (
    timed("import tvm"), timed("import tvm.driver"), timed("import tvm.driver, tvm.s_tir.tensor_intrin")))
print("15 at once: import tvm.driver %.1fs, + tensor_intrin %.1fs" % (
    concurrent("import tvm.driver, tvm.s_tir.transform", 15),
    concurrent("import tvm.driver, tvm.s_tir.transform, tvm.s_tir.tensor_intrin", 15)))


def bare() -> int:  # what warm_up would be without the tensor intrinsics
    import os

    import tvm.driver  # noqa: F401
    import tvm.s_tir.transform  # noqa: F401
    return os.getpid()


from kb_tvm.bench_pipeline import sample_candidates  # noqa: E402
from kb_tvm.measure.targets import make_target  # noqa: E402
from kb_tvm.workloads import get_workload  # noqa: E402

target = make_target("cuda")
candidates = sample_candidates(get_workload("gemm-4096-fp16"), target, 32, 1)
for name, init in (("bare", bare), ("with intrinsics", workers.warm_up)):
    started = time.perf_counter()
    pool = PopenPoolExecutor(max_workers=15, timeout=300, initializer=init)
    for f in [pool.submit(workers.pid) for _ in range(15)]:
        f.result()
    warm = time.perf_counter() - started
    futures = [pool.submit(workers.build, c.sch.mod, target, "/tmp") for c in candidates]
    ok, errors = 0, set()
    for f in futures:
        try:
            f.result()
            ok += 1
        except Exception as err:  # noqa: BLE001
            errors.add(str(err).strip().splitlines()[-1][:120])
    print(f"{name}: 15 workers ready in {warm:.1f}s, {len(candidates)} fp16 candidates built in "
          f"{time.perf_counter() - started - warm:.1f}s, {ok} ok; errors: {sorted(errors)[:3]}")
    pool.shutdown()
