"""A tensor copied with zeros past its end: what a build runs once on a constant input that a
kernel takes padded (a GEMM's B to whole panels on the CPU, to whole 16-byte rows on Hopper)."""

from __future__ import annotations


def zero_padded(shape: tuple[int, ...], padded: tuple[int, ...], dtype: str, name: str):
    """(X, the copy): a placeholder X of `shape` and a compute `name` of `padded` (no smaller in
    any axis) that holds X, and zeros past X's end."""
    from tvm import te, tirx

    if len(padded) != len(shape) or any(p < s for p, s in zip(padded, shape)):
        raise ValueError(f"padded={padded!r}: as many axes as shape={shape!r}, none smaller")
    source = te.placeholder(shape, dtype, name="X")
    inside = lambda *i: tirx.all(*(x < extent for x, extent in zip(i, shape)))  # noqa: E731
    return source, te.compute(padded, lambda *i: tirx.if_then_else(inside(*i), source(*i), tirx.const(0, dtype)),
                              name=name)
