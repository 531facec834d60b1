import pytest

from kb_tvm.allocation import TaskStats, apply_choice, choose_next, op_kind, predicted_improvement, similarity_graph


def simulate(tasks, latency_curves, budget_seconds, batch_seconds=10.0, **kwargs):
    """Run the allocation against known latency curves: seconds are simulated, the decisions real."""
    spent = 0.0
    picks = []
    while spent < budget_seconds:
        choice = choose_next(tasks, default_batch_seconds=batch_seconds, seconds_left=budget_seconds - spent, **kwargs)
        apply_choice(tasks, choice)  # as KBTaskScheduler does
        if choice.task is None:
            break
        task = tasks[choice.task]
        curve = latency_curves[choice.task]
        task.record_batch(batch_seconds, 16, curve[min(task.batches, len(curve) - 1)])
        picks.append(choice.task)
        spent += batch_seconds
    return picks, spent


def test_the_hot_task_gets_more_seconds_and_trivial_ones_only_a_floor():
    tasks = [TaskStats("fused_matmul_add", weight=1, flop=2e9), TaskStats("fused_softmax", weight=1, flop=1e7),
             TaskStats("add", weight=1, flop=1e5)]
    curves = [[10e-3 * 0.8**k for k in range(40)], [1e-3 * 0.9**k for k in range(40)], [1e-5] * 40]
    picks, spent = simulate(tasks, curves, budget_seconds=200)
    assert picks[:3] == [0, 1, 2]  # bottleneck analysis: one batch each, biggest first
    assert tasks[0].seconds > tasks[1].seconds > tasks[2].seconds
    assert tasks[2].retired.startswith("trivial") and tasks[2].batches == 1
    assert spent <= 200
    assert tasks[0].latency < tasks[0].latency_before


def test_retired_tasks_get_no_more_seconds():
    tasks = [TaskStats("matmul", weight=1, flop=1e9), TaskStats("conv2d", weight=1, flop=1e9)]
    curves = [[5e-3] * 60, [5e-3 * 0.85**k for k in range(60)]]  # the matmul never improves
    picks, _ = simulate(tasks, curves, budget_seconds=400, min_gain_left=0.2)
    assert tasks[0].retired is not None and "expected gain" in tasks[0].retired
    retired_at = max(i for i, p in enumerate(picks) if p == 0)
    assert all(p == 1 for p in picks[retired_at + 1:]) and len(picks) > retired_at + 1


def test_nothing_worth_seconds_ends_the_allocation():
    tasks = [TaskStats("matmul", weight=1, flop=1e9)]
    picks, spent = simulate(tasks, [[5e-3] * 40], budget_seconds=1000, min_gain_left=0.5)
    assert tasks[0].retired and spent < 1000
    assert choose_next(tasks, default_batch_seconds=10, seconds_left=300).task is None


def test_the_retirement_floor_weighs_the_seconds_left():
    # the 10-min CPU run: the MLP, 40% of model time, gaining ~1e-4 of model time per second;
    # that pays with 500 s left and does not with 30 s left
    def tasks():
        mlp = TaskStats("fused_matmul3_erf", weight=1, flop=1e9, latency_default=4e-5)
        rest = TaskStats("fused_conv2d", weight=1, flop=1e9, latency_default=6e-5)
        for task in (mlp, rest):
            task.record_batch(10.0, 16, task.latency_default)
            task.improvements = [0.001] * 18  # a long, flat tail: the prior has faded
        return [mlp, rest]
    early = choose_next(tasks(), default_batch_seconds=10, seconds_left=500)
    assert early.task is not None and early.retired == {}
    assert 5e-5 < early.gain_per_second[0] < 2e-4
    late = choose_next(tasks(), default_batch_seconds=10, seconds_left=30)
    assert late.task is None and "in the 30 s left" in late.retired[0]


