"""Issue 9: what the kernels of the fp16 tensor-core space look like, read from the CUDA source TVM
generates and from ptxas (no GPU needed, the CUDA toolkit is). One valid sample of each design space
of gemm-4096-fp16, drawn and built as kb draws and builds them; counts of the constructs that decide
how close a GEMM gets to the H200's peak, and ptxas's registers and shared memory.
    python3 bench-results/tc-kernel-reading.py > bench-results/h200-issue9b/kernel-reading.txt"""
import re
import subprocess
import tempfile
from pathlib import Path

import tvm
from kb_tvm.workloads import get_workload

from kb_tvm.bench_yield import H200, candidate_factory
from kb_tvm.measure.targets import compile_kernel

target = tvm.target.Target(H200)
with tempfile.TemporaryDirectory() as scratch:
    factory = candidate_factory(get_workload("gemm-4096-fp16"), target, fitted_tiles=True, seed=5, log_dir=scratch)
    for space in range(len(factory.spaces)):
        (candidate, *_) = factory.sample(space, 16)
        trace = candidate.sch.trace
        pipelined = any(i.kind.name == "Annotate" and str(i.attrs[0]) == "double_buffer_scope" for i in trace.insts)
        tiles = [[int(x) for x in trace.decisions[i]] for i in trace.insts if i.kind.name == "SamplePerfectTile"]
        code = compile_kernel(candidate.sch.mod, target).mod.imports[0].inspect_source()
        source = Path(scratch, f"space{space}.cu")
        source.write_text(code)
        ptxas = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "--resource-usage", "-o", "/dev/null", str(source)],
                               capture_output=True, text=True, check=False)
        print(f"space {space} ({'pipelined' if pipelined else 'plain'}), tiles i/j/k {tiles}")
        for name, pattern in [("wmma::mma_sync", r"wmma::mma_sync"), ("wmma::load_matrix_sync", r"load_matrix_sync"),
                              ("__syncthreads", r"__syncthreads"), ("cp.async", r"cp\.async|cp_async"),
                              ("wgmma", r"wgmma"), ("TMA (cp.async.bulk.tensor)", r"cp\.async\.bulk\.tensor"),
                              ("128-bit global/shared moves (uint4)", r"uint4")]:
            print(f"  {name:36s} {len(re.findall(pattern, code))}")
        print("  ptxas: " + " ".join(line.strip() for line in ptxas.stderr.splitlines() if "Used" in line))
