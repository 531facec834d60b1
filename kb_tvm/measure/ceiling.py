"""What the machine can do at best: the ceiling a task's kernel is judged against.

On a CPU (llvm) the ceiling is measured once per machine and kept: the FLOP/s of numpy's
matmul (the host's BLAS, the best known kernel of the GEMM family here) and the bytes per
second of a large copy. A task's ceiling is the slower of its FLOPs at that rate and its
buffers' bytes at that bandwidth (a roofline). Small tensors live in cache and run faster
than the bandwidth bound, so a task may exceed its ceiling: the ceiling says how far a kernel
may still be from what the machine does, not a hard floor. CUDA targets have none yet.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SCHEMA = 1
MATMUL_SIZE = 1024  # 2.1 GFLOP: long enough to time, short enough to measure at start
COPY_BYTES = 256 << 20  # far past the last-level cache


@dataclass(frozen=True)
class Ceiling:
    flops: float  # FLOP per second
    bytes_per_s: float
    source: str  # how it was measured, on which machine, when

    def seconds(self, flop: float, nbytes: float) -> float:
        """The least seconds a kernel of `flop` FLOPs touching `nbytes` bytes can take."""
        return max(flop / self.flops, nbytes / self.bytes_per_s)

    def describe(self) -> str:
        return f"{self.flops / 1e9:.0f} GFLOP/s, {self.bytes_per_s / 1e9:.1f} GB/s ({self.source})"


def default_path() -> Path:
    """ceilings.json beside the experience library: $XDG_CACHE_HOME/kb_tvm, else ~/.cache/kb_tvm."""
    from ..experience.library import default_path as experience_path

    return experience_path().parent / "ceilings.json"


def machine_key(target) -> str:
    """The CPU a ceiling belongs to: its model name, logical cores and the target's mcpu."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), model)
    except OSError:
        pass
    return f"{model} | {os.cpu_count()} cpus | mcpu={target.attrs.get('mcpu', '')}"


def host_ceiling(target, path: Path | None = None) -> Ceiling | None:
    """This CPU's ceiling for an llvm `target`: read from `path` (default_path()), else measured
    and written there. None for other targets."""
    if target.kind.name != "llvm":
        return None
    path = Path(path) if path is not None else default_path()
    key = machine_key(target)
    kept = _read(path)
    if key in kept:
        return Ceiling(**kept[key])
    ceiling = measure_host(key)
    kept[key] = asdict(ceiling)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(json.dumps({"schema": SCHEMA, "machines": kept}, indent=1))
    os.replace(staging, path)  # a concurrent run's file is replaced whole, never torn
    return ceiling


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):  # none yet, or torn by a crash: measured again
        return {}
    return data.get("machines", {}) if data.get("schema") == SCHEMA else {}


def measure_host(key: str) -> Ceiling:
    """The best of a few runs of numpy's float32 matmul (FLOP/s) and of a large copy (bytes
    read and written per second)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE), dtype=np.float32) for _ in range(2))
    matmul_s = _best(lambda: a @ b, runs=8)
    src = np.ones(COPY_BYTES // 4, dtype=np.float32)
    dst = np.empty_like(src)
    copy_s = _best(lambda: np.copyto(dst, src), runs=5)
    return Ceiling(flops=2.0 * MATMUL_SIZE ** 3 / matmul_s, bytes_per_s=2.0 * COPY_BYTES / copy_s,
                   source=f"numpy matmul {MATMUL_SIZE}^3 and a {COPY_BYTES >> 20} MB copy on {key}, "
                          f"{time.strftime('%Y-%m-%d')}")


def _best(call, runs: int) -> float:
    call()  # warm: page faults, BLAS threads
    best = math.inf
    for _ in range(runs):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    return best


def buffer_bytes(func) -> int:
    """Bytes of a PrimFunc's parameters (its inputs and outputs), each read or written once."""
    import tvm_ffi

    total = 0
    for param in func.params:
        ty = getattr(param, "ty", None)
        if ty is None or not hasattr(ty, "shape"):
            continue  # a scalar parameter
        dtype = tvm_ffi.dtype(str(ty.dtype))
        total += math.prod(int(d) for d in ty.shape) * ((dtype.bits * dtype.lanes + 7) // 8)
    return total


def task_ceilings(ceiling: Ceiling | None, modules: dict) -> dict[str, float]:
    """Each task's ceiling in seconds per call (task name -> its IRModule, "main" its PrimFunc):
    its estimated FLOPs and its buffers' bytes under `ceiling`; none without one."""
    from tvm.s_tir.analysis import estimate_tir_flops

    if ceiling is None:
        return {}
    return {name: ceiling.seconds(estimate_tir_flops(mod), buffer_bytes(mod["main"])) for name, mod in modules.items()}