def test_similar_tasks_inform_each_others_predicted_improvement():
    assert op_kind("fused_matmul_add3") == "matmul" and op_kind("conv2d_nchw") == "conv"
    tasks = [TaskStats("fused_matmul_add", 1, 1e9), TaskStats("fused_matmul1", 1, 2e9),
             TaskStats("fused_matmul_relu", 1, 1e12), TaskStats("softmax", 1, 1e9)]
    graph = similarity_graph(tasks)
    assert graph.has_edge(0, 1) and not graph.has_edge(0, 2) and not graph.has_edge(0, 3)
    fast, slow = TaskStats("matmul", 1, 1e9), TaskStats("matmul", 1, 1e9)
    fast.improvements, slow.improvements = [0.5], [0.01]
    fresh = TaskStats("matmul", 1, 1e9)
    assert predicted_improvement(fresh, [fast.improvements]) > predicted_improvement(fresh, [slow.improvements])
    assert predicted_improvement(fresh, []) == pytest.approx(0.3)
    # neighbours that gained nothing at this point lower the prediction but do not zero it
    assert 0 < predicted_improvement(fresh, [[0.0], [0.0]]) < predicted_improvement(fresh, [])


def test_failed_first_batch_retires_the_task():
    tasks = [TaskStats("matmul", 1, 1e9)]
    tasks[0].record_batch(10.0, 8, None)
    choice = choose_next(tasks, default_batch_seconds=10, seconds_left=300)
    assert choice.task is None and "no candidate built" in choice.retired[0]


def test_default_schedule_timings_let_trivial_tasks_skip_tuning_and_order_the_hot_ones():
    # weight x default latency: the matmul is 80% of model time, the transpose 0.1%
    tasks = [TaskStats("transpose", weight=2, flop=1e4, latency_default=1e-6),
             TaskStats("fused_matmul_add", weight=1, flop=1e9, latency_default=1.6e-3),
             TaskStats("softmax", weight=1, flop=1e8, latency_default=4e-4)]
    choice = choose_next(tasks, default_batch_seconds=10, seconds_left=300)
    assert choice.task == 1 and choice.why.startswith("first batch")  # the most model time first
    assert set(choice.retired) == {0} and "default schedule" in choice.retired[0] and choice.parked == {0}
    apply_choice(tasks, choice)
    tasks[1].record_batch(10.0, 16, 0.4e-3)
    assert choose_next(tasks, default_batch_seconds=10, seconds_left=300).task == 2
    assert tasks[0].batches == 0  # kept its default schedule, no seconds spent


def test_a_first_batch_slower_than_the_default_keeps_the_default_as_latency():
    task = TaskStats("fused_matmul_add", weight=1, flop=1e9, latency_default=1e-3)
    task.record_batch(10.0, 16, 3e-3)  # the build would keep the default schedule
    assert task.latency_before == pytest.approx(1e-3) and task.latency == pytest.approx(1e-3)
    assert task.behind == pytest.approx(3.0)
    task.record_batch(10.0, 16, 0.5e-3)
    # the search's own curve (3 -> 0.5 ms); the model's latency went 1 -> 0.5 ms
    assert task.latency == pytest.approx(0.5e-3) and task.improvements == [pytest.approx(5 / 6)]
    assert task.behind == 1.0


