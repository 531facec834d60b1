"""onnxruntime against tuned TVM libraries on this machine, timed in turns in one process (this VM
drifts by 15% over minutes, so timings taken apart do not compare):
    python3 bench-results/ort-vs-tvm.py MODEL.onnx LABEL=model.so [LABEL=model.so ...]
Each round times 50 calls of each contender in turn, each called from Python as a user would; the
medians over 20 rounds are printed as JSON."""
import json
import sys
import time

import numpy as np
import onnxruntime as ort
import tvm
from tvm import relax

from kb_tvm.model_tuning import example_inputs, load_onnx

model_path, libraries = sys.argv[1], dict(arg.split("=", 1) for arg in sys.argv[2:])
inputs = example_inputs(load_onnx(model_path))
session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
feeds = dict(zip([i.name for i in session.get_inputs()], inputs))
calls = {"onnxruntime": lambda: session.run(None, feeds)}
for label, path in libraries.items():
    vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
    args = [tvm.runtime.tensor(a, tvm.cpu()) for a in inputs]
    calls[label] = lambda main=vm["main"], args=args: main(*args)
for call in calls.values():  # warm up
    for _ in range(50):
        call()
times = {label: [] for label in calls}
for _ in range(20):
    for label, call in calls.items():
        started = time.perf_counter()
        for _ in range(50):
            call()
        times[label].append((time.perf_counter() - started) / 50 * 1e3)
print(json.dumps({label: {"median_ms": round(float(np.median(t)), 4), "min_ms": round(min(t), 4)}
                  for label, t in times.items()}, indent=1))
