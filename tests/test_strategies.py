"""Each strategy name runs the search it names, in tune-op and in a model tune alike (both ask
`make_search`), and the agent stays optional: without it the core imports and runs."""

import sys

import pytest

from kb_tvm.budget import TuningBudget
from kb_tvm.tuning import make_search


def test_each_strategy_name_makes_the_search_it_names():
    from tvm.s_tir import meta_schedule as ms

    from kb_tvm.agent import MacroPolicy
    from kb_tvm.search.strategy import KBSearch, TimeCappedSearch

    budget = TuningBudget("30s")
    kb, kb_cost = make_search("kb", budget, seed=3)
    agent, agent_cost = make_search("agent", budget)
    assert isinstance(kb, KBSearch) and kb.agent is None and kb.options.seed == 3
    assert isinstance(agent, KBSearch) and isinstance(agent.agent, MacroPolicy)
    assert kb_cost == agent_cost == "random"  # KBSearch trains its own model
    evolutionary, evolutionary_cost = make_search("evolutionary", budget)
    uniform, uniform_cost = make_search("random", budget)
    assert isinstance(evolutionary, TimeCappedSearch) and evolutionary_cost == "xgb"
    assert isinstance(evolutionary.inner, ms.search_strategy.EvolutionarySearch)
    assert isinstance(uniform, TimeCappedSearch) and uniform_cost == "random"
    assert isinstance(uniform.inner, ms.search_strategy.ReplayTrace)
    assert all(s.budget is budget for s in (kb, agent, evolutionary, uniform))  # one budget for the job


def test_an_unknown_strategy_is_refused_in_one_line_before_anything_is_written(tmp_path):
    from kb_tvm.model_tuning import tune_model
    from kb_tvm.tuning import tune_operator
    from kb_tvm.workloads import get_workload

    with pytest.raises(ValueError, match="unknown strategy 'beam': use one of kb, agent, evolutionary, random"):
        make_search("beam", TuningBudget("30s"))
    with pytest.raises(ValueError, match="unknown strategy 'beam'"):
        tune_operator(get_workload("gemm-128"), target=None, budget="5s", work_dir=tmp_path / "op", strategy="beam")
    with pytest.raises(ValueError, match="unknown strategy 'beam'"):
        tune_model(None, name="m", target=None, budget="5s", work_dir=tmp_path / "model", strategy="beam")
    assert not (tmp_path / "op").exists() and not (tmp_path / "model").exists()


def test_kb_search_neither_needs_nor_imports_the_agent(monkeypatch):
    from kb_tvm.search.strategy import KBSearch

    monkeypatch.setitem(sys.modules, "kb_tvm.agent", None)  # as if the agent were missing: imports fail
    search, _ = make_search("kb", TuningBudget("30s"))
    assert isinstance(search, KBSearch) and search.agent is None
    with pytest.raises(ImportError):
        make_search("agent", TuningBudget("30s"))


def test_kb_search_refuses_an_agent_that_cannot_choose_in_one_line():
    from kb_tvm import KBSearch

    with pytest.raises(ValueError, match=r"agent='explore': must be a kb_tvm.agent.MacroPolicy \(a callable"):
        KBSearch(budget="30s", agent="explore")
