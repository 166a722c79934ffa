"""The seed recipe's pieces against their formulas (pdbgym.train.grpo.schedules)."""

import math
from pathlib import Path

import pytest

from pdbgym.errors import PdbgymError
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.grpo.schedules import (
    AdaptiveKLController,
    TurnBudgetCurriculum,
    anchor_weight,
    replay_fraction,
    replayed_per_group,
)


def test_kl_controller_follows_ziegler_formula_per_step():
    controller = AdaptiveKLController(beta=0.1, target_kl=0.05, horizon_steps=4)
    beta = 0.1
    for kl in (0.05, 0.10, 0.0, 0.055, 1.0):
        error = min(max(kl / 0.05 - 1, -0.2), 0.2)
        beta = beta * (1 + error / 4)
        assert controller.update(kl) == pytest.approx(beta, rel=1e-12)
    # at target nothing moves; above target beta grows, below it shrinks, each clipped at +-20% / horizon
    steady = AdaptiveKLController(0.2, 0.05, 2)
    assert steady.update(0.05) == pytest.approx(0.2)
    assert AdaptiveKLController(0.2, 0.05, 2).update(10.0) == pytest.approx(0.2 * 1.1)
    assert AdaptiveKLController(0.2, 0.05, 2).update(0.0) == pytest.approx(0.2 * 0.9)


def test_kl_leash_pulls_at_its_defaults():
    """At the default horizon a KL twice the target for 20 steps raises beta by about half (Ziegler's
    10,000-sequence horizon at 8 sequences a step moved it by 0.3%), and 0.2/horizon a step is the most."""
    from pdbgym.train.grpo.config import GRPORunConfig

    config = GRPORunConfig(policy="embedded", tasks="builtin", out=Path("unused"))
    controller = AdaptiveKLController(config.beta, config.target_kl, config.kl_horizon_steps)
    assert controller.max_step_change == pytest.approx(0.02)
    for _ in range(20):
        controller.update(2 * config.target_kl)
    assert controller.beta / config.beta == pytest.approx(1.02 ** 20) and controller.beta / config.beta > 1.4
    for _ in range(20):
        controller.update(0.0)
    assert controller.beta < config.beta * 1.02 ** 20 * 0.98 ** 19


def test_kl_controller_refuses_nonpositive_settings():
    with pytest.raises(PdbgymError, match="--kl-mode fixed"):
        AdaptiveKLController(beta=0.0)


def test_curriculum_schedule_is_a_floored_linear_ramp():
    curriculum = TurnBudgetCurriculum("schedule", start=10, end=30, ramp_steps=100)
    for step in (0, 1, 4, 5, 49, 50, 99, 100, 500):
        assert curriculum.budget(step) == 10 + math.floor(20 * min(1, step / 100))
    assert curriculum.budget(0) == 10 and curriculum.budget(100) == 30


def test_curriculum_by_solve_rate_grows_only_on_success_and_caps():
    curriculum = TurnBudgetCurriculum("solve_rate", start=4, end=9, threshold=0.5, increment=2)
    assert curriculum.budget(0) == 4
    curriculum.observe(0.49)
    assert curriculum.budget(1) == 4
    curriculum.observe(0.5)
    assert curriculum.budget(2) == 6
    for _ in range(5):
        curriculum.observe(1.0)
    assert curriculum.budget(3) == 9
    with pytest.raises(PdbgymError):
        TurnBudgetCurriculum("sometimes")


def test_anchor_weight_decays_linearly_to_zero():
    assert [anchor_weight(s, 0.2, 10) for s in (0, 5, 10, 20)] == pytest.approx([0.2, 0.1, 0.0, 0.0])
    assert anchor_weight(1000, 0.2, 0) == 0.2  # no decay
    assert anchor_weight(3, 0.0, 10) == 0.0


def test_replay_fraction_and_count_per_group():
    assert [replay_fraction(s, 0.5, 20) for s in (0, 10, 20, 30)] == pytest.approx([0.5, 0.25, 0.0, 0.0])
    assert replay_fraction(100, 0.25, 0) == 0.25
    # one group: floor(f * G + 0.5), never the whole group
    assert [replayed_per_group(s, 8, 1, 0.5, 20) for s in (0, 5, 10, 15, 19, 20)] == [[4], [3], [2], [1], [0], [0]]
    assert replayed_per_group(0, 2, 3, 0.9, 10) == [1, 1, 1]
    with pytest.raises(PdbgymError):
        replay_fraction(0, 1.0, 10)


def test_replay_at_the_defaults_and_the_experiments_settings_decays_step_by_step():
    """The step's share is rounded once and spread over its groups: a fraction below half an episode a
    group (0.125 of G = 4) still replays, and decays over the steps instead of stopping after the first."""
    # the experiment's settings: G = 4, 8 groups a step, 0.125 decaying over 20 steps
    per_step = [replayed_per_group(s, 4, 8, 0.125, 20) for s in range(21)]
    assert [sum(c) for c in per_step] == [4, 4, 4, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0]
    assert per_step[0] == [0, 1, 0, 1, 0, 1, 0, 1] and all(max(c) <= 1 for c in per_step)
    # the defaults (GRPORunConfig): G = 8, one group a step, 0.25 over 20 steps
    defaults = GRPORunConfig(policy="p", tasks="t", out=Path("o"))
    counts = [replayed_per_group(s, defaults.group, defaults.tasks_per_step, defaults.replay_fraction,
                                 defaults.replay_decay_steps) for s in range(21)]
    assert [c[0] for c in counts] == [2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    # never a whole group, whatever the fraction
    assert replayed_per_group(0, 2, 5, 0.99, 0) == [1] * 5 and replayed_per_group(0, 1, 4, 0.5, 0) == [0] * 4


def test_replay_takes_only_whole_episodes_that_ended_in_a_passing_submit_within_the_cap():
    from pdbgym.train.corpus.example import Example
    from pdbgym.train.grpo.data import ReplayPool

    def example(task: str, **facts) -> Example:
        ids = facts.pop("ids", 40)
        return Example(**{"instance_id": task, "dataset": "d", "sample_idx": 0, "source": "test",
                          "input_ids": list(range(ids)), "assistant_masks": [0] * 10 + [1] * (ids - 10),
                          "solved": True, "truncated": False, "termination_reason": "solved", **facts})

    pool = ReplayPool([
        example("a"),
        example("a", truncated=True),  # a prefix cut by --overlength truncate: it never submitted
        example("b", solved=False, termination_reason="budget"),
        example("b", termination_reason="budget"),  # marked solved by a later test run, but not by its submit
        example("c", ids=5000),  # longer than the run's episodes may be
        example("d", assistant_masks=[0] * 40),
    ], max_tokens=4096)
    assert {task: len(found) for task, found in pool.by_task.items()} == {"a": 1}
    assert pool.refused == {"truncated": 1, "unsolved": 1, "not ended by a passing submit": 1,
                            "longer than --max-context-tokens": 1, "no loss ids": 1}
    assert len(pool.take("a", 3)) == 3 and pool.take("c", 2) == []  # nothing of c is replayed
