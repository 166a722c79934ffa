"""The seed recipe's pieces against their formulas (pdbgym.train.grpo.schedules)."""

import math

import pytest

from pdbgym.errors import PdbgymError
from pdbgym.train.grpo.schedules import (
    AdaptiveKLController,
    TurnBudgetCurriculum,
    anchor_weight,
    replay_fraction,
    replayed_in_group,
)


def test_kl_controller_follows_ziegler_formula():
    controller = AdaptiveKLController(beta=0.1, target_kl=0.05, horizon=1000)
    beta = 0.1
    for kl, n in [(0.05, 16), (0.10, 16), (0.0, 32), (0.055, 8), (1.0, 64)]:
        error = min(max(kl / 0.05 - 1, -0.2), 0.2)
        beta = beta * (1 + error * n / 1000)
        assert controller.update(kl, n) == pytest.approx(beta, rel=1e-12)
    # at target nothing moves; above target beta grows, below it shrinks, each clipped at +-20% * n/horizon
    steady = AdaptiveKLController(0.2, 0.05, 100)
    assert steady.update(0.05, 50) == pytest.approx(0.2)
    assert AdaptiveKLController(0.2, 0.05, 100).update(10.0, 50) == pytest.approx(0.2 * 1.1)
    assert AdaptiveKLController(0.2, 0.05, 100).update(0.0, 50) == pytest.approx(0.2 * 0.9)


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
    # floor(f * G + 0.5), never the whole group
    assert [replayed_in_group(s, 8, 0.5, 20) for s in (0, 5, 10, 15, 19, 20)] == [4, 3, 2, 1, 0, 0]
    assert replayed_in_group(0, 2, 0.9, 10) == 1
    with pytest.raises(PdbgymError):
        replay_fraction(0, 1.0, 10)
