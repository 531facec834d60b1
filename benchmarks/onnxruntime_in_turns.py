"""onnxruntime against tuned TVM libraries on this machine's CPU, timed in turns (a VM's speed
drifts by 15% over minutes, so timings taken apart do not compare):

    python benchmarks/onnxruntime_in_turns.py workloads/transformer_block.onnx \
        kb=block/work-kb/model.so stock=block/work-evolutionary/model.so

Each contender runs in a process of its own, as a deployment would, with the host's physical
cores for its threads (TVM alone would take half of an x86 machine's CPUs). Each round times 50
calls of each contender in turn (after 10 untimed ones), called from Python as a user would,
while the others wait blocked; the medians over 20 rounds are printed as JSON. Until 2026-12-05 the contenders shared
one process, where onnxruntime's and TVM's thread pools slowed each other (a BERT-style layer:
TVM 2.28 ms there against 1.12 ms alone, onnxruntime 2.14 against 1.47): the rows measured so say
so. With no LABEL=LIBRARY, onnxruntime alone. Models with dynamic axes take --input-shape and
--dim as kb-tvm tune does.
"""

import json
import multiprocessing
import time

import click

SETTLE_S = 0.2  # between contenders: the last one's threads stop spinning before the next is timed
WARM_CALLS = 10  # untimed calls at the start of each turn


def _contender(model, library, input_shapes, axes, connection) -> None:
    """A worker process: load one contender (onnxruntime where `library` is None), warm it up,
    then answer each number of calls with the seconds per call."""
    from kb_tvm.measure.targets import make_target, use_target_cores
    from kb_tvm.model_tuning import example_inputs, load_onnx, parse_dim, parse_input_shape

    threads = use_target_cores(make_target("llvm"))
    inputs = example_inputs(load_onnx(model, dict(parse_input_shape(text) for text in input_shapes),
                                      dict(parse_dim(text) for text in axes)))
    if library is None:
        import onnxruntime as ort

        session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        feeds = dict(zip([i.name for i in session.get_inputs()], inputs))

        def call():
            session.run(None, feeds)
    else:
        import tvm
        from tvm import relax

        vm = relax.VirtualMachine(tvm.runtime.load_module(library), tvm.cpu())
        args = [tvm.runtime.tensor(a, tvm.cpu()) for a in inputs]
        main = vm["main"]

        def call():
            main(*args)
    connection.send(threads)
    while (calls := connection.recv()) is not None:
        if calls < 0:  # warm-up
            for _ in range(-calls):
                call()
            connection.send(None)
            continue
        started = time.perf_counter()
        for _ in range(calls):
            call()
        connection.send((time.perf_counter() - started) / calls)


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.argument("libraries", nargs=-1, metavar="[LABEL=LIBRARY.so]...")
@click.option("--input-shape", "input_shapes", multiple=True, help="As for kb-tvm tune (repeatable).")
@click.option("--dim", "axes", multiple=True, help="As for kb-tvm tune (repeatable).")
@click.option("--rounds", default=20, show_default=True)
@click.option("--calls", default=50, show_default=True, help="Calls per contender per round.")
def main(model, libraries, input_shapes, axes, rounds, calls) -> None:
    """Time onnxruntime and each tuned library on MODEL's example inputs, in turns."""
    import numpy as np

    named = {"onnxruntime": None, **dict(arg.split("=", 1) for arg in libraries)}
    context = multiprocessing.get_context("spawn")
    workers = {}
    for label, library in named.items():
        mine, theirs = context.Pipe()
        process = context.Process(target=_contender, args=(model, library, input_shapes, axes, theirs), daemon=True)
        process.start()
        workers[label] = (process, mine)
    threads = {label: connection.recv() for label, (_, connection) in workers.items()}
    for _, connection in workers.values():  # warm up, one at a time
        connection.send(-calls)
        connection.recv()
    times = {label: [] for label in workers}
    for _ in range(rounds):
        for label, (_, connection) in workers.items():
            time.sleep(SETTLE_S)
            connection.send(-WARM_CALLS)  # its threads awake and its data in cache again, untimed
            connection.recv()
            connection.send(calls)
            times[label].append(connection.recv() * 1e3)
    for process, connection in workers.values():
        connection.send(None)
        process.join()
    click.echo(json.dumps({**{label: {"median_ms": round(float(np.median(t)), 4), "min_ms": round(min(t), 4)}
                              for label, t in times.items()},
                           "tvm_threads": threads["onnxruntime"],  # every process runs on the same cores
                           "processes": "one per contender"}, indent=1))


if __name__ == "__main__":
    main()
