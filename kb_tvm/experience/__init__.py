"""The experience library: what earlier tuning runs learned, kept per tuned workload so a later
run can warm-start instead of searching from nothing.

Each entry holds one workload tuned on one target: the target, the TVM version, the workload's
description (name, op kind, dtypes, shapes, a log2 shape-feature vector, a hash), the best
latency found, the time and trials spent, the best-latency trajectory, the regions that won, the
measured costs, TVM's own JSONDatabase files for the workload, and optionally the cost-model
training samples (features and log-latencies).

Layout on disk::

    <root>/entries/<id>/entry.json                   the fields of ExperienceEntry + "schema"
    <root>/entries/<id>/database_workload.json       TVM JSONDatabase files, copied byte for byte
    <root>/entries/<id>/database_tuning_record.json  (kept opaque: TVM owns their format)
    <root>/entries/<id>/samples.json                 optional: {"feature_version", "rows": [[y, [x...]]]}
    <root>/staging/<name>                            entries being written or removed; never read

Schema rule: every entry.json says which SCHEMA_VERSION wrote it; a reader skips (with an
ExperienceWarning) any entry of another version rather than guess at its meaning. Bump the
version whenever a field changes meaning or a new field becomes required.

No pickle: a library file may come from someone else (`import_`), and unpickling runs code.
Everything here is JSON, so a library is data, never code.

No lock: an entry is written completely in <root>/staging/<id> and then renamed into
<root>/entries/<id>. A rename is atomic on POSIX, and ids are unique, so concurrent writers
(threads or processes) never touch the same directory and a reader sees either a whole entry or
none; a crash leaves at most a staging directory, which readers ignore and `prune` removes once
it is an hour old (a live writer's is seconds old).

The package: schema.py (the entry's files and fields, the checks), entries.py (reading one entry),
library.py (Experience), cli.py (`kb-tvm experience ...`).
"""

from .entries import ExperienceEntry, ExperienceWarning
from .library import Experience, default_path
from .schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "Experience", "ExperienceEntry", "ExperienceWarning", "default_path"]
