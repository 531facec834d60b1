"""The experience library: storage, lookup, robustness against bad or hostile files, the CLI."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from kb_tvm.experience import SCHEMA_VERSION, Experience, ExperienceWarning, default_path
from kb_tvm.experience.cli import experience_group

# opaque bytes (CRLF, a non-UTF-8 byte): the library must copy them untouched
WORKLOAD_BYTES = b'["workload", 1]\r\n\xff{"not": "parsed"}\n'
RECORD_BYTES = b'[0, ["record"]]\n[0, ["another"]]\n'
COSTS = {"per_batch_s": 2.5, "per_candidate_s": 0.125, "per_run_second": 0.75}


def _database_files(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    workload, records = directory / "w.json", directory / "r.json"
    workload.write_bytes(WORKLOAD_BYTES)
    records.write_bytes(RECORD_BYTES)
    return workload, records


def _workload(name="gemm-128", *, op_kind="matmul", dtypes=("float32",), vector=(7.0, 7.0, 7.0), hash_=None):
    return {"name": name, "op_kind": op_kind, "dtypes": list(dtypes), "vector": list(vector),
            "shapes": [[128, 128], [128, 128]], "hash": hash_ or f"hash-{name}"}


def _add(library: Experience, files: tuple[Path, Path], *, kind="llvm", latency=1e-3, mcpu=None, **workload_args):
    target = {"kind": kind, "num-cores": 2, **({"mcpu": mcpu} if mcpu else {})}
    return library.add(
        target=target, tvm_version="0.27.0", workload=_workload(**workload_args),
        best_latency_s=latency, seconds=12.5, trials=64, trajectory=[[0.5, 3e-3], [4.0, latency]],
        regions_won=["tile-large", "tile-small"], costs=COSTS, database_files=files,
    )


@pytest.fixture
def files(tmp_path):
    return _database_files(tmp_path / "source")


@pytest.fixture
def library(tmp_path):
    return Experience(tmp_path / "lib")


# ---------------------------------------------------------------- storing and reading

def test_add_round_trips_every_field_and_copies_the_database_byte_for_byte(library, files):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 4)) * 1000, rng.normal(size=5)
    target = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "num-cores": 4}
    workload = _workload() | {"extra": {"layout": "NHWC"}}
    added = library.add(
        target=target, tvm_version="0.27.0", workload=workload, best_latency_s=np.float64(2e-4),
        seconds=30, trials=np.int64(96), trajectory=[(0.0, 1e-3), (2.0, 5e-4), (2.0, 2e-4)],
        regions_won=("a", "b"), costs=COSTS, database_files=files, samples=("feat-v2", x, y),
    )
    read = library.get(added.id)
    assert read == added
    assert added.id.startswith("gemm-128-") and added.path == library.path / "entries" / added.id
    assert read.target == target and read.target_kind == "llvm" and read.tvm_version == "0.27.0"
    assert read.workload == workload
    assert read.best_latency_s == 2e-4 and read.seconds == 30.0 and read.trials == 96
    assert read.trajectory == [[0.0, 1e-3], [2.0, 5e-4], [2.0, 2e-4]]
    assert read.regions_won == ["a", "b"] and read.costs == COSTS
    assert read.created.endswith("+00:00")
    assert library.entries() == [read]
    assert json.loads((read.path / "entry.json").read_text())["schema"] == SCHEMA_VERSION

    workload_copy, records_copy = read.database_paths()
    assert workload_copy.read_bytes() == WORKLOAD_BYTES and records_copy.read_bytes() == RECORD_BYTES

    version, x_read, y_read = read.samples()
    assert version == "feat-v2" and x_read.shape == (5, 4) and y_read.shape == (5,)
    np.testing.assert_allclose(x_read, x, rtol=1e-5)
    np.testing.assert_allclose(y_read, y, rtol=1e-5)
    assert not np.array_equal(x_read, x)  # really rounded: files stay small
    assert read.summary()["workload"] == workload and "path" not in read.summary()
    json.dumps(read.summary())  # JSON-able


def test_an_entry_without_samples_has_none(library, files):
    assert _add(library, files).samples() is None


def test_entries_are_newest_first_and_filter_by_target_kind(library, files):
    first = _add(library, files, name="a")
    second = _add(library, files, name="b", kind="cuda")
    third = _add(library, files, name="c")
    assert [e.id for e in library.entries()] == [third.id, second.id, first.id]
    assert [e.id for e in library.entries(target_kind="llvm")] == [third.id, first.id]
    assert library.entries(target_kind="rocm") == []


def test_a_new_library_is_created_lazily(tmp_path, files):
    library = Experience(tmp_path / "nothing" / "here")
    assert library.entries() == [] and library.nearest(_workload(), target_kind="llvm") == []
    assert not library.path.exists()
    _add(library, files)
    assert len(library.entries()) == 1


def test_default_path_honours_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_path() == tmp_path / "cache" / "kb_tvm" / "experience"
    assert Experience().path == default_path()
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec says: ignore it
    assert default_path() == Path.home() / ".cache" / "kb_tvm" / "experience"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_path() == Path.home() / ".cache" / "kb_tvm" / "experience"


def test_the_suite_runs_against_its_own_home_never_the_users(isolated_home):
    assert Path.home() == isolated_home
    assert default_path().is_relative_to(isolated_home) and Experience().path.is_relative_to(isolated_home)


def test_get_and_remove_an_unknown_id_raise_one_line_key_errors(library, files):
    entry = _add(library, files)
    for bad in ("nope", "../lib", ""):
        with pytest.raises(KeyError) as info:
            library.get(bad)
        assert repr(bad) in info.value.args[0] and "\n" not in info.value.args[0]
    library.remove(entry.id)
    assert library.entries() == []
    with pytest.raises(KeyError):
        library.remove(entry.id)


# ---------------------------------------------------------------- nearest

def test_nearest_picks_the_closer_vector(library, files):
    far = _add(library, files, name="far", vector=(9.0, 9.0, 9.0))
    near = _add(library, files, name="near", vector=(7.0, 7.0, 8.0))
    found = library.nearest(_workload("query", vector=(7.0, 7.0, 7.0)), target_kind="llvm", k=3, max_distance=10)
    assert [e.id for _, e in found] == [near.id, far.id]
    assert found[0][0] == pytest.approx(1.0) and found[1][0] == pytest.approx(np.sqrt(12))
    only = library.nearest(_workload("query"), target_kind="llvm", k=1, max_distance=10)
    assert [e.id for _, e in only] == [near.id]


def test_nearest_never_returns_another_target_kind(library, files):
    _add(library, files, name="gemm-128", kind="cuda")  # same hash, distance 0
    llvm = _add(library, files, name="other", kind="llvm", vector=(8.0, 8.0, 8.0))
    found = library.nearest(_workload("gemm-128"), target_kind="llvm", max_distance=10)
    assert [e.id for _, e in found] == [llvm.id]
    assert library.nearest(_workload("gemm-128"), target_kind="rocm") == []


def test_nearest_with_an_mcpu_returns_only_entries_tuned_for_that_cpu(library, files):
    avx512 = _add(library, files, name="a", mcpu="rocketlake")
    baseline = _add(library, files, name="b")  # a bare llvm target: baseline x86-64 code
    assert [e.id for _, e in library.nearest(_workload("q"), target_kind="llvm", mcpu="rocketlake")] == [avx512.id]
    assert library.nearest(_workload("q"), target_kind="llvm", mcpu="znver4") == []
    anywhere = library.nearest(_workload("q"), target_kind="llvm")
    assert {e.id for _, e in anywhere} == {avx512.id, baseline.id}


def test_nearest_excludes_other_op_kinds_dtypes_and_vector_lengths(library, files):
    _add(library, files, name="conv", op_kind="conv2d")
    _add(library, files, name="half", dtypes=("float16",))
    _add(library, files, name="longer", vector=(7.0, 7.0, 7.0, 7.0))
    same = _add(library, files, name="same", vector=(7.0, 7.0, 7.5))
    found = library.nearest(_workload("query"), target_kind="llvm")
    assert [e.id for _, e in found] == [same.id]


def test_nearest_respects_max_distance_and_an_equal_hash_is_distance_zero(library, files):
    _add(library, files, name="far", vector=(10.0, 7.0, 7.0))  # distance 3
    twin = _add(library, files, name="twin", vector=(1.0, 1.0, 1.0), hash_="H")  # far vector, same hash
    assert library.nearest(_workload("q"), target_kind="llvm", max_distance=2.9) == []
    assert len(library.nearest(_workload("q"), target_kind="llvm", max_distance=3.0)) == 1
    found = library.nearest(_workload("q", hash_="H"), target_kind="llvm", max_distance=0.0)
    assert found == [(0.0, twin)]


def test_nearest_keeps_only_the_fastest_of_one_workload_hash(library, files):
    _add(library, files, name="w", latency=3e-3)
    best = _add(library, files, name="w", latency=1e-3)
    _add(library, files, name="w", latency=2e-3)
    other = _add(library, files, name="v", vector=(7.0, 7.0, 6.0), latency=5e-3)
    found = library.nearest(_workload("w"), target_kind="llvm")
    assert [e.id for _, e in found] == [best.id, other.id]


def test_nearest_breaks_distance_ties_newest_first(library, files):
    older = _add(library, files, name="a", vector=(7.0, 7.0, 8.0), latency=1e-4)
    newer = _add(library, files, name="b", vector=(7.0, 7.0, 6.0), latency=9e-3)
    found = library.nearest(_workload("q"), target_kind="llvm")
    assert [e.id for _, e in found] == [newer.id, older.id]


def test_nearest_rejects_bad_arguments(library):
    with pytest.raises(ValueError, match="k=0: k must be an int >= 1"):
        library.nearest(_workload(), target_kind="llvm", k=0)
    with pytest.raises(ValueError, match="max_distance=-1"):
        library.nearest(_workload(), target_kind="llvm", max_distance=-1)
    with pytest.raises(ValueError, match="missing vector"):
        library.nearest({"op_kind": "matmul", "dtypes": []}, target_kind="llvm")


# ---------------------------------------------------------------- bad entries

def _garbage(entry_dir: Path) -> None:
    (entry_dir / "entry.json").write_bytes(b"\x00\xff not json {{")


def _missing_fields(entry_dir: Path) -> None:
    record = json.loads((entry_dir / "entry.json").read_text())
    del record["best_latency_s"], record["costs"]
    (entry_dir / "entry.json").write_text(json.dumps(record))


def _schema_99(entry_dir: Path) -> None:
    record = json.loads((entry_dir / "entry.json").read_text())
    (entry_dir / "entry.json").write_text(json.dumps(record | {"schema": 99}))


def _no_entry_json(entry_dir: Path) -> None:
    (entry_dir / "entry.json").unlink()


def _bad_value(entry_dir: Path) -> None:
    record = json.loads((entry_dir / "entry.json").read_text())
    (entry_dir / "entry.json").write_text(json.dumps(record | {"best_latency_s": -1}))


@pytest.mark.parametrize("damage, reason", [
    (_garbage, "entry.json is not JSON"),
    (_missing_fields, "missing fields best_latency_s, costs"),
    (_schema_99, "written by schema 99, this kb_tvm reads 1"),
    (_no_entry_json, "no entry.json"),
    (_bad_value, "best_latency_s=-1: best_latency_s must be finite and > 0"),
])
def test_a_bad_entry_is_skipped_with_a_warning_and_the_good_ones_still_read(library, files, damage, reason):
    good = _add(library, files, name="good")
    bad = _add(library, files, name="bad", vector=(7.0, 7.0, 7.1))
    damage(bad.path)
    with pytest.warns(ExperienceWarning, match=reason) as record:
        assert library.entries() == [good]
    assert len(record) == 1 and str(bad.path) in str(record[0].message)
    with pytest.warns(ExperienceWarning, match=reason):
        assert [e for _, e in library.nearest(_workload("q"), target_kind="llvm")] == [good]
    with pytest.warns(ExperienceWarning, match=reason), pytest.raises(KeyError, match="cannot be read"):
        library.get(bad.id)


# ---------------------------------------------------------------- concurrency and crashes

def _add_many(root: str, tag: str, count: int, barrier) -> None:
    library = Experience(root)
    files = _database_files(Path(root).parent / f"source-{tag}")
    barrier.wait()  # both writers start together
    for i in range(count):
        _add(library, files, name=f"{tag}-{i}", vector=(float(i), 1.0, 1.0))


def test_two_processes_writing_at_once_never_corrupt_the_library(tmp_path):
    root = tmp_path / "lib"
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    writers = [context.Process(target=_add_many, args=(str(root), tag, 15, barrier)) for tag in ("p", "q")]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=60)
    assert [w.exitcode for w in writers] == [0, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any ExperienceWarning fails the test
        entries = Experience(root).entries()
    assert len(entries) == 30 and len({e.id for e in entries}) == 30
    assert all(e.database_paths()[0].read_bytes() == WORKLOAD_BYTES for e in entries)
    assert list((root / "staging").iterdir()) == []


def test_a_crash_mid_write_is_invisible_to_readers_and_pruned_once_stale(library, files):
    good = _add(library, files)
    half = library.path / "staging" / "gemm-128-0123456789ab"
    half.mkdir(parents=True)
    (half / "entry.json").write_text('{"schema": 1, "id": "gemm-')  # cut off mid-write
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert library.entries() == [good]
        assert library.prune() == []  # a fresh staging dir may belong to a live writer
    assert half.exists()
    old = time.time() - 2 * 3600
    os.utime(half, (old, old))
    assert library.prune(dry_run=True) == [f"staging/{half.name}"] and half.exists()
    assert library.prune() == [f"staging/{half.name}"]
    assert not half.exists() and library.entries() == [good]


# ---------------------------------------------------------------- prune

def test_prune_keeps_the_fastest_per_target_kind_and_workload_hash(library, files):
    slow = _add(library, files, name="w", latency=3e-3)
    fast = _add(library, files, name="w", latency=1e-3)
    middle = _add(library, files, name="w", latency=2e-3)
    cuda = _add(library, files, name="w", kind="cuda", latency=9e-3)  # another target: its own group
    lone = _add(library, files, name="v", latency=5e-3)
    broken = _add(library, files, name="x")
    _garbage(broken.path)

    with pytest.warns(ExperienceWarning):
        planned = library.prune(keep=1, dry_run=True)
    assert sorted(planned) == sorted([slow.id, middle.id, broken.id])
    with pytest.warns(ExperienceWarning):
        assert len(library.entries()) == 5  # dry run removed nothing

    with pytest.warns(ExperienceWarning):
        assert sorted(library.prune(keep=2)) == sorted([slow.id, broken.id])
    assert {e.id for e in library.entries()} == {fast.id, middle.id, cuda.id, lone.id}
    assert library.prune(keep=1) == [middle.id]
    assert {e.id for e in library.entries()} == {fast.id, cuda.id, lone.id}
    assert list((library.path / "staging").iterdir()) == []


@pytest.mark.parametrize("keep", [0, -1, True, 1.5])
def test_prune_rejects_a_bad_keep(library, keep):
    with pytest.raises(ValueError, match=f"keep={keep!r}: keep must be >= 1"):
        library.prune(keep=keep)


# ---------------------------------------------------------------- export and import

def test_export_and_import_round_trip_into_a_fresh_library(tmp_path, library, files):
    rng = np.random.default_rng(1)
    a = library.add(target={"kind": "llvm"}, tvm_version="0.27.0", workload=_workload("a"), best_latency_s=1e-3,
                    seconds=1.0, trials=2, trajectory=[], regions_won=[], costs=COSTS, database_files=files,
                    samples=("v", rng.normal(size=(3, 2)), rng.normal(size=3)))
    b = _add(library, files, name="b", kind="cuda")
    archive = tmp_path / "shared.tar.gz"
    assert library.export(archive) == 2

    fresh = Experience(tmp_path / "fresh")
    assert fresh.import_(archive) == 2
    imported = {e.id: e for e in fresh.entries()}
    assert imported.keys() == {a.id, b.id}
    assert imported[a.id].summary() == a.summary()
    assert imported[b.id].database_paths()[1].read_bytes() == RECORD_BYTES
    np.testing.assert_array_equal(imported[a.id].samples()[1], a.samples()[1])
    assert fresh.import_(archive) == 0  # existing ids are skipped
    assert len(fresh.entries()) == 2
    assert list((fresh.path / "staging").iterdir()) == []

    llvm_only = tmp_path / "llvm.tar.gz"
    assert library.export(llvm_only, target_kind="llvm") == 1
    third = Experience(tmp_path / "third")
    assert third.import_(llvm_only) == 1 and [e.id for e in third.entries()] == [a.id]


def _tar_gz(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), data


def _link(name: str, target: str, kind=tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.mark.parametrize("evil, why", [
    (_file("../evil", b"x"), "leaves the archive"),
    (_file("entries/../../evil", b"x"), "leaves the archive"),
    (_file("/tmp/evil-absolute", b"x"), "leaves the archive"),
    (_link("entries/x/database_workload.json", "/etc/passwd"), "is a link"),
    (_link("entries/x/entry.json", "/etc/passwd", tarfile.LNKTYPE), "is a link"),
])
def test_an_archive_with_an_escaping_path_or_a_link_is_rejected(tmp_path, library, files, evil, why):
    good = _add(Experience(tmp_path / "other"), files)
    members = [_file(f"entries/{good.id}/{p.name}", p.read_bytes()) for p in sorted(good.path.iterdir())]
    archive = _tar_gz(tmp_path / "evil.tar.gz", [*members, evil])
    with pytest.raises(ValueError, match=why):
        library.import_(archive)
    assert library.entries() == []
    assert not (tmp_path / "evil").exists() and not (library.path / "evil").exists()


def test_import_skips_bad_entries_with_a_warning_and_adds_the_good(tmp_path, library, files):
    source = Experience(tmp_path / "source-lib")
    good, bad = _add(source, files, name="good"), _add(source, files, name="bad")
    _schema_99(bad.path)
    members = [_file(f"entries/{e.id}/{p.name}", p.read_bytes())
               for e in (good, bad) for p in sorted(e.path.iterdir())]
    archive = _tar_gz(tmp_path / "mixed.tar.gz", [*members, _file("README", b"hello")])
    with pytest.warns(ExperienceWarning) as record:
        assert library.import_(archive) == 1
    messages = [str(w.message) for w in record]
    assert any("written by schema 99" in m and bad.id in m for m in messages)
    assert any("ignoring README" in m for m in messages)
    assert [e.id for e in library.entries()] == [good.id]


def test_import_of_something_that_is_not_a_tar_gz_is_a_value_error(tmp_path, library, files):
    not_archive = tmp_path / "notes.txt"
    not_archive.write_text("hello")
    plain_tar = tmp_path / "plain.tar"
    with tarfile.open(plain_tar, "w") as tar:
        tar.add(files[0], arcname="w.json")
    truncated = tmp_path / "cut.tar.gz"
    library.export(tmp_path / "whole.tar.gz")  # empty but valid
    _add(library, files)
    library.export(tmp_path / "whole.tar.gz")
    truncated.write_bytes((tmp_path / "whole.tar.gz").read_bytes()[:60])
    fresh = Experience(tmp_path / "fresh")
    for path in (not_archive, plain_tar, truncated):
        with pytest.raises(ValueError, match="not a readable .tar.gz archive") as info:
            fresh.import_(path)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="no such file"):
        fresh.import_(tmp_path / "missing.tar.gz")
    assert fresh.entries() == []


# ---------------------------------------------------------------- add's validation

def _args(files, **changes):
    args = {"target": {"kind": "llvm"}, "tvm_version": "0.27.0", "workload": _workload(), "best_latency_s": 1e-3,
            "seconds": 1.0, "trials": 2, "trajectory": [[0.0, 1e-3]], "regions_won": ["r"], "costs": COSTS,
            "database_files": files}
    return args | changes


@pytest.mark.parametrize("changes, message", [
    ({"best_latency_s": 0.0}, "best_latency_s=0.0: best_latency_s must be finite and > 0"),
    ({"best_latency_s": float("inf")}, "best_latency_s=inf"),
    ({"best_latency_s": float("nan")}, "best_latency_s=nan"),
    ({"seconds": -1.0}, "seconds=-1.0: seconds must be finite and >= 0"),
    ({"trials": 2.5}, "trials=2.5: trials must be an int >= 0"),
    ({"target": {"mcpu": "x"}}, "target={'mcpu': 'x'}: target must be a dict with a non-empty 'kind'"),
    ({"tvm_version": ""}, "tvm_version='': tvm_version must be a non-empty string"),
    ({"workload": {"name": "w", "op_kind": "m", "dtypes": []}}, "workload is missing vector, shapes, hash"),
    ({"workload": _workload() | {"vector": [1.0, "big"]}}, "workload vector=\\[1.0, 'big'\\]"),
    ({"workload": _workload() | {"dtypes": "float32"}}, "workload dtypes='float32'"),
    ({"workload": _workload() | {"extra": object()}}, "workload=.*must be JSON data"),
    ({"trajectory": [[2.0, 1e-3], [1.0, 1e-3]]}, "trajectory must be non-decreasing|seconds must be non-decreasing"),
    ({"trajectory": [[0.0, 1e-3, 5]]}, "trajectory must be \\[\\[seconds"),
    ({"regions_won": [1, 2]}, "regions_won=\\[1, 2\\]: regions_won must be a list of strings"),
    ({"costs": {"per_batch_s": 1.0}}, "costs=.*per_candidate_s"),
    ({"samples": ("v", np.ones((3, 2)), np.ones(2))}, "X has 3 rows, y has 2 values: X rows must equal len\\(y\\)"),
    ({"samples": ("v", np.ones(3), np.ones(3))}, "X has shape \\(3,\\): X must be 2-D"),
    ({"samples": ("", np.ones((1, 2)), np.ones(1))}, "feature_version='': feature_version must be a non-empty"),
    ({"samples": ("v", np.full((1, 2), np.nan), np.ones(1))}, "X and y must be finite"),
])
def test_add_rejects_bad_inputs_with_one_line_naming_the_value(library, files, changes, message):
    with pytest.raises(ValueError, match=message) as info:
        library.add(**_args(files, **changes))
    assert "\n" not in str(info.value)
    assert library.entries() == [] and not (library.path / "staging").exists()


def test_add_rejects_missing_database_files(library, files, tmp_path):
    missing = tmp_path / "gone.json"
    with pytest.raises(ValueError, match=f"database_files\\[1\\]='{missing}': the file must exist"):
        library.add(**_args(files, database_files=(files[0], missing)))
    with pytest.raises(ValueError, match="database_files=.*must be \\(workload file, tuning-record file\\)"):
        library.add(**_args(files, database_files=(files[0],)))


# ---------------------------------------------------------------- the CLI

def _cli(library: Experience, *args: str):
    return CliRunner().invoke(experience_group, ["--experience", str(library.path), *args])


def test_cli_list_show_export_import_prune(tmp_path, library, files):
    result = _cli(library, "list")
    assert result.exit_code == 0 and result.output == f"no entries in {library.path}\n"

    slow = _add(library, files, latency=2.5e-3)
    fast = library.add(**_args(files, best_latency_s=1.23456e-3, trials=7, seconds=42.0,
                               samples=("v", np.ones((4, 2)), np.ones(4))))
    result = _cli(library, "list")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert len(lines) == 2 and lines[0].startswith(fast.id) and lines[1].startswith(slow.id)
    for part in ("llvm", "gemm-128", "matmul", "128x128,128x128", "1.2346 ms", "42.0s", "7 trials",
                 fast.created[:10]):
        assert part in lines[0]
    assert _cli(library, "list", "--target-kind", "cuda").output == f"no entries in {library.path}\n"

    result = _cli(library, "show", fast.id)
    assert result.exit_code == 0
    shown = json.loads(result.output)
    assert shown["id"] == fast.id and shown["trajectory"] == fast.trajectory and shown["samples"] == 4

    archive = tmp_path / "out.tar.gz"
    result = _cli(library, "export", str(archive))
    assert result.exit_code == 0 and result.output == f"exported 2 entries to {archive}\n"
    fresh = Experience(tmp_path / "fresh")
    result = _cli(fresh, "import", str(archive))
    assert result.exit_code == 0 and result.output == f"imported 2 entries from {archive}\n"
    assert len(fresh.entries()) == 2

    result = _cli(library, "prune", "--dry-run")
    assert result.exit_code == 0 and result.output == f"{slow.id}\nwould remove 1\n"
    result = _cli(library, "prune", "--keep", "1")
    assert result.exit_code == 0 and result.output == f"{slow.id}\nremoved 1\n"
    assert [e.id for e in library.entries()] == [fast.id]


def test_cli_errors_are_one_line_and_exit_non_zero(tmp_path, library, files):
    _add(library, files)
    not_archive = tmp_path / "x.txt"
    not_archive.write_text("nope")
    for args, message in ((["show", "no-such-id"], "no experience entry 'no-such-id'"),
                          (["import", str(not_archive)], "not a readable .tar.gz archive"),
                          (["prune", "--keep", "0"], "keep=0: keep must be >= 1")):
        result = _cli(library, *args)
        assert result.exit_code != 0
        assert result.stderr.count("\n") == 1 and message in result.stderr and "Traceback" not in result.stderr


def test_cli_shows_experience_warnings_as_single_lines(library, files):
    good = _add(library, files, name="good")
    bad = _add(library, files, name="bad")
    _garbage(bad.path)
    result = _cli(library, "list")
    assert result.exit_code == 0
    assert result.stdout.startswith(good.id) and len(result.stdout.splitlines()) == 1
    assert result.stderr.startswith(f"warning: skipping {bad.path}: entry.json is not JSON")
    assert result.stderr.count("\n") == 1 and "ExperienceWarning" not in result.stderr


# ---------------------------------------------------------------- with TVM

def test_the_entry_database_is_a_tvm_json_database_holding_the_workload(tmp_path, library):
    from tvm.s_tir.meta_schedule.database import JSONDatabase
    from tvm.script import ir as I
    from tvm.script import tirx as T

    @I.ir_module
    class Matmul:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((16, 16), "float32"), B: T.Buffer((16, 16), "float32"),
                 C: T.Buffer((16, 16), "float32")):
            for i, j, k in T.grid(16, 16, 16):
                with T.sblock("C"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    with T.init():
                        C[vi, vj] = T.float32(0)
                    C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    @I.ir_module
    class Other:
        @T.prim_func(s_tir=True)
        def main(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
            for i in range(8):
                with T.sblock("B"):
                    vi = T.axis.remap("S", [i])
                    B[vi] = A[vi] * T.float32(2)

    paths = (tmp_path / "tvm" / "database_workload.json", tmp_path / "tvm" / "database_tuning_record.json")
    paths[0].parent.mkdir()
    database = JSONDatabase(path_workload=str(paths[0]), path_tuning_record=str(paths[1]))
    database.commit_workload(Matmul)
    entry = library.add(**_args(paths))
    assert entry.database_paths()[0].read_bytes() == paths[0].read_bytes()
    copy = library.get(entry.id).database()
    assert copy.has_workload(Matmul)
    assert not copy.has_workload(Other)
