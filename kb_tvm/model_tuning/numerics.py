"""Does TVM compute what the model computes? Checked on the untuned build before any budget is
spent (a wrong import or lowering stays wrong however well it is tuned), and on the tuned build
at the end. On a mismatch, the first operator whose output diverges from onnxruntime's is found
by exposing every intermediate float tensor of the graph as an output, in both onnxruntime and
one TVM build, and comparing them in graph order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .onnx_input import ModelError
from .precision import Tolerance, compare_sets, mismatch


@dataclass(frozen=True)
class Divergence:
    """The first operator of the graph whose output TVM computes differently, its inputs agreeing."""

    node: str
    op_type: str
    output: str
    why: str

    def __str__(self) -> str:
        return f"first diverging operator: {self.op_type} '{self.node}' (output '{self.output}': {self.why})"


@dataclass(frozen=True)
class Verdict:
    """The untuned build against the reference on every input set."""

    reference: str
    mismatch: str | None
    max_abs_error: float | None
    constant_reference: bool
    divergence: Divergence | None = None
    searched: bool = False  # whether the intermediate tensors were compared (only on a mismatch)

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def line(self) -> str:
        """The verdict in one line, as the CLI prints it."""
        if self.ok:
            text = f"numerics: the untuned TVM build matches {self.reference}"
            if self.max_abs_error is not None:
                text += f" (max abs error {self.max_abs_error:.3g})"
        else:
            text = f"numerics: the untuned TVM build disagrees with {self.reference}: {self.mismatch}"
            if self.divergence is not None:
                text += f"; {self.divergence}"
            elif self.searched:  # seen on CUDA: a fused kernel's wrong reads of a bool mask
                text += ("; every operator agrees when each output is a tensor of its own: the difference is "
                         "inside a fused kernel")
        if self.constant_reference:
            text += f"; {CONSTANT_WARNING}"
        return text

    def to_json(self) -> dict:
        return {"reference": self.reference, "ok": self.ok, "mismatch": self.mismatch,
                "max_abs_error": self.max_abs_error, "constant_reference": self.constant_reference,
                "first_divergence": None if self.divergence is None else str(self.divergence)}


class NumericsMismatch(ModelError):
    """The untuned TVM build already disagrees with the reference: said in one line."""

    def __init__(self, verdict: Verdict):
        super().__init__(f"{verdict.line()}. Nothing was tuned; --tune-anyway tunes regardless")
        self.verdict = verdict


CONSTANT_WARNING = ("the reference's outputs are the same for different inputs, so this check cannot tell a "
                    "right build from a wrong one (e.g. a classifier head initialised to zero)")


def is_constant(reference_sets: list[list[np.ndarray]]) -> bool:
    """Whether every output is the same for every input set (two sets at least)."""
    if len(reference_sets) < 2:
        return False
    first = reference_sets[0]
    return all(len(other) == len(first) and all(a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
                                                for a, b in zip(first, other))
               for other in reference_sets[1:])


def describe_nan(actual: list[list[np.ndarray]]) -> str | None:
    """How many outputs are NaN or infinite, where some are; the tolerance's message says less."""
    for index, outputs in enumerate(actual):
        for position, array in enumerate(outputs):
            if array.dtype.kind == "f" and not np.isfinite(array).all():
                nan = int(np.isnan(array).sum())
                inf = int(np.isinf(array).sum())
                parts = [f"{n} of {array.size} values {kind}" for n, kind in ((nan, "NaN"), (inf, "infinite")) if n]
                return f"input set {index + 1}: output {position}: {', '.join(parts)}"
    return None


def judge(references: list[list[np.ndarray]], actual: list[list[np.ndarray]], tolerance: Tolerance,
          reference: str) -> Verdict:
    """The outputs of a build for each input set against the references."""
    why, worst = compare_sets(references, actual, tolerance)
    if why is not None:
        why = describe_nan(actual) or why
    return Verdict(reference=reference, mismatch=why, max_abs_error=worst,
                   constant_reference=is_constant(references))


