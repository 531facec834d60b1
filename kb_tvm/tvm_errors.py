"""Which exceptions mean "TVM rejected this schedule", as opposed to "the search is broken".

TVM 0.27 raises a C++ error in Python as the class its kind names (tvm_ffi.register_error).
Where kb replays, mutates, postprocesses and lowers schedules, or asks dlight for one, TVM
rejected invalid ones with two (measured on the workloads, llvm and an sm_90 target):
- `ScheduleError`: a primitive that cannot apply (a borrowed gemm trace on a conv2d: no block "C");
- `InternalError`: a failed check (that trace on a batch matmul: 3 loops split as if 4; a WMMA
  schedule the postprocessors passed, whose lowering fails on a fragment; dlight on a matmul of
  dynamic shape). Only these make a candidate invalid.

Not more, though TVM raises others:
- TypeError is what the FFI raises for an argument of the wrong type: a TVM API that changed.
- KeyError, ValueError, IndexError come from our Python code, or from TVM handed a trace our code
  got wrong (a SampleCategorical decision out of range: ValueError; MutateUnroll on a trace
  without decisions: KeyError).
- RuntimeError itself (ScheduleError's and InternalError's base) is what an exception of an
  unregistered class becomes after crossing the FFI: a StopIteration or ZeroDivisionError raised
  in our decision provider during a trace's replay comes back as a plain RuntimeError.
Counted as invalid candidates, any of these ended a broken search quietly with "no new valid
candidate"; they propagate instead.

A task's design space is another matter (`design_space_failed`): there TVM's own rules run on a
function TVM made, and some of their C++ checks raise ValueError or IndexError; those mean the
rules cannot make the space, told from Python's by where they were raised (`raised_in_tvm`).
"""

from __future__ import annotations

import functools


@functools.cache
def invalid_schedule_errors() -> tuple[type[BaseException], ...]:
    """(ScheduleError, InternalError), for `except invalid_schedule_errors():` around TVM's
    scheduling; a function so that TVM loads only when it is used."""
    from tvm.error import InternalError
    from tvm.s_tir.schedule import ScheduleError

    return (ScheduleError, InternalError)


def raised_in_tvm(err: BaseException) -> bool:
    """Whether TVM's C++ raised `err`: the innermost frame of the backtrace its FFI error carries
    is neither Python nor the FFI's own Cython (where a Python callback's error or a wrongly
    typed argument surfaces)."""
    error = getattr(err, "__tvm_ffi_error__", None)
    if error is None:
        return False
    frames = [line.strip() for line in str(error.backtrace).splitlines() if line.strip().startswith('File "')]
    path = frames[0].split('"')[1] if frames else ""
    return bool(path) and not path.endswith((".py", ".pxi"))


def design_space_failed(err: BaseException) -> bool:
    """Whether `err`, raised while TVM's schedule rules made a task's design space, means they
    cannot make it: a ScheduleError or InternalError, or a ValueError or IndexError from a check
    in TVM's C++ (seen on an attention task whose scores are rounded to fp16, as in an fp16 ViT:
    CrossThreadReduction's "Unable to get the extent of threadIdx.x" in the tensor-core rules,
    "Index 6 out of bounds 6" in the stock CUDA rules). The same classes raised in Python are
    kb's bugs and are not."""
    return isinstance(err, invalid_schedule_errors()) or (isinstance(err, (ValueError, IndexError))
                                                          and raised_in_tvm(err))
