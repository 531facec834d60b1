"""Keep MetaSchedule's logger set-up working whatever else is attached to its logger.

Every `tune_tir` / `tune_relax` / `tune_tasks` call runs MetaSchedule's `create_loggers`, which
rebuilds the `tvm.s_tir.meta_schedule` logger with `logging.config.dictConfig` and lists the
handlers already on it *by name*, expecting only its own. A handler it did not make breaks it:
an unnamed one crashes the call (`'NoneType' object has no attribute 'format'`), a named one is
unknown to the config (`ValueError: Unable to configure logger`). Since pytest 9.0 pytest
attaches its unnamed capture handlers to every non-propagating logger during each test phase,
and MetaSchedule's logger is non-propagating after its first tune in a process; a user's own
handler does the same anywhere.

`guard_metaschedule_logger()` sets such handlers aside for the call and puts them back after it;
MetaSchedule's own console and file handlers (work_dir/logs) carry its messages meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

METASCHEDULE_LOGGER = "tvm.s_tir.meta_schedule"


def _made_by_metaschedule(handler: logging.Handler) -> bool:
    name = handler.get_name()
    return name is not None and name.startswith(METASCHEDULE_LOGGER + ".")


@contextmanager
def guard_metaschedule_logger() -> Iterator[list[logging.Handler]]:
    """Around a MetaSchedule tune call: detach the handlers MetaSchedule did not make from its
    logger, yield them, and re-attach them (in their order) when the call ends or fails."""
    logger = logging.getLogger(METASCHEDULE_LOGGER)
    foreign = [h for h in logger.handlers if not _made_by_metaschedule(h)]
    for handler in foreign:
        logger.removeHandler(handler)
    try:
        yield foreign
    finally:
        for handler in foreign:
            logger.addHandler(handler)  # a no-op for one already there
