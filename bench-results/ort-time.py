"""onnxruntime's CPU latency for an ONNX model on this machine (the rival a user already has):
    python3 bench-results/ort-time.py workloads/transformer_block.onnx"""
import sys
import time

import numpy as np
import onnxruntime as ort

session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
feeds = {i.name: np.random.default_rng(0).uniform(-1, 1, [d if isinstance(d, int) else 1 for d in i.shape])
         .astype(np.float32) for i in session.get_inputs()}
for _ in range(50):
    session.run(None, feeds)
times = []
for _ in range(20):
    started = time.perf_counter()
    for _ in range(50):
        session.run(None, feeds)
    times.append((time.perf_counter() - started) / 50)
print(f"onnxruntime CPU: median {np.median(times) * 1e3:.4f} ms, min {min(times) * 1e3:.4f} ms over 20 x 50 runs")