def first_divergence(model, build_outputs, inputs: list[np.ndarray], tolerance: Tolerance) -> Divergence | None:
    """The first node (graph order) with a float output outside `tolerance` of onnxruntime's while
    every float input it takes from another node is within it; None if all agree.
    build_outputs(model) -> the TVM build's outputs of `model` (graph outputs in order) on `inputs`."""
    import onnxruntime

    exposed, names = expose_intermediates(model)
    session = onnxruntime.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = dict(zip([i.name for i in session.get_inputs()], inputs))
    output_names = [o.name for o in exposed.graph.output]
    want = dict(zip(output_names, session.run(None, feeds)))
    got = dict(zip(output_names, build_outputs(exposed)))
    agrees = {name: mismatch([want[name]], [got[name]], tolerance) is None for name in names
              if want[name].shape == got[name].shape}  # a tensor whose shape differs is not compared
    first = None
    for node in model.graph.node:
        wrong = [name for name in node.output if agrees.get(name) is False]
        if not wrong:
            continue
        why = _difference(want[wrong[0]], got[wrong[0]])
        found = Divergence(node=node.name or "(unnamed)", op_type=node.op_type, output=wrong[0], why=why)
        if all(agrees.get(name, True) for name in node.input):
            return found
        first = first or found
    return first


def _difference(want: np.ndarray, got: np.ndarray) -> str:
    if got.dtype.kind == "f" and not np.isfinite(got).all() and np.isfinite(want).all():
        return f"{int((~np.isfinite(got)).sum())} of {got.size} values NaN or infinite"
    return f"max abs difference {float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))):.3g}"


def expose_intermediates(model):
    """A copy of the model whose outputs are its own, then every float tensor a node makes (graph
    order), and the names of those tensors."""
    import onnx
    from onnx import TensorProto

    inferred = onnx.shape_inference.infer_shapes(model)
    types = {info.name: info for info in inferred.graph.value_info}
    floats = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    names = []
    for node in model.graph.node:
        for name in node.output:
            info = types.get(name)
            if info is None or name in present or info.type.tensor_type.elem_type not in floats:
                continue
            exposed.graph.output.append(info)
            present.add(name)
            names.append(name)
    names += [o.name for o in model.graph.output]
    return exposed, names


def check_untuned(model, input_sets: list[list[np.ndarray]], untuned_outputs: list[list[np.ndarray]],
                  references: list[list[np.ndarray]], reference: str, *, target, precision: str,
                  math: str) -> Verdict:
    """The untuned build's outputs on `input_sets` judged within `precision`'s tolerance; on a
    mismatch, with the first diverging operator (one more build of the model, every intermediate
    tensor an output, run on the first input set)."""
    from .precision import TOLERANCES
    from .profiling import run_outputs
    from .relax_build import build, relax_module

    tolerance = TOLERANCES[precision]
    verdict = judge(references, untuned_outputs, tolerance, reference)
    if verdict.ok:
        return verdict

    def build_outputs(exposed) -> list[np.ndarray]:
        executable = build(relax_module(exposed, target, precision=precision, math=math), target, cuda_graph=False)
        return run_outputs(executable, target, input_sets[:1])[0]

    divergence = first_divergence(model, build_outputs, input_sets[0], tolerance)
    return Verdict(reference=verdict.reference, mismatch=verdict.mismatch, max_abs_error=verdict.max_abs_error,
                   constant_reference=verdict.constant_reference, divergence=divergence, searched=True)


def check_numerics(model, target, *, precision: str, math: str) -> Verdict:
    """`kb-tvm tune --check-numerics-only`: the untuned build against onnxruntime on the two input
    sets a tuning run uses, nothing tuned."""
    from .onnx_input import example_inputs, onnxruntime_outputs
    from .profiling import run_outputs
    from .relax_build import build, relax_module

    input_sets = [example_inputs(model), example_inputs(model, seed=1)]
    by_onnxruntime = [onnxruntime_outputs(model, inputs) for inputs in input_sets]
    if by_onnxruntime[0][0] is None:
        raise ModelError("checking numerics needs onnxruntime: pip install onnxruntime")
    executable = build(relax_module(model, target, precision=precision, math=math), target, cuda_graph=False)
    return check_untuned(model, input_sets, run_outputs(executable, target, input_sets),
                         [outputs for outputs, _ in by_onnxruntime], by_onnxruntime[0][1], target=target,
                         precision=precision, math=math)
