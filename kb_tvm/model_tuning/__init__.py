"""`kb-tvm tune MODEL.onnx`: ONNX -> Relax -> KBTaskScheduler + KBSearch -> a deployable
library and a report. Records stay in TVM's JSONDatabase files in the work dir (one record per
schedule, see `RecordDatabase`), so stock `compile_relax` can use them too.

One module per step of a job:
- `job`: `tune_model`, the orchestration: the steps below in order
- `onnx_input`: read and check the ONNX model, pin its input shapes, example inputs,
  onnxruntime's reference outputs; `ModelError`
- `relax_build`: the Relax import, Relax's pre-tuning steps (the module tasks come from), the build
- `numerics`: the untuned build checked against onnxruntime before the budget starts; on a
  mismatch, the first operator whose output diverges
- `precision`: fp16/bf16 matmuls and convolutions (fp32 accumulation), their design space on
  CUDA, the numerics tolerance per precision, and fast or exact math for erf, exp, tanh, sigmoid, softmax
- `profiling`: the model's latency and each task's kernel timed alone
- `record_choice`: per task, a tuned record only where it beats the default schedule
- the kernel families' stage (kb_tvm/kernels/model_stage.py): kernels written outside
  MetaSchedule's space, searched first inside the budget and kept where the model runs faster
- `run_state`: the resume state in the work dir
- `report`: report.json's rows, the latency curve and its plot, report.md

TVM is imported inside the functions that use it, so importing this package stays cheap."""

from .job import tune_model
from .onnx_input import (
    ModelError,
    example_inputs,
    load_onnx,
    onnxruntime_outputs,
    parse_dim,
    parse_input_shape,
)
from .numerics import NumericsMismatch, Verdict, check_numerics
from .precision import MATH, PRECISIONS, TOLERANCES, apply_math, lower_precision, math_for
from .profiling import profile_kernels, run_and_time
from .record_choice import better_than_default
from .relax_build import build, prepare, relax_module, to_relax
from .report import latency_curve, plot_curve, report_markdown
from .run_state import STATE_FILE, _drop_torn_tail, read_state, write_state

__all__ = [
    "MATH",
    "PRECISIONS",
    "STATE_FILE",
    "TOLERANCES",
    "ModelError",
    "NumericsMismatch",
    "Verdict",
    "_drop_torn_tail",
    "apply_math",
    "better_than_default",
    "build",
    "check_numerics",
    "example_inputs",
    "latency_curve",
    "load_onnx",
    "lower_precision",
    "math_for",
    "onnxruntime_outputs",
    "parse_dim",
    "parse_input_shape",
    "plot_curve",
    "prepare",
    "profile_kernels",
    "read_state",
    "relax_module",
    "report_markdown",
    "run_and_time",
    "to_relax",
    "tune_model",
    "write_state",
]