def test_a_search_far_behind_the_kernel_in_use_gets_no_more_batches_one_close_behind_does():
    from kb_tvm.allocation import catch_up_gain

    assert catch_up_gain(1.0, [0.3, 0.1]) == (pytest.approx(0.3), 1)  # leading: its next batch's gain
    fading = [0.3 / (1 + k) for k in range(8)]  # the prior's curve, with nothing better known
    assert catch_up_gain(3.0, fading)[0] == 0.0  # 3 x 0.7 x 0.85 x ... x 0.96 > 1: never catches up
    assert catch_up_gain(3.0, [0.3] * 8)[0] > 0  # 3 x 0.7^4 < 1: a search that keeps its pace does
    gain, batches = catch_up_gain(1.2, [0.3, 0.2, 0.1])
    assert batches == 2 and gain == pytest.approx((1 - 1.2 * 0.7 * 0.8) / 2)

    # a decoder on a GPU: each GEMM runs a kernel family's kernel (its "default" here), which
    # MetaSchedule's first batch is 3x behind; the norm's search leads its default
    def tasks():
        gemm = TaskStats("fused_matmul_cast", weight=1, flop=1e10, latency_default=0.1e-3)
        norm = TaskStats("fused_mean_add_sqrt", weight=1, flop=1e6, latency_default=0.02e-3)
        gemm.record_batch(10.0, 64, 0.3e-3)
        norm.record_batch(10.0, 64, 0.018e-3)
        return [gemm, norm]

    choice = choose_next(tasks(), default_batch_seconds=10, seconds_left=200)
    assert choice.task == 1 and choice.gain_per_second[0] == 0.0 and "expected gain" in choice.retired[0]
    close = tasks()
    close[0].record_batch(10.0, 64, 0.11e-3)  # one batch later it is 1.1x behind, gaining fast
    assert choose_next(close, default_batch_seconds=10, seconds_left=200).gain_per_second[0] > 0


def test_curves_borrowed_from_similar_workloads_tuned_before_steer_the_allocation():
    # two equal tasks, no history in this model; one resembles workloads that kept improving
    promising = TaskStats("fused_matmul_add", weight=1, flop=1e9, latency_default=1e-3)
    flat = TaskStats("conv2d", weight=1, flop=1e9, latency_default=1e-3)
    promising.borrowed_improvements = [[0.4, 0.3, 0.2]]
    flat.borrowed_improvements = [[0.01, 0.0, 0.0]]
    for task in (promising, flat):
        task.record_batch(10.0, 16, 1e-3)
    choice = choose_next([flat, promising], default_batch_seconds=10, seconds_left=300)
    assert choice.task == 1 and choice.gain_per_second[1] > 10 * choice.gain_per_second[0]


def test_a_task_skipped_as_trivial_gets_seconds_once_the_others_made_it_a_bottleneck():
    # untuned, the small matmul is 1.5% of model time: it keeps its default schedule; once the
    # big one is 20x faster it is a quarter of model time and gets tuned after all
    tasks = [TaskStats("fused_matmul_big", weight=1, flop=1e10, latency_default=10e-3),
             TaskStats("fused_matmul_small", weight=1, flop=1e7, latency_default=0.15e-3)]
    curves = [[10e-3 * 0.5**k for k in range(5)] + [0.5e-3] * 40, [0.15e-3 * 0.8**k for k in range(40)]]
    first = choose_next(tasks, default_batch_seconds=10, seconds_left=300)
    assert first.task == 0 and first.retired[1].startswith("trivial") and first.parked == {1}
    picks, _ = simulate(tasks, curves, budget_seconds=300)
    assert tasks[1].batches >= 2 and tasks[1].latency < 0.15e-3
    assert picks.index(1) == 2  # once the big one went 10 -> 5 ms: the small one is then 2.9%
    # were the big one slow again
    tasks[0].latency, tasks[1].retired, tasks[1].parked = 10e-3, "trivial: 1.5% of model time", True
    assert choose_next(tasks, default_batch_seconds=10, seconds_left=300).revived == {}


