"""The decision log: a file per task, which a resumed search reads back."""


def test_a_task_name_too_long_for_a_file_name_gets_a_log_its_own(tmp_path):
    """Relax fuses an im2col of a 7x7 convolution into one task named after its 49 slices."""
    from kb_tvm.decision_log import DecisionLog, earlier_events

    long_a = "fused_pad_" + "_".join(f"strided_slice{i}" for i in range(49)) + "_stack_reshape"
    long_b = long_a.replace("stack", "concat")
    for name in (long_a, long_b):
        DecisionLog.for_task(tmp_path, name).write("start", task=name)
    paths = sorted(tmp_path.iterdir())
    assert len(paths) == 2 and all(len(p.name) < 255 for p in paths)
    assert [e["task"] for e in earlier_events(tmp_path, long_a)] == [long_a]  # a resume finds its own
