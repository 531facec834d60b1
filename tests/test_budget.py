import pytest

from kb_tvm.budget import TuningBudget, format_seconds, parse_budget


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("10m", 600), ("2h", 7200), ("1h30m", 5400), ("50h", 180000), ("1h 30m", 5400),
     ("2.5m", 150), (120, 120), (0.5, 0.5), ("45", 45)],
)
def test_parse_budget_accepts_the_documented_forms(text, seconds):
    assert parse_budget(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "10x", "30m1h", "1h1h", "-5", "0", "0s", "nan", "inf", True])
def test_parse_budget_rejects_bad_values_naming_the_forms(text):
    with pytest.raises(ValueError) as err:
        parse_budget(text)
    message = str(err.value)
    assert "\n" not in message and '"1h30m"' in message and repr(text) in message


class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_budget_counts_from_start_and_reports_spent_remaining_fraction():
    clock = FakeClock()
    budget = TuningBudget("1m", clock=clock)
    assert budget.spent == 0 and budget.remaining == 60 and not budget.started
    clock.now += 30  # time before start() does not count
    budget.start()
    clock.now += 15
    assert budget.spent == pytest.approx(15)
    assert budget.remaining == pytest.approx(45)
    assert budget.fraction_used == pytest.approx(0.25)
    budget.start()  # idempotent: the clock does not restart
    clock.now += 50
    assert budget.exhausted and budget.remaining == 0 and budget.fraction_used == 1.0


def test_budget_resumes_with_seconds_already_spent():
    clock = FakeClock()
    budget = TuningBudget(100, already_spent=40, clock=clock).start()
    clock.now += 10
    assert budget.spent == pytest.approx(50)
    with pytest.raises(ValueError, match="already_spent"):
        TuningBudget(100, already_spent=-1)


def test_format_seconds():
    assert format_seconds(9.04) == "9.0s"
    assert format_seconds(125) == "2m05s"
    assert format_seconds(5400) == "1h30m"


def test_a_shared_budget_gives_each_task_its_own_clock_bounded_by_the_jobs():
    now = [0.0]
    job = TuningBudget(100.0, clock=lambda: now[0])
    assert job.task("a") is job  # not shared: the task reads the job's budget
    job.share_among_tasks().start()
    a = job.task("a")
    assert job.task("a") is a and job.task("b") is not a
    now[0] = 50.0
    assert a.fraction_used == 0.0 and a.spent == 50.0 and a.remaining == 50.0 and not a.exhausted
    a.charge(10.0, expected_seconds=40.0)
    assert a.fraction_used == 0.25 and a.task_remaining == 30.0 and job.task_remaining == 50.0
    now[0] = 80.0
    assert a.task_remaining == 20.0  # never more than the job has left
    a.charge(60.0, expected_seconds=40.0)
    assert a.fraction_used == 1.0 and a.task_remaining == 0.0
    now[0] = 100.0
    assert a.exhausted
