"""Reports: metric names, compatibility names, paired differences, JSON and PNG files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pdbgym.divergence.estimators import kl_terms
from pdbgym.divergence.render import plot_report, report_table, write_report
from pdbgym.divergence.report import ReportConfig, SampleSet, StudentScores, build_report


def sample_set(rng, shift, n_tasks=5, per_task=2, with_extreme=False):
    tasks, teacher, student = [], [], []
    for task in range(n_tasks):
        for _ in range(per_task):
            lt = -rng.exponential(1.0, size=30)
            ls = lt + shift + rng.normal(0, 0.3, size=30)
            if with_extreme:
                ls[0] = lt[0] - 25.0
            tasks.append(f"task{task}")
            teacher.append(lt)
            student.append(np.minimum(ls, 0.0))
    return SampleSet(tasks, teacher, student)


@pytest.fixture(scope="module")
def report():
    rng = np.random.default_rng(0)
    near = StudentScores("near", sample_set(rng, -0.1), sample_set(rng, -0.1))
    far = StudentScores("far", sample_set(rng, -0.8, with_extreme=True))
    return build_report([near, far], ReportConfig(n_resamples=300))


def test_metrics_are_named_by_direction_estimator_and_aggregation(report):
    near, far = report["students"]
    assert "kl_teacher_student/k3/token_mean" in near["metrics"]
    assert "kl_student_teacher/k1/sequence_sum" in near["metrics"]
    assert "jsd/token_mean" in near["metrics"] and "jsd/sequence" in near["metrics"]
    assert not any(key.startswith(("kl_student_teacher", "jsd")) for key in far["metrics"])


def test_compat_names_are_exactly_the_documented_metrics(report):
    near, far = report["students"]
    assert near["compat"]["kl_fwd_mean"] == near["metrics"]["kl_teacher_student/k3/token_mean"]["value"]
    assert near["compat"]["kl_back_mean"] == near["metrics"]["kl_student_teacher/k3/token_mean"]["value"]
    assert near["compat"]["jsd_mean"] == near["metrics"]["jsd/token_mean"]["value"]
    assert far["compat"]["kl_back_mean"] is None and far["compat"]["jsd_mean"] is None


def test_kl_fwd_value_is_the_k3_token_mean_over_teacher_samples():
    rng = np.random.default_rng(1)
    samples = sample_set(rng, -0.3)
    report = build_report([StudentScores("s", samples)], ReportConfig(n_resamples=50))
    d = np.concatenate([s - t for s, t in zip(samples.student_logprobs, samples.teacher_logprobs, strict=True)])
    assert report["students"][0]["compat"]["kl_fwd_mean"] == pytest.approx(kl_terms(d, "k3").mean())


def test_extreme_ratios_are_reported_and_paired_differences_rank_students(report):
    near, far = report["students"]
    assert far["teacher_samples"]["extreme_share"] == pytest.approx(1 / 30)
    assert near["teacher_samples"]["extreme_share"] == 0.0
    row = next(r for r in report["paired_differences"] if r["metric"] == "kl_teacher_student/k3/token_mean")
    assert (row["a"], row["b"]) == ("near", "far")
    assert row["ci_high"] < 0 and row["n_tasks"] == 5


def test_duplicate_names_are_refused():
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError, match="unique"):
        build_report([StudentScores("x", sample_set(rng, 0)), StudentScores("x", sample_set(rng, 0))])


def test_json_and_png_are_written(report, tmp_path):
    write_report(report, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "pdbgym.divergence/1"
    plot_report(report, tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report_table(report).row_count == 2
