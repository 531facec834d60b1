"""A PrimFunc without blocks, as TOPI writes a cumsum (OPT's positions from its attention mask)."""


def cumsum_without_blocks(rows: int = 4, cols: int = 32):
    """main(a, out): out = a's running sum along its rows, in plain loops (no "root" block)."""
    from tvm.script import tirx as T

    @T.prim_func
    def cumsum(a: T.Buffer((rows, cols), "float32"), out: T.Buffer((rows, cols), "float32")):
        for i in T.serial(rows):
            out[i, 0] = a[i, 0]
            for j in T.serial(cols - 1):
                out[i, j + 1] = out[i, j] + a[i, j + 1]

    return cumsum.with_attr("global_symbol", "main")
