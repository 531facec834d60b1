"""Issue 9: registers against the WMMA sketch's per-warp tile, from ptxas for sm_90 (no GPU needed,
the CUDA toolkit is): valid samples of gemm-4096-fp16's two plain WMMA spaces, built as kb builds
them. Prints (space, fragments per warp = i3 i4 j3 j4, i3 i4, j3 j4, k2, registers, ptxas's spill line).
    python3 bench-results/tc-registers.py > bench-results/h200-issue9b/registers.txt"""
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import tvm
from kb_tvm.workloads import get_workload
from tvm.s_tir import Schedule
from tvm.s_tir.schedule import Trace

from kb_tvm.bench_yield import H200, candidate_factory
from kb_tvm.measure.targets import compile_kernel
from kb_tvm.search.candidates import _decisions_provider, wmma_tile_plan
from kb_tvm.search.tensor_core_tiles import WmmaLimits, draw_tiles

target = tvm.target.Target(H200)
rng = np.random.default_rng(3)
rows = []
with tempfile.TemporaryDirectory() as scratch:
    factory = candidate_factory(get_workload("gemm-4096-fp16"), target, fitted_tiles=True, seed=1, log_dir=scratch)
    for space in (0, 1):
        design = factory.spaces[space].trace
        extents, limits = wmma_tile_plan(design, factory.ctx)
        # no bound on the warp's tile here: that is what this measures
        limits = WmmaLimits(**{**vars(limits), "max_warp_fragments": 1 << 20})
        built = 0
        while built < 14:
            tiles = draw_tiles(rng, extents, limits)
            sch = Schedule(factory.ctx.mod, seed=int(rng.integers(1 << 30)), debug_mask="none",
                           error_render_level="none")
            Trace(design.insts, {}).apply_to_schedule(sch, remove_postproc=True,
                                                      decision_provider=_decisions_provider(tiles, None))
            sch.enter_postproc()
            if not all(p.clone().apply(sch) for p in factory.postprocs):
                continue
            try:
                code = compile_kernel(sch.mod, target).mod.imports[0].inspect_source()
            except Exception:  # noqa: BLE001, S112 - one that fails to lower is skipped
                continue
            built += 1
            source = Path(scratch, "kernel.cu")
            source.write_text(code)
            ptxas = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "--resource-usage", "-o", "/dev/null",
                                    str(source)], capture_output=True, text=True, check=False).stderr
            registers = re.search(r"Used (\d+) registers", ptxas)
            spill = next((line.strip() for line in ptxas.splitlines() if "spill" in line), "")
            i, j, k = tiles
            rows.append((space, i[3] * i[4] * j[3] * j[4], i[3] * i[4], j[3] * j[4], k[2],
                         int(registers.group(1)) if registers else None, spill))
for row in sorted(rows, key=lambda r: (r[1], r[5] or 0)):
    print(row)
