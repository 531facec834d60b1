"""Issue 9: tensor-core candidates that TVM 0.27 fails to lower (`tvm_access_ptr element type must
match the source buffer`, raised in StorageRewrite) do lower with the pass option
`tirx.merge_static_smem`; are the kernels then right, and how fast? Samples the WMMA space of an
fp16 GEMM with tile decisions drawn under the warp and shared-memory limits, keeps those that fail
by default and lower with the option, builds them with it, runs them against numpy; and candidates
that lower either way, built both ways: is the option slower where it is not needed?
    python3 bench-results/h200-merge-smem.py gemm-1024-fp16 6 [OUT.json]  (on the H200; --dry-run: no GPU)"""
import json
import random
import sys
import time

import numpy as np
import tvm
import tvm.s_tir.tensor_intrin.cuda  # noqa: F401
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Schedule, Trace

from kb_tvm.search import lowers_cleanly
from kb_tvm.workloads import get_workload

CONFIG = {"tirx.merge_static_smem": True}
name, wanted = sys.argv[1], int(sys.argv[2])
dry = "--dry-run" in sys.argv
target = tvm.target.Target({"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024,
                            "max_shared_memory_per_block": 49152, "thread_warp_size": 32,
                            "registers_per_block": 65536, "host": {"kind": "llvm"}})
workload = get_workload(name)
space = ms.space_generator.PostOrderApply(sch_rules="cuda-tensorcore", postprocs="cuda-tensorcore",
                                          mutator_probs="cuda-tensorcore")
ctx = ms.TuneContext(mod=workload.module(), target=target, space_generator=space, task_name=name, num_threads=8)
spaces = ctx.generate_design_space()
postprocs = list(ctx.space_generator.postprocs)
rng = random.Random(1)


def tile(extent, n, max_inner):
    while True:
        rest, out = extent, []
        for _ in range(n - 1):
            d = rng.choice([d for d in range(1, rest + 1) if rest % d == 0])
            out.append(d)
            rest //= d
        if rest <= max_inner:
            return out + [rest]


def draw(extents):
    while True:
        i, j, k = tile(extents[0], 5, 4), tile(extents[1], 5, 4), tile(extents[2], 3, 4)
        if i[2] * j[2] <= 32 and 2 * 256 * k[1] * k[2] * (i[2] * i[3] * i[4] + j[2] * j[3] * j[4]) <= 49152:
            return [i, j, k]


found, both = [], []
started = time.time()
while (len(found) < wanted or len(both) < wanted) and time.time() - started < 90:
    sp = spaces[rng.randrange(len(spaces))]
    tiles = [inst for inst in sp.trace.insts if inst.kind.name == "SamplePerfectTile"]
    order = iter(draw([int(np.prod([int(x) for x in sp.trace.get_decision(t)])) for t in tiles]))
    sch = Schedule(ctx.mod, seed=rng.randrange(1 << 30), debug_mask="none", error_render_level="none")
    Trace(sp.trace.insts, {}).apply_to_schedule(
        sch, remove_postproc=True,
        decision_provider=lambda inst, i, a, d: [int(x) for x in next(order)] if inst.kind.name == "SamplePerfectTile" else d)
    sch.enter_postproc()
    if not all(p.apply(sch) for p in postprocs):
        continue
    plain = lowers_cleanly(sch.mod, target)
    if lowers_cleanly(sch.mod, target, CONFIG):
        (both if plain else found).append(sch)
found, both = found[:wanted], both[:wanted]
print(f"{len(found)} candidates that fail by default and lower with {CONFIG}, {len(both)} that lower "
      f"either way, in {time.time() - started:.0f}s")
if dry:
    sys.exit(0)
dev = tvm.cuda(0)
a_info, b_info, c_info = ms.arg_info.ArgInfo.from_prim_func(found[0].mod["main"])
data = np.random.default_rng(0)
a = data.uniform(-1, 1, [int(d) for d in a_info.shape]).astype(str(a_info.dtype))
b = data.uniform(-1, 1, [int(d) for d in b_info.shape]).astype(str(b_info.dtype))
expected = a.astype("float32") @ b.astype("float32")


def run(sch, config):
    with tvm.transform.PassContext(config=config):
        lib = tvm.compile(sch.mod, target=target)
    args = [tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev),
            tvm.runtime.tensor(np.zeros([int(d) for d in c_info.shape], str(c_info.dtype)), dev)]
    lib["main"](*args)
    error = float(np.abs(args[2].numpy().astype("float32") - expected).max())
    seconds = float(np.median(lib.mod.time_evaluator("main", dev, number=10, repeat=5)(*args).results))
    return {"max_abs_error": error, "ms": seconds * 1e3}


rows = {"rescued": [], "either": []}
for sch in found:
    rows["rescued"].append({"merged": run(sch, CONFIG)})
    print("rescued", rows["rescued"][-1])
for sch in both:
    rows["either"].append({"merged": run(sch, CONFIG), "plain": run(sch, {})})
    print("either", rows["either"][-1])
if len(sys.argv) > 3 and not sys.argv[3].startswith("--"):
    with open(sys.argv[3], "w") as f:
        json.dump({"workload": name, "config": CONFIG, **rows}, f, indent=1)
