"""Issue 9: are kb's tensor-core candidates right, and how fast? Draws valid candidates of a GEMM's
tensor-core space with KBSearch's candidate factory (kb_tvm/search/tensor_core_space.py: bf16
intrinsics and padding, software-pipelined WMMA sketches), builds them as kb builds them, runs each
on the GPU against numpy (fp32 product of the rounded inputs), and times them.
    python3 bench-results/h200-tc-check.py gemm-4096-bf16 6 OUT.json [--pipelined]   (on the H200)
--pipelined: only the software-pipelined sketches."""
import json
import sys
import tempfile
import time

import ml_dtypes
import numpy as np
import tvm
from kb_tvm.workloads import get_workload
from tvm.s_tir import meta_schedule as ms

from kb_tvm.bench_yield import H200, candidate_factory
from kb_tvm.measure.targets import compile_kernel

name, wanted, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
target = tvm.target.Target(H200)
workload = get_workload(name)
with tempfile.TemporaryDirectory() as logs:
    factory = candidate_factory(workload, target, fitted_tiles=True, seed=3, log_dir=logs)
    candidates = []
    for space in range(len(factory.spaces)):
        pipelined = any(inst.kind.name == "Annotate" and str(inst.attrs[0]) == "double_buffer_scope"
                        for inst in factory.spaces[space].trace.insts)
        if pipelined or "--pipelined" not in sys.argv:
            candidates += factory.sample(space, wanted)
candidates = candidates[:wanted]
print(f"{len(candidates)} valid candidates from {len(factory.spaces)} spaces")

rng = np.random.default_rng(0)
a_shape, b_shape, c_shape = ([int(d) for d in info.shape]
                             for info in ms.arg_info.ArgInfo.from_prim_func(workload.module()["main"]))
dtype = ml_dtypes.bfloat16 if "bf16" in name else np.float16
a16 = rng.uniform(-1, 1, a_shape).astype(dtype)
b16 = rng.uniform(-1, 1, b_shape).astype(dtype)
expected = a16.astype(np.float32) @ b16.astype(np.float32)
dev = tvm.cuda(0)
a, b = tvm.runtime.tensor(a16, dev), tvm.runtime.tensor(b16, dev)
rows = []
for i, cand in enumerate(candidates):
    started = time.time()
    try:
        lib = compile_kernel(cand.sch.mod, target)
    except Exception as error:  # noqa: BLE001 - a build failure is a result here, with its reason
        rows.append({"candidate": i, "built": False, "error": str(error).splitlines()[-1][:300]})
        print(rows[-1])
        continue
    build_s = time.time() - started
    c = tvm.runtime.tensor(np.zeros(c_shape, dtype="float32"), dev)
    lib["main"](a, b, c)
    dev.sync()
    err = float(np.max(np.abs(c.numpy() - expected)))
    timer = lib.mod.time_evaluator("main", dev, number=20, repeat=3, min_repeat_ms=50)
    ms = float(np.median(timer(a, b, c).results)) * 1e3
    rows.append({"candidate": i, "built": True, "build_s": round(build_s, 2), "max_abs_err": err,
                 "correct": bool(err < 1e-2 * np.sqrt(a_shape[1])), "ms": ms,
                 "tflops": workload.flops / ms / 1e9, "trace": str(cand.sch.trace)})
    print({k: v for k, v in rows[-1].items() if k != "trace"})
with open(out, "w") as file:
    json.dump({"workload": name, "target": str(target), "rows": rows}, file, indent=1)
