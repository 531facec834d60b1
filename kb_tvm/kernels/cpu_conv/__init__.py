"""The CPU convolution family: schedules/cpu_conv.py's implicit GEMM over a task's NCHW convolution."""

from .family import FAMILY

__all__ = ["FAMILY"]
