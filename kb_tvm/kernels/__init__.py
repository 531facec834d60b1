"""Kernel families written outside MetaSchedule's space (family.py's `KernelFamily`), searched per
task before MetaSchedule's search and kept where they win. A family: its own folder + a line here."""

from __future__ import annotations

from . import attention, cpu_conv, cpu_gemm, hopper_gemm
from .family import KernelFamily, NotApplicable

FAMILIES: tuple[KernelFamily, ...] = (hopper_gemm.FAMILY, attention.FAMILY, cpu_gemm.FAMILY, cpu_conv.FAMILY)


def applicable(target, precision: str | None = None) -> tuple[KernelFamily, ...]:
    """The families that serve this target (and model precision; None: the task's dtypes decide)."""
    return tuple(f for f in FAMILIES if f.applies(target, precision) is None)


__all__ = ["FAMILIES", "KernelFamily", "NotApplicable", "applicable"]
