"""The CPU GEMM template as a kernel family (family.py) and the order of its variants (variants.py)."""

from .family import FAMILY

__all__ = ["FAMILY"]
