"""numpy's matmul on this machine, what a CPU user runs instead of a tuned GEMM: the median of
`--calls` calls, as the CPU GEMM rows of README.md compare it (run it before and after the tune,
in the same job, to see how far the machine's speed moved):

    python benchmarks/numpy_matmul.py --shape 512x512x512 --calls 100
"""

import json
import statistics
import time

import click
import numpy as np


@click.command()
@click.option("--shape", default="512x512x512", show_default=True, help="MxNxK: A is MxK, B is KxN.")
@click.option("--calls", default=100, show_default=True)
def main(shape: str, calls: int) -> None:
    m, n, k = (int(x) for x in shape.split("x"))
    rng = np.random.default_rng(0)
    a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    for _ in range(10):  # warm: threads up, pages touched
        a @ b
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        a @ b
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    print(json.dumps({"shape": shape, "calls": calls, "median_ms": median * 1e3,
                      "gflops": 2 * m * n * k / median / 1e9, "numpy": np.__version__}))


if __name__ == "__main__":
    main()