def test_a_revived_task_whose_search_cannot_match_its_default_gets_two_batches_not_more():
    # a layer norm: 1.5% of model time untuned, revived once the matmul got fast; its default
    # schedule is near its floor, and the search never matches it
    tasks = [TaskStats("fused_matmul_big", weight=1, flop=1e10, latency_default=10e-3),
             TaskStats("layer_norm", weight=1, flop=1e6, latency_default=0.15e-3)]
    curves = [[10e-3 * 0.5**k for k in range(5)] + [0.5e-3] * 40, [0.2e-3] * 40]
    picks, _ = simulate(tasks, curves, budget_seconds=300)
    assert tasks[1].revivals == 1
    assert picks.count(1) == 2 and tasks[1].latency == pytest.approx(0.15e-3)
    assert tasks[1].retired.startswith("its default schedule is unbeaten after 2 batches (best tuned 1.33x")
    # the same task, once its search beats the default, keeps getting seconds
    tasks = [TaskStats("fused_matmul_big", weight=1, flop=1e10, latency_default=10e-3),
             TaskStats("layer_norm", weight=1, flop=1e6, latency_default=0.15e-3)]
    curves[1] = [0.2e-3, 0.14e-3, 0.12e-3] + [0.1e-3] * 40
    picks, _ = simulate(tasks, curves, budget_seconds=300)
    assert picks.count(1) > 2


def test_tasks_with_a_batch_in_flight_are_neither_chosen_nor_retired():
    # two devices: the hot task's batch is out, so the next device gets the next task
    tasks = [TaskStats("fused_matmul_add", weight=1, flop=2e9, latency_default=8e-3),
             TaskStats("fused_conv2d", weight=1, flop=1e9, latency_default=4e-3),
             TaskStats("add", weight=1, flop=1e5, latency_default=1e-6)]
    assert choose_next(tasks, default_batch_seconds=10, seconds_left=100).task == 0
    choice = choose_next(tasks, default_batch_seconds=10, seconds_left=100, busy=frozenset({0}))
    assert choice.task == 1 and 2 in choice.retired  # the trivial one still retires; the busy one is left alone
    tasks[1].record_batch(10, 16, 3.9e-3)  # a little gain: with a moment left it would retire...
    assert 1 in choose_next(tasks, default_batch_seconds=10, seconds_left=0.1, busy=frozenset({0})).retired
    choice = choose_next(tasks, default_batch_seconds=10, seconds_left=0.1, busy=frozenset({0, 1}))
    assert choice.task is None and choice.retired.keys() == {2}  # ...but not while its next batch is out


def _flat_ffn(ceiling_s):
    """The CPU BERT layer's FFN matmul (issue 37): the model's largest task, gaining little per
    batch, at 62 GFLOP/s where the machine does ~190 (a third of its ceiling, 0.35 ms)."""
    ffn = TaskStats("fused_matmul_add_gelu", weight=1, flop=6.7e7, latency_default=1.08e-3, ceiling_s=ceiling_s)
    ffn.record_batch(10.0, 16, ffn.latency_default)
    ffn.improvements = [0.0005] * 18
    return [ffn]


def test_a_task_far_below_its_ceiling_is_held_while_a_tenth_of_the_budget_is_left():
    # at 3% of model time to gain in the seconds left, under a 5% floor: its pace alone would retire it
    held = choose_next(_flat_ffn(0.35e-3), default_batch_seconds=10, seconds_left=161, seconds_total=300,
                       min_gain_left=0.05)
    assert held.task == 0 and held.retired == {}
    assert "expected gain" in held.held[0] and "at 32% of its ceiling: kept" in held.held[0]
    # the last tenth of the budget: its pace decides again
    late = choose_next(_flat_ffn(0.35e-3), default_batch_seconds=10, seconds_left=29, seconds_total=300,
                       min_gain_left=0.05)
    assert late.task is None and "expected gain" in late.retired[0] and late.held == {}


def test_a_task_near_its_ceiling_or_without_one_retires_for_its_pace():
    for ceiling_s in (0.8e-3, None):  # at 74% of its ceiling; no ceiling known (a GPU)
        choice = choose_next(_flat_ffn(ceiling_s), default_batch_seconds=10, seconds_left=161, seconds_total=300,
                             min_gain_left=0.05)
        assert choice.task is None and "expected gain" in choice.retired[0] and choice.held == {}
    assert _flat_ffn(0.8e-3)[0].of_ceiling == pytest.approx(0.8e-3 / 1.08e-3)
