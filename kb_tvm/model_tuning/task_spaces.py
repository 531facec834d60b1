"""Which of a model's tasks MetaSchedule can search. A task whose design space TVM fails to
generate (a schedule rule that raises on it) would end the whole run from inside MetaSchedule's
task loop, before any task is measured. Such a task is searched in a fallback space instead:
MetaSchedule's own rules for the target, after its elementwise producers are inlined. Only a
task that fails there too keeps its default schedule, and says why."""

from __future__ import annotations

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule

from ..tvm_errors import design_space_failed, invalid_schedule_errors


@derived_object
class InlineSpatialProducers(PyScheduleRule):
    """Inlines a block with only spatial axes into its consumers, where TVM's compute_inline
    allows it. MetaSchedule's AutoInline leaves some such blocks alone: a decoder's masked
    attention matmul `matmul + where(mask, 0, -inf)` keeps the `where` as a second producer of
    the add, and MultiLevelTiling's reverse_compute_at of the add then raises."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch, block):
        from tvm import tirx

        axes = sch.get(block).iter_vars  # none: the root block, which has no consumers to ask
        if axes and all(var.iter_type == tirx.IterVar.DataPar for var in axes) and sch.get_consumers(block):
            try:
                sch.compute_inline(block)
            except invalid_schedule_errors():
                pass  # an output block or an impure one: left as it is, as AutoInline would
        return [sch]

    def clone(self):
        return InlineSpatialProducers()


def fallback_space(target):
    """MetaSchedule's default rules, postprocessors and mutators for `target`, with
    elementwise producers inlined before any other rule runs."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.space_generator import PostOrderApply

    kind = "cuda" if target.kind.name == "cuda" else "llvm"
    return PostOrderApply(sch_rules=[InlineSpatialProducers(), *ms.ScheduleRule.create(kind)],
                          postprocs=kind, mutator_probs=kind)


def _first_line(err) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("Error message")), lines[0] if lines else type(err).__name__)


def _generates(task, space) -> str | None:
    """None where `space` makes `task`'s design space, else the first line of TVM's error."""
    from tvm.s_tir import meta_schedule as ms

    context = ms.TuneContext(mod=task.dispatched[0], target=task.target, space_generator=space,
                             task_name=task.task_name)
    try:
        context.generate_design_space()
    except (RuntimeError, ValueError, IndexError) as err:
        if not design_space_failed(err):
            raise
        return _first_line(err)
    return None


def searchable_tasks(tasks, space) -> tuple[list, list, dict[str, str], dict[str, str]]:
    """The extracted tasks searched in `space`; those searched in `fallback_space` instead, with
    why `space` failed on each; and the tasks neither generates, with why. Seen: MetaSchedule's
    CPU rules on a Llama-style decoder's masked attention matmul, "The primitive requires all
    the producer(s) of the given block to be present under the target loop"."""
    kept, rescued, refused, why_rescued = [], [], {}, {}
    for task in tasks:
        why = _generates(task, space)
        if why is None:
            kept.append(task)
        elif _generates(task, fallback_space(task.target)) is None:
            rescued.append(task)
            why_rescued[str(task.task_name)] = why
        else:
            refused[str(task.task_name)] = why
    return kept, rescued, why_rescued, refused


def tune_contexts(searchable: list, rescued: list, *, target, work_dir: str, space, strategy, seed: int | None):
    """MetaSchedule's TuneContexts and weights for the tasks, as relax_integration's
    extracted_tasks_to_tune_contexts makes them, but the rescued tasks in `fallback_space`, and
    one set of loggers for all (two calls of that function log every line twice)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.logging import get_loggers_from_work_dir
    from tvm.s_tir.meta_schedule.utils import fork_seed

    tasks = [*searchable, *rescued]
    fallback = fallback_space(target) if rescued else None
    contexts, weights = [], []
    loggers = get_loggers_from_work_dir(work_dir, [t.task_name for t in tasks])
    for i, (task, logger, rand_state) in enumerate(zip(tasks, loggers, fork_seed(seed, n=len(tasks)))):
        if task.mod.attrs.get("tirx.is_scheduled", False):  # as extracted_tasks_to_tune_contexts skips them
            continue
        contexts.append(ms.TuneContext(mod=task.dispatched[0], target=task.target,
                                       space_generator=space if i < len(searchable) else fallback,
                                       search_strategy=strategy, task_name=task.task_name, logger=logger,
                                       rand_state=rand_state).clone())
        weights.append(task.weight)
    return contexts, weights
