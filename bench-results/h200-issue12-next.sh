#!/usr/bin/env bash
# Issue 12, prepared for the next H200 session (not run yet): clusters of two blocks
# (GemmTile(cluster_m=2), B's halves multicast by TMA) against the same tiles without, on 4096^3
# and on BERT-base's shapes where kb is furthest behind cuBLAS. bench_hopper checks every
# variant against torch before timing it; a cluster that deadlocked would hang the process, so
# each shape runs under a timeout of its own. First, ptxas's report on the setmaxnreg and cluster
# kernels. Then five more cells of the shapes table's stock
# column (75 s each). About 12 minutes in all.
#   setsid nohup bash bench-results/h200-issue12-next.sh > /root/next.log 2>&1 < /dev/null &
set -u
res=/root/next
mkdir -p $res && rm -rf /root/kbrepo && cp -r "$PWD" /root/kbrepo && cd /root/kbrepo
export PYTHONPATH=/root/kbsite:$PWD TVM_FFI_DISABLE_TORCH_C_DLPACK=1 PYTHONUNBUFFERED=1
stamp() { echo "$(date +%T) $*" >> $res/progress.txt; }
# did ptxas apply setmaxnreg (no C7508), and what do the cluster kernels use? nvcc -Xptxas -v on the sources
stamp "ptxas"
python3 - <<'PY' > $res/ptxas.log 2>&1
from kb_tvm.schedules.hopper_gemm import GemmTile, gemm, sm90a_target
import subprocess, tvm
for name, tile in [("setmaxnreg", GemmTile(bm=128, bn=256, consumers=2, setmaxnreg=True)),
                   ("plain", GemmTile(bm=128, bn=256, consumers=2)),
                   ("cluster", GemmTile(bm=128, bn=256, consumers=2, cluster_m=2))]:
    with sm90a_target():
        mod = tvm.compile(tvm.IRModule({"main": gemm(4096, 4096, 4096, tile, "float16")}), target=sm90a_target(),
                          tir_pipeline="tirx")
    path = f"/root/next/{name}.cu"
    open(path, "w").write(mod.mod.imports[0].inspect_source())
    out = subprocess.run(["nvcc", "-arch=sm_90a", "-cubin", "-Xptxas", "-v", "-o", f"/tmp/{name}.cubin", path],
                         capture_output=True, text=True)
    print(name, out.returncode, out.stdout[-1500:], out.stderr[-1500:])
PY
# BMxBNxSTAGESxCONSUMERSxGROUP_MxPRODUCERxPERSISTENTxPAIREDxSETMAXNREGxCLUSTER_M
tiles=""
for t in 128x256x4x2x8x1x0x1x0 128x256x4x2x8x1x1x1x0 128x128x4x1x8x1x0x1x0 128x192x4x2x8x1x0x1x0; do
  tiles="$tiles --tile ${t}x1 --tile ${t}x2"
done
for shape in 4096x4096x4096 1024x768x3072 4096x3072x768 1024x3072x768; do
  stamp "clusters $shape"
  timeout -k 10 150 python3 -m kb_tvm.bench_hopper --shape $shape $tiles --dtype float16 --out-dtype float16 \
      --b-layout nk --out $res/clusters-$shape.json > $res/clusters-$shape.log 2>&1
done
# more cells of the shapes table's stock MetaSchedule column (s9 measured 5 of 18), one process each
for shape in 128x3072x768 128x768x3072 1024x768x768 4096x768x768 1024x4096x4096; do
  stamp "stock linear-$shape"
  timeout 200 python3 -m kb_tvm.bench --workload linear-$shape-fp16 --budget 75s --target cuda \
      --runs evolutionary@stock --out $res/stock-$shape.json > $res/stock-$shape.log 2>&1
done
stamp "done rc=$?"
touch $res/DONE
