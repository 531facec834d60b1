"""onnxruntime against tuned TVM libraries on this machine's CPU, timed in turns in one process (a
VM's speed drifts by 15% over minutes, so timings taken apart do not compare):

    python benchmarks/onnxruntime_in_turns.py workloads/transformer_block.onnx \
        kb=block/work-kb/model.so stock=block/work-evolutionary/model.so

Each round times 50 calls of each contender in turn, each called from Python as a user would; the
medians over 20 rounds are printed as JSON. With no LABEL=LIBRARY, onnxruntime alone. Models with
dynamic axes take --input-shape as kb-tvm tune does. The libraries run on the host's physical
cores, as kb-tvm tune timed them (TVM alone would take half of an x86 machine's CPUs).
"""

import json
import time

import click


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.argument("libraries", nargs=-1, metavar="[LABEL=LIBRARY.so]...")
@click.option("--input-shape", "input_shapes", multiple=True, help="As for kb-tvm tune (repeatable).")
@click.option("--rounds", default=20, show_default=True)
@click.option("--calls", default=50, show_default=True, help="Calls per contender per round.")
def main(model, libraries, input_shapes, rounds, calls) -> None:
    """Time onnxruntime and each tuned library on MODEL's example inputs, in turns."""
    import numpy as np
    import onnxruntime as ort
    import tvm
    from tvm import relax

    from kb_tvm.measure.targets import make_target, use_target_cores
    from kb_tvm.model_tuning import example_inputs, load_onnx, parse_input_shape

    threads = use_target_cores(make_target("llvm"))
    named = dict(arg.split("=", 1) for arg in libraries)
    inputs = example_inputs(load_onnx(model, dict(parse_input_shape(text) for text in input_shapes)))
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = dict(zip([i.name for i in session.get_inputs()], inputs))
    contenders = {"onnxruntime": lambda: session.run(None, feeds)}
    for label, path in named.items():
        vm = relax.VirtualMachine(tvm.runtime.load_module(path), tvm.cpu())
        args = [tvm.runtime.tensor(a, tvm.cpu()) for a in inputs]
        contenders[label] = lambda main=vm["main"], args=args: main(*args)
    for call in contenders.values():  # warm up
        for _ in range(calls):
            call()
    times = {label: [] for label in contenders}
    for _ in range(rounds):
        for label, call in contenders.items():
            started = time.perf_counter()
            for _ in range(calls):
                call()
            times[label].append((time.perf_counter() - started) / calls * 1e3)
    click.echo(json.dumps({**{label: {"median_ms": round(float(np.median(t)), 4), "min_ms": round(min(t), 4)}
                              for label, t in times.items()}, "tvm_threads": threads}, indent=1))


if __name__ == "__main__":
    main()
