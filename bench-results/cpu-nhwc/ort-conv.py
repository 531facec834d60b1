import numpy as np, onnx, onnxruntime as ort, time
from onnx import helper, TensorProto
w = np.random.uniform(-1, 1, (64, 64, 3, 3)).astype(np.float32)
g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "c",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 56, 56])],
    [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.flatten())])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
so = ort.SessionOptions(); so.intra_op_num_threads = 2
s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
x = np.random.uniform(-1, 1, (1, 64, 56, 56)).astype(np.float32)
for _ in range(20): s.run(None, {"x": x})
ts = []
for _ in range(200):
    t = time.perf_counter(); s.run(None, {"x": x}); ts.append(time.perf_counter() - t)
print("onnxruntime conv 1x64x56x56 3x3 ms median %.3f min %.3f" % (np.median(ts) * 1e3, min(ts) * 1e3))
