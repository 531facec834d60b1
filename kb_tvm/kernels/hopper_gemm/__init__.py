"""The Hopper GEMM family: schedules/hopper_gemm.py's TMA + wgmma template for fp16/bf16 GEMMs (and
their fused epilogues) on sm_90a. `python -m kb_tvm.kernels.hopper_gemm.harness` tries it on a GPU."""

from .family import FAMILY, HopperGemm, on_hopper

__all__ = ["FAMILY", "HopperGemm", "on_hopper"]
