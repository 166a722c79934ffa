"""GRPO rewards: outcome-dominated, tampered lowest and counted, pdb use never rewarded."""

import pytest

from pdbgym.errors import PdbgymError
from pdbgym.train.grpo.rewards import (
    MAX_SHAPED_WEIGHT,
    TAMPERED_REWARD,
    RewardConfig,
    outcome_reward,
    tampered_count,
)


def facts(passed, reasons, rates):
    return {"final_test_passed": passed, "termination_reason": reasons, "valid_tool_call_rate": rates}


def test_outcome_is_the_graded_result_not_the_claim():
    assert outcome_reward([True, False, False], ["solved", "finish_unresolved", "budget"]) == [1.0, 0.0, 0.0]


def test_tampered_gets_the_lowest_total_whatever_the_shaping_and_is_counted():
    config = RewardConfig(format_weight=MAX_SHAPED_WEIGHT)
    rows = facts([True, False, False, True], ["tampered", "other", "finish_unresolved", "solved"], [1.0, 0.0, 1.0, 1.0])
    totals = config.total(rows)
    assert totals[0] == TAMPERED_REWARD
    assert totals[0] < min(totals[1:])
    # even a tampered episode that "passed" (forged results) earns nothing from its claim
    assert tampered_count(termination_reason=rows["termination_reason"]) == [1.0, 0.0, 0.0, 0.0]


def test_solving_beats_any_shaped_total():
    config = RewardConfig(format_weight=MAX_SHAPED_WEIGHT)
    solved_sloppy, unsolved_tidy = config.total(facts([True, False], ["solved", "finish_unresolved"], [0.0, 1.0]))
    assert solved_sloppy > unsolved_tidy


def test_debugger_use_is_never_rewarded():
    config = RewardConfig(format_weight=0.1)
    base = facts([False, True], ["budget", "solved"], [0.5, 1.0])
    heavy_pdb = {**base, "pdb_calls": [40, 40], "debugger_steps": [12, 12]}
    assert config.total(base) == config.total(heavy_pdb)


def test_shaped_weight_above_cap_is_refused():
    with pytest.raises(PdbgymError, match="outweigh"):
        RewardConfig(format_weight=0.5)


def test_each_term_is_its_own_trl_reward_function():
    functions, weights = RewardConfig(0.05).functions()
    assert [f.__name__ for f in functions] == ["outcome", "format", "tampered"]
    assert weights == [1.0, 0.05, 0.0]
