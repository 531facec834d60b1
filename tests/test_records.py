"""One record per schedule: re-measures refine the record, stock MetaSchedule still reads the files."""

import json

import pytest

from kb_tvm.measure.records import (
    FAILED_S,
    merged_seconds,
    record_latency,
    valid_seconds,
)


def test_merging_keeps_every_latency_and_drops_failure_markers():
    assert merged_seconds([0.003], [0.001]) == [0.003, 0.001]
    assert merged_seconds([FAILED_S], [0.002]) == [0.002]  # a retry that worked
    assert merged_seconds([0.002], [FAILED_S]) == [0.002]  # a failed re-measure hides nothing
    assert merged_seconds([FAILED_S], [FAILED_S]) == [FAILED_S]
    assert valid_seconds(None) == []


def test_a_record_is_worth_the_median_of_its_measurements():
    assert record_latency([0.001, 0.005, 0.002]) == 0.002  # not the luckiest, not the mean
    assert record_latency([FAILED_S]) is None and record_latency([]) is None


@pytest.fixture
def gemm(llvm_target):
    import tvm
    from kb_tvm.workloads import get_workload
    from tvm.s_tir import meta_schedule as ms

    mod = get_workload("gemm-128").module()
    plain = tvm.s_tir.Schedule(mod)
    tiled = tvm.s_tir.Schedule(mod)
    i, *_ = tiled.get_loops(tiled.get_sblock("C"))
    tiled.split(i, [None, 8])
    args = ms.arg_info.ArgInfo.from_prim_func(mod["main"])

    def record(sch, workload, seconds):
        return ms.database.TuningRecord(sch.trace, workload, seconds, llvm_target, args)

    return mod, plain, tiled, record


def test_a_schedule_measured_again_refines_its_record_and_ranks_by_its_median(tmp_path, gemm, llvm_target):
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import RecordDatabase

    mod, plain, tiled, record = gemm
    database = RecordDatabase(work_dir=tmp_path)
    workload = database.commit_workload(mod)
    database.commit_tuning_record(record(tiled, workload, [0.0010]))  # a lucky first measurement
    database.commit_tuning_record(record(plain, workload, [0.0015]))
    database.commit_tuning_record(record(tiled, workload, [0.0020]))  # measured again: slower
    database.commit_tuning_record(record(tiled, workload, [0.0021]))
    database.commit_tuning_record(record(plain, workload, [FAILED_S]))  # a failed re-measure
    assert len(database) == 2
    best = database.query_tuning_record(mod, llvm_target, "main")
    assert str(best.trace) == str(plain.trace)  # tiled's median (2.0 ms) lost to plain's 1.5 ms
    assert [round(float(s), 6) for s in best.run_secs] == [0.0015]
    # every measurement is on disk at once: a crash loses none, and reading merges them again
    path = tmp_path / "database_tuning_record.json"
    assert len(path.read_text().splitlines()) == 5
    assert len(RecordDatabase(work_dir=tmp_path)) == 2
    database.compact()
    assert len(path.read_text().splitlines()) == 2
    # stock MetaSchedule reads the compacted files: one record per schedule, all its measurements
    stock = ms.database.JSONDatabase(work_dir=str(tmp_path)).get_all_tuning_records()
    assert sorted(len(r.run_secs) for r in stock) == [1, 3]
    reread = RecordDatabase(work_dir=tmp_path)
    assert str(reread.query_tuning_record(mod, llvm_target, "main").trace) == str(plain.trace)
    reread.commit_tuning_record(record(plain, reread.commit_workload(mod), [0.0030]))  # appends after compaction
    ranked = RecordDatabase(work_dir=tmp_path).get_top_k(reread.commit_workload(mod), 2)
    assert [str(r.trace) for r in ranked] == [str(tiled.trace), str(plain.trace)]  # plain is 2.25 ms now
    assert [record_latency(r.run_secs) for r in ranked] == pytest.approx([0.0020, 0.00225], rel=1e-6)
    assert all(json.loads(line)[0] == 0 for line in path.read_text().splitlines())  # one workload, line 0


def test_schedules_whose_traces_hold_index_maps_merge_and_compact(tmp_path, gemm, llvm_target):
    """Tensor-core traces carry IndexMaps (layout transforms), which plain JSON cannot hold."""
    import tvm

    from kb_tvm import RecordDatabase

    mod, _, _, record = gemm
    sch = tvm.s_tir.Schedule(mod)
    sch.transform_layout(sch.get_sblock("C"), ("write", 0), lambda i, j: (j, i))
    database = RecordDatabase(work_dir=tmp_path)
    workload = database.commit_workload(mod)
    database.commit_tuning_record(record(sch, workload, [0.002]))
    database.commit_tuning_record(record(sch, workload, [0.004]))
    database.compact()
    (merged,) = RecordDatabase(work_dir=tmp_path).get_all_tuning_records()
    assert "transform_layout" in str(merged.trace) and len(merged.run_secs) == 2


def test_the_build_weighs_a_tuned_record_by_its_median_as_the_database_ranks_it(tmp_path, gemm, llvm_target):
    """Two quick measurements and one on a busy machine: the record is worth 1.0 ms, so it beats a
    default of 2 ms (its mean, 3.7 ms, would keep the default)."""
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm import RecordDatabase
    from kb_tvm.model_tuning.record_choice import better_than_default

    mod, _, tiled, record = gemm
    database = RecordDatabase(work_dir=tmp_path)
    workload = database.commit_workload(mod)
    for seconds in (0.0010, 0.0010, 0.0090):
        database.commit_tuning_record(record(tiled, workload, [seconds]))
    task = ms.ExtractedTask("main", mod, llvm_target, [mod], 1)
    chosen, used = better_than_default(database, [task], llvm_target, {"main": 0.002})
    assert used == {"main": pytest.approx(0.001)}
    assert str(chosen.query_tuning_record(mod, llvm_target, "main").trace) == str(tiled.trace)
