"""Shared by the pipeline tests: one batch through a builder and a runner, as MetaSchedule's task
scheduler sends it."""


def build_and_run(builder, runner, funcs, target):
    """Build `funcs` (PrimFuncs; every build must succeed) and measure them; the RunnerResults."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    device = "cuda" if target.kind.name == "cuda" else "cpu"
    mods = [tvm.IRModule({"main": f}) for f in funcs]
    built = builder.build([ms.builder.BuilderInput(mod, target) for mod in mods])
    assert [b.error_msg for b in built] == [None] * len(funcs), [b.error_msg for b in built]
    inputs = [ms.runner.RunnerInput(b.artifact_path, device, ms.arg_info.ArgInfo.from_prim_func(mod["main"]))
              for b, mod in zip(built, mods)]
    return [future.result() for future in runner.run(inputs)]
