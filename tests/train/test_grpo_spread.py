"""Reward spread counted from the policy's own episodes, and a run record that says one thing about it."""

from __future__ import annotations

from pdbgym.train.grpo.choose import no_signal_warning, signal_counts
from pdbgym.train.grpo.spread import spread_steps, step_spread


def _episodes(task: str, played: list[bool], replayed: int = 0, tampered: int = -1) -> list[dict]:
    found = [{"task": task, "solved": True, "replayed": True, "reason": "solved"} for _ in range(replayed)]
    for i, solved in enumerate(played):
        found.append({"task": task, "solved": solved, "replayed": False,
                      "reason": "tampered" if i == tampered else ("solved" if solved else "turn_budget")})
    return found


def test_a_replayed_success_beside_played_failures_is_not_the_policys_spread():
    step = {"step": 1, "episodes": _episodes("a", [False, False, False], replayed=1)  # replay-made spread
            + _episodes("b", [True, False, False, False])  # the policy's own spread
            + _episodes("c", [True, True, True, True])}  # none
    assert step_spread(step) == {"groups": 3, "on_policy": 1, "replay_only": 1}
    only_replay = {"step": 2, "episodes": _episodes("a", [False, False, False], replayed=1) + _episodes("c", [False] * 4)}
    # a tampered episode (reward -1) beside unsolved ones (0) is spread too
    tampered = {"step": 3, "episodes": _episodes("d", [False, False, False, False], tampered=0)}
    assert spread_steps([step, only_replay, tampered]) == {"steps": 3, "on_policy": 2, "replay_only": 1}


def test_the_run_record_counts_on_policy_spread_and_keeps_trls_count_apart():
    rows = [{"step": 1, "frac_reward_zero_std": 0.5}, {"step": 2, "frac_reward_zero_std": 0.5}]
    outcomes = [{"step": s, "episodes": _episodes("a", [False, False, False], replayed=1)} for s in (1, 2)]
    # TRL saw spread at both steps; all of it came from the replayed trajectory
    assert signal_counts(rows, outcomes) == {"reward_signal_steps": 0, "replay_only_signal_steps": 2,
                                             "trl_reward_spread_steps": 2}
    assert signal_counts(rows, [])["reward_signal_steps"] == 2  # no outcomes.jsonl: TRL's count, said so apart


def test_a_zero_signal_warning_never_contradicts_the_registration():
    registered, kept = no_signal_warning(True, 2), no_signal_warning(False)
    assert "registered anyway" in registered and "not registered" not in registered
    assert "2 steps had spread only between replayed" in registered
    assert "not registered" in kept and "registered anyway" not in kept
