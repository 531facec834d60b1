"""The options `kb-tvm`'s commands share (budget, experience, pipeline, RPC, seed) as click
decorators, with the checks on what they are given."""

from __future__ import annotations

import click

from .budget import parse_budget
from .tuning import KB_STRATEGIES


def _fail(message: str) -> None:
    raise click.ClickException(message)


def _budget(ctx, param, value):
    try:
        parse_budget(value)
    except ValueError as err:
        _fail(str(err))  # one line, naming the accepted forms
    return value


def _experience_options(command):
    command = click.option("--no-experience", is_flag=True,
                           help="Tune cold: borrow nothing from the experience library, add nothing.")(command)
    return click.option("--experience", "experience_dir", type=click.Path(file_okay=False), default=None,
                        help="Experience library to warm-start from and add to (kb only). "
                        "Default: ~/.cache/kb_tvm/experience.")(command)


def _experience(experience_dir, no_experience: bool, strategy: str):
    from .experience import Experience

    if no_experience and experience_dir:
        _fail("--experience and --no-experience contradict each other: give one")
    if no_experience or strategy not in KB_STRATEGIES:
        return None
    return Experience(experience_dir)


def _pipeline_option(command):
    return click.option("--pipeline", type=click.Choice(["kb", "stock"]), default="kb", show_default=True,
                        help="Builder and runner: kb's persistent workers and measuring process, or "
                        "MetaSchedule's LocalBuilder/LocalRunner (to separate pipeline from search).")(command)


def _rpc_options(command):
    command = click.option("--key", default=None,
                           help="With --rpc: the key the measuring servers registered under.")(command)
    return click.option(
        "--rpc", "tracker", default=None, metavar="HOST:PORT",
        help="Measure on every server registered at this TVM RPC tracker under --key (start them with "
        "`kb-tvm worker`); builds stay here.")(command)


def _seed_options(command):
    command = click.option(
        "--repeatable", is_flag=True,
        help="With --seed (kb only): draw samples from explicit seeds in a fixed order and with no time "
        "limit on how many, so the same seed proposes the same first batch (sampling is slower).")(command)
    return click.option(
        "--seed", type=int, default=None,
        help="Seeds the search's random choices (samples, mutations, ties). It cannot fix the measurements' "
        "noise or the wall-clock budget (when phases change, when the search stops), so two runs part "
        "once their measurements differ.")(command)


def _check_repeatable(repeatable: bool, seed, strategy: str) -> None:
    if repeatable and seed is None:
        _fail("--repeatable needs --seed N")
    if repeatable and strategy not in KB_STRATEGIES:
        _fail("--repeatable applies to --strategy kb or agent (stock MetaSchedule draws samples on several threads)")
