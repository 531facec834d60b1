"""Which kernel of a model's untuned build faults on the GPU (e.g. `cudaErrorMisalignedAddress`,
which aborts the process): every call the Relax VM makes is printed before it runs, with its
arguments' shapes and dtypes, and the device synchronised after it, so the last line printed
names the culprit. The build's CUDA source is written beside.

    CUDA_LAUNCH_BLOCKING=1 python3 benchmarks/decoders/find_faulting_kernel.py workloads/gpt2_tiny.onnx \
        --input-shape input_ids=1x16 --input-shape attention_mask=1x16 --precision fp16 --out cuda.cu
"""

import argparse
import sys

from kb_tvm.measure.targets import make_target
from kb_tvm.model_tuning import example_inputs, load_onnx, parse_input_shape
from kb_tvm.model_tuning.relax_build import build, relax_module

H200 = ('{"kind": "cuda", "arch": "sm_90", "max_threads_per_block": 1024, "max_shared_memory_per_block": 49152, '
        '"thread_warp_size": 32, "registers_per_block": 65536, "host": {"kind": "llvm"}}')


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--input-shape", action="append", default=[])
    parser.add_argument("--precision", default="fp16")
    parser.add_argument("--target", default=H200)
    parser.add_argument("--out", required=True, help="where the CUDA source goes")
    args = parser.parse_args()
    import tvm
    from tvm import relax

    model = load_onnx(args.model, dict(parse_input_shape(text) for text in args.input_shape))
    target = make_target(args.target)
    executable = build(relax_module(model, target, precision=args.precision, math="exact"), target,
                       cuda_graph=False)
    with open(args.out, "w") as f:
        f.write(executable.mod.imports[0].imports[0].inspect_source()
                if executable.mod.imports[0].imports else executable.mod.imports[0].inspect_source())
    device = tvm.cuda(0) if target.kind.name == "cuda" else tvm.cpu(0)
    vm = relax.VirtualMachine(executable, device)

    def describe(value) -> str:
        shape = getattr(value, "shape", None)
        return f"{tuple(shape)}:{value.dtype}" if shape is not None and hasattr(value, "dtype") else type(value).__name__

    def instrument(func, symbol, before, ret, *call_args):
        if before:
            print(f"call {symbol}({', '.join(describe(a) for a in call_args)})", flush=True)
        else:
            device.sync()
        return 0

    vm.set_instrument(instrument)
    vm["main"](*[tvm.runtime.tensor(a, device) for a in example_inputs(model)])
    device.sync()
    print("no fault", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
