"""`kb-tvm experience ...`: look at, share and tidy the experience library.

The main CLI registers the group with `main.add_command(experience_group)`."""

from __future__ import annotations

import functools
import json
import warnings
from contextlib import contextmanager
from pathlib import Path

import click

from .entries import ExperienceWarning
from .library import Experience, default_path


@contextmanager
def _warnings_as_lines():
    """ExperienceWarnings as one 'warning: ...' line on stderr each, not a Python warning dump."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", ExperienceWarning)
        show_other = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            if issubclass(category, ExperienceWarning):
                click.echo(f"warning: {message}", err=True)
            else:
                show_other(message, category, filename, lineno, file, line)

        warnings.showwarning = show  # catch_warnings puts the original back
        yield


def _library_command(name: str):
    """A subcommand that gets the group's Experience, shows its warnings as lines and turns
    ValueError / KeyError / OSError into one-line click errors."""

    def decorate(func):
        @functools.wraps(func)
        @click.pass_context
        def run(ctx, *args, **kwargs):
            with _warnings_as_lines():
                try:
                    return func(ctx.find_object(Experience), *args, **kwargs)
                except KeyError as err:
                    raise click.ClickException(str(err.args[0])) from None
                except (ValueError, OSError) as err:
                    raise click.ClickException(str(err).splitlines()[0]) from None

        return experience_group.command(name)(run)

    return decorate


@click.option("--experience", "root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help=f"The experience library (default: {default_path()}).")
@click.pass_context
def _experience(ctx: click.Context, root: Path | None) -> None:
    """Inspect, share and prune the experience library that warm-starts tuning."""
    ctx.obj = Experience(root)


experience_group = click.group("experience")(_experience)


def _shapes(workload: dict) -> str:
    return ",".join("x".join(str(d) for d in shape) for shape in workload.get("shapes", []))


@_library_command("list")
@click.option("--target-kind", default=None, help="Only entries for this target kind (llvm, cuda, ...).")
def list_entries(library: Experience, target_kind: str | None) -> None:
    """One line per entry, newest first."""
    entries = library.entries(target_kind=target_kind)
    if not entries:
        click.echo(f"no entries in {library.path}")
        return
    rows = [[e.id, e.target_kind, e.workload["name"], e.workload["op_kind"], _shapes(e.workload),
             f"{e.best_latency_s * 1e3:.4f} ms", f"{e.seconds:.1f}s", f"{e.trials} trials", e.created[:10]]
            for e in entries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


@_library_command("show")
@click.argument("entry_id", metavar="ID")
def show_entry(library: Experience, entry_id: str) -> None:
    """An entry as JSON (the cost-model samples only as a count)."""
    entry = library.get(entry_id)
    summary = entry.summary()
    samples = entry.samples()
    summary["samples"] = 0 if samples is None else len(samples[2])
    summary["path"] = str(entry.path)
    click.echo(json.dumps(summary, indent=2))


@_library_command("export")
@click.argument("archive", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--target-kind", default=None, help="Only entries for this target kind.")
def export_entries(library: Experience, archive: Path, target_kind: str | None) -> None:
    """Write the entries to a .tar.gz to share."""
    count = library.export(archive, target_kind=target_kind)
    click.echo(f"exported {count} entries to {archive}")


@_library_command("import")
@click.argument("archive", metavar="FILE", type=click.Path(dir_okay=False, path_type=Path))
def import_entries(library: Experience, archive: Path) -> None:
    """Add the entries of a .tar.gz written by export (existing ids are skipped)."""
    count = library.import_(archive)
    click.echo(f"imported {count} entries from {archive}")


@_library_command("prune")
@click.option("--keep", default=1, show_default=True, type=int,
              help="Entries to keep per target kind and workload: the fastest.")
@click.option("--dry-run", is_flag=True, help="Only say what would be removed.")
def prune_entries(library: Experience, keep: int, dry_run: bool) -> None:
    """Remove unreadable entries, crashed writes and all but the fastest entries per workload."""
    removed = library.prune(keep=keep, dry_run=dry_run)
    for name in removed:
        click.echo(name)
    click.echo(f"{'would remove' if dry_run else 'removed'} {len(removed)}")
