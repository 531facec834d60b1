from kb_tvm.bench import best_at, summarize, time_to_reach

KB = [{"seconds": 50, "best_ms": 2.0}, {"seconds": 100, "best_ms": 1.0}, {"seconds": 150, "best_ms": 0.9}]
STOCK = [{"seconds": 80, "best_ms": 3.0}, {"seconds": 160, "best_ms": 1.5}]


def test_time_to_reach_and_best_at_read_anytime_curves():
    assert time_to_reach(KB, 1.5) == 100
    assert time_to_reach(KB, 0.5) is None
    assert best_at(KB, 120) == 1.0 and best_at(KB, 10) is None


def test_summary_compares_two_finished_runs_only():
    run = {"done": True, "budget_s": 200, "trials": 10, "failed": 2}
    summary = summarize({"kb": {**run, "curve": KB, "final_ms": 0.9},
                         "evolutionary": {**run, "curve": STOCK, "final_ms": 1.5}})
    assert summary["kb_vs_stock"] == 0.6
    assert summary["kb_seconds_to_reach_stock_best"] == 100
    assert summary["kb_reach_fraction_of_budget"] == 0.5
    assert summary["kb_failed_fraction"] == 0.2
    assert summarize({"kb": {**run, "curve": KB, "final_ms": 0.9}}) == {}
