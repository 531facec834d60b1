"""Handlers that MetaSchedule did not make, on its logger (pytest's, a user's), must not crash a
tune: reproduced here with our own handlers, whatever pytest version runs the suite."""

import io
import logging

import pytest

from kb_tvm.logger_guard import METASCHEDULE_LOGGER, guard_metaschedule_logger


@pytest.fixture
def foreign_handlers():
    """An unnamed handler (as pytest attaches) and a named one (as an application might)."""
    logger = logging.getLogger(METASCHEDULE_LOGGER)
    unnamed = logging.StreamHandler(io.StringIO())
    named = logging.StreamHandler(io.StringIO())
    named.set_name("my-app")
    logger.addHandler(unnamed)
    logger.addHandler(named)
    yield unnamed, named
    logger.removeHandler(unnamed)
    logger.removeHandler(named)


def test_the_guard_sets_foreign_handlers_aside_and_puts_them_back(foreign_handlers):
    logger = logging.getLogger(METASCHEDULE_LOGGER)
    own = logging.NullHandler()
    own.set_name(METASCHEDULE_LOGGER + ".console")
    logger.addHandler(own)
    try:
        before = set(logger.handlers)
        with guard_metaschedule_logger() as aside:
            assert all(h in aside for h in foreign_handlers)  # pytest's own may be there too
            assert all(h not in logger.handlers for h in foreign_handlers)
            assert own in logger.handlers  # MetaSchedule re-lists its own handlers by name
        assert set(logger.handlers) == before
        with pytest.raises(RuntimeError), guard_metaschedule_logger():
            raise RuntimeError("a failed tune")
        assert set(logger.handlers) == before
    finally:
        logger.removeHandler(own)


def _tiny_gemm():
    from kb_tvm.workloads import get_workload

    return get_workload("gemm-128")


@pytest.mark.tuning
def test_metaschedule_alone_crashes_on_a_foreign_handler(foreign_handlers, llvm_target, tmp_path):
    """What the guard is for: stock tune_tir dies in its logger set-up, before any tuning."""
    from tvm.s_tir import meta_schedule as ms

    with pytest.raises((AttributeError, ValueError)):
        ms.tune_tir(_tiny_gemm().module(), llvm_target, str(tmp_path), max_trials_global=1)


@pytest.mark.tuning
def test_tuning_through_kb_tvm_survives_foreign_handlers(foreign_handlers, llvm_target, tmp_path):
    from kb_tvm.kernels.task_search import read_rows
    from kb_tvm.tuning import tune_operator

    result = tune_operator(_tiny_gemm(), target=llvm_target, budget="60s", work_dir=tmp_path, seed=1,
                           trials_per_batch=4, max_trials=4, quiet=True)
    # MetaSchedule's 4, after the CPU GEMM family's variants
    assert result.trials == 4 + len(read_rows(tmp_path)) and result.final_ms is not None
    logger = logging.getLogger(METASCHEDULE_LOGGER)
    assert all(h in logger.handlers for h in foreign_handlers)
    logger.warning("after the tune")  # the application's handlers work again
    assert all("after the tune" in h.stream.getvalue() for h in foreign_handlers)
