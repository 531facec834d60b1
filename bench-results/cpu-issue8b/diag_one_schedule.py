"""One schedule timed several ways right after a tune (CPU fidelity check): its record, kb's measuring
process, kb's timing code in this process, a plain time_evaluator on kb's build and on tvm.compile's.
    python bench-results/cpu-issue8b/diag_one_schedule.py WORK_DIR   (a gemm-512 tune-op work dir)"""
import statistics, sys
import numpy as np
import tvm
from tvm.s_tir import meta_schedule as ms
from kb_tvm.adapter import RecordDatabase, KBBuilder, KBRunner
from kb_tvm.bench_pipeline import retime
from kb_tvm.measure import workers
from kb_tvm.measure.timing import TimingPolicy
from kb_tvm.measure.targets import make_target
from kb_tvm.workloads import get_workload

t = make_target("llvm")
db = RecordDatabase(work_dir=sys.argv[1])
wl = db.commit_workload(get_workload("gemm-512").module())
rec = db.get_top_k(wl, 1)[0]
print("recorded", [round(float(s) * 1e3, 4) for s in rec.run_secs])
cand = rec.as_measure_candidate()
b = KBBuilder(workers=1, timeout_s=60); r = KBRunner(device="cpu")
built = b.build([ms.builder.BuilderInput(cand.sch.mod, t)])
path = built[0].artifact_path
sig = tuple((k, str(d), tuple(int(x) for x in s)) for k, d, s in (a.as_json() for a in cand.args_info))
for i in range(3):
    (res,) = [f.result() for f in r.run([ms.runner.RunnerInput(path, "cpu", cand.args_info)])]
    rep = r.last_batch[0].value
    print("kb runner process", round(float(res.run_secs[0]) * 1e3, 4), rep["verdict"], rep["repeats"], rep["number"])
for i in range(3):
    rep = workers.measure(path, "cpu", 0, sig, TimingPolicy(), None)
    print("kb measure in this process", round(rep["median_s"] * 1e3, 4), rep["verdict"], rep["repeats"], rep["number"])
lib = tvm.runtime.load_module(path)
dev = tvm.cpu(0)
rng = np.random.default_rng(0)
args = [tvm.runtime.tensor(rng.uniform(-1, 1, size=[int(d) for d in a.shape]).astype(str(a.dtype)), dev) for a in cand.args_info]
for i in range(3):
    res = lib.time_evaluator(lib.entry_name, dev, number=5, repeat=10, min_repeat_ms=0)(*args).results
    print("kb-built, numpy args, 10x5", round(statistics.median(res) * 1e3, 4))
for i in range(3):
    print("retime (tvm.compile)", round(retime(cand, t) * 1e3, 4))
b.close(); r.close()
