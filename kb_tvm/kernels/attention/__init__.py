"""The attention family: a model's attention, made one task by rewrite.py, computed by
schedules/flash_attention.py's fused kernel on Hopper GPUs."""

from .family import FAMILY, FlashAttention, takes_attention
from .rewrite import AttentionShape, fuse_attention

__all__ = ["FAMILY", "AttentionShape", "FlashAttention", "fuse_attention", "takes_attention"]
