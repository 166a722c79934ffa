"""Estimators against closed-form KL/JSD of categorical distributions, by seeded Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest

from pdbgym.divergence import estimators as est

N_SAMPLES = 400_000
Z = 4.5  # tolerance in standard errors; with a fixed seed the test is deterministic


@pytest.fixture(scope="module")
def pair():
    rng = np.random.default_rng(7)
    teacher = rng.dirichlet(np.full(8, 0.7))
    student = 0.6 * teacher + 0.4 * rng.dirichlet(np.full(8, 0.7))
    return np.log(teacher), np.log(student)


def kl(log_p, log_q):
    return float(np.sum(np.exp(log_p) * (log_p - log_q)))


def draws(log_p, seed):
    return np.random.default_rng(seed).choice(len(log_p), size=N_SAMPLES, p=np.exp(log_p))


def assert_within_se(terms, truth):
    mean, se = terms.mean(), terms.std(ddof=1) / np.sqrt(terms.size)
    assert abs(mean - truth) < Z * se, (mean, truth, se)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_teacher_samples_estimate_kl_teacher_student_unbiasedly(pair, estimator):
    lt, ls = pair
    x = draws(lt, 1)
    assert_within_se(est.kl_teacher_student_terms(lt[x], ls[x], estimator), kl(lt, ls))


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_student_samples_estimate_kl_student_teacher_unbiasedly(pair, estimator):
    lt, ls = pair
    x = draws(ls, 2)
    assert_within_se(est.kl_student_teacher_terms(ls[x], lt[x], estimator), kl(ls, lt))


def test_directions_differ_so_labels_matter(pair):
    lt, ls = pair
    assert abs(kl(lt, ls) - kl(ls, lt)) > 0.01


def test_k2_is_biased_and_its_bias_is_the_closed_form(pair):
    lt, ls = pair
    x = draws(lt, 3)
    terms = est.kl_teacher_student_terms(lt[x], ls[x], "k2")
    expected_k2 = float(np.sum(np.exp(lt) * 0.5 * (ls - lt) ** 2))
    assert_within_se(terms, expected_k2)
    se = terms.std(ddof=1) / np.sqrt(terms.size)
    assert abs(expected_k2 - kl(lt, ls)) > 10 * se
    assert np.all(terms >= 0)


def test_k3_is_nonnegative_and_k1_is_not(pair):
    lt, ls = pair
    x = draws(lt, 4)
    assert np.all(est.kl_teacher_student_terms(lt[x], ls[x], "k3") >= 0)
    assert np.any(est.kl_teacher_student_terms(lt[x], ls[x], "k1") < 0)


@pytest.mark.parametrize("estimator", ["k1", "k3"])
def test_jsd_from_both_sample_sets_matches_closed_form(pair, estimator):
    lt, ls = pair
    lm = np.logaddexp(lt, ls) - np.log(2)
    truth = 0.5 * kl(lt, lm) + 0.5 * kl(ls, lm)
    assert 0 <= truth <= np.log(2)
    xt, xs = draws(lt, 5), draws(ls, 6)
    teacher_half = est.jsd_half_terms(lt[xt], ls[xt], estimator)
    student_half = est.jsd_half_terms(ls[xs], lt[xs], estimator)
    value = est.jsd_from_halves(teacher_half.mean(), student_half.mean())
    se = 0.5 * np.hypot(teacher_half.std() / np.sqrt(N_SAMPLES), student_half.std() / np.sqrt(N_SAMPLES))
    assert abs(value - truth) < Z * se
    # Half the Jeffreys divergence is a different (larger) quantity: the estimator is not that.
    assert abs(value - 0.5 * (kl(lt, ls) + kl(ls, lt))) > 10 * se


def test_jsd_is_at_most_log2_even_for_disjoint_supports():
    lt = np.log(np.array([1.0, 1e-300]))
    ls = np.log(np.array([1e-300, 1.0]))
    lm = np.logaddexp(lt, ls) - np.log(2)
    truth = 0.5 * kl(lt, lm) + 0.5 * kl(ls, lm)
    assert truth == pytest.approx(np.log(2), abs=1e-9)
    sequence_terms = est.jsd_sequence_terms(np.array([-1.0, -500.0, 0.0]), np.array([-900.0, -1.0, 0.0]))
    assert np.all(sequence_terms <= np.log(2) + 1e-12)
    assert sequence_terms[0] == pytest.approx(np.log(2))
    assert sequence_terms[2] == pytest.approx(0.0)


def test_extreme_and_nonfinite_shares_are_counted_not_clamped():
    log_ratio = np.array([0.1, -25.0, 30.0, -np.inf, 2.0])
    assert est.extreme_share(log_ratio, threshold=20) == pytest.approx(3 / 5)
    assert est.nonfinite_share(log_ratio) == pytest.approx(1 / 5)
    k3 = est.kl_terms(log_ratio[:3], "k3")
    assert k3[2] == pytest.approx(np.expm1(30.0) - 30.0)  # no clamp to 10
    assert est.extreme_share(np.array([])) == 0.0


def test_unknown_estimator_is_refused():
    with pytest.raises(ValueError, match="unknown KL estimator"):
        est.kl_terms(np.zeros(3), "k4")  # type: ignore[arg-type]
