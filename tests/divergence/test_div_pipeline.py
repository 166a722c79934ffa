"""Whole runs on tiny saved models: cache-only, student samples + teacher, noise floor, resume."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from div_models import make_record, tiny_model
from test_div_server import serve_completions

from pdbgym.divergence.pipeline import DivergenceInputError, DivergenceRun, run_divergence
from pdbgym.divergence.report import ReportConfig, build_report
from pdbgym.divergence.scoring import ScoringConfig, score_records
from pdbgym.modelload import load_causal_lm
from pdbgym.rollouts.record import LogprobSemantics

pytestmark = pytest.mark.slow
SEMANTICS = LogprobSemantics(engine="test", temperature=0.8, top_p=0.95, top_p_renormalized=False)
QUIET = ScoringConfig(show_progress=False)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    for name, seed in (("teacher", 0), ("student_a", 1), ("student_b", 2)):
        tiny_model("qwen3", seed=seed).save_pretrained(root / name)
    return root


@pytest.fixture(scope="module")
def teacher_cache(models):
    """Records whose cached log-probs ARE the teacher's, so the teacher's noise floor must be ~0."""
    rng = np.random.default_rng(9)
    records = [make_record(rng, f"task{i % 3}", 6, 20 + 4 * i, sample_idx=i // 3, semantics=SEMANTICS)
               for i in range(6)]
    teacher = load_causal_lm(models / "teacher", device="cpu")
    for record, values in zip(records, score_records(teacher, records, SEMANTICS, QUIET), strict=True):
        logprobs = np.zeros(record.response_length)
        logprobs[np.array(record.loss_mask) == 1] = values
        record.rollout_log_probs = logprobs.tolist()
    return records


def test_cache_only_run_scores_each_student_against_the_cache(models, teacher_cache):
    run = DivergenceRun(teacher_cache, SEMANTICS, [str(models / "student_a"), str(models / "student_b")],
                        scoring=QUIET, device="cpu")
    scores = run_divergence(run)
    assert [s.name for s in scores] == ["student_a", "student_b"]
    assert all(s.student_samples is None for s in scores)
    student = load_causal_lm(models / "student_a", device="cpu")
    expected = score_records(student, teacher_cache, SEMANTICS, QUIET)
    for got, want in zip(scores[0].teacher_samples.student_logprobs, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_teacher_run_adds_student_samples_and_a_zero_noise_floor(models, teacher_cache, tmp_path):
    run = DivergenceRun(teacher_cache, SEMANTICS, [str(models / "student_a")], teacher=str(models / "teacher"),
                        max_new_tokens=6, noise_floor=True, scoring=QUIET, device="cpu", work_dir=tmp_path / "work")
    student, floor = run_divergence(run)
    assert floor.name == "teacher:teacher"
    np.testing.assert_allclose(np.concatenate(floor.teacher_samples.student_logprobs),
                               np.concatenate(floor.teacher_samples.teacher_logprobs), atol=1e-5)
    samples = student.student_samples
    assert samples is not None and len(samples.task_ids) == len(teacher_cache)
    assert all(1 <= len(values) <= 6 for values in samples.student_logprobs)
    report = build_report([student, floor], ReportConfig(n_resamples=100))
    entry = report["students"][0]
    assert entry["compat"]["kl_back_mean"] is not None and entry["compat"]["jsd_mean"] is not None
    assert entry["metrics"]["jsd/sequence"]["value"] <= np.log(2)  # an unbiased estimate, can be < 0
    assert report["students"][1]["compat"]["kl_fwd_mean"] == pytest.approx(0.0, abs=1e-5)


def test_resumed_run_reuses_stored_work_without_loading_models(models, teacher_cache, tmp_path):
    copies = tmp_path / "models"
    shutil.copytree(models, copies)
    kwargs = dict(teacher=str(copies / "teacher"), max_new_tokens=4, scoring=QUIET, device="cpu", work_dir=tmp_path / "work")
    first = run_divergence(DivergenceRun(teacher_cache, SEMANTICS, [str(copies / "student_b")], **kwargs))
    stored = sorted(p.name for p in (tmp_path / "work").iterdir())
    assert len([n for n in stored if n.startswith("scores-")]) == 2 and any(n.startswith("samples-") for n in stored)
    shutil.rmtree(copies)  # the models are gone: only stored results can answer now
    second = run_divergence(DivergenceRun(teacher_cache, SEMANTICS, [str(copies / "student_b")], **kwargs))
    for a, b in zip(first[0].student_samples.student_logprobs, second[0].student_samples.student_logprobs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_server_teacher_in_a_raw_transform_run(models, teacher_cache):
    raw = LogprobSemantics(engine="test", temperature=1.0)
    teacher = load_causal_lm(models / "teacher", device="cpu")
    server = serve_completions(teacher)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        scores = run_divergence(DivergenceRun(teacher_cache[:3], raw, [str(models / "student_a")], teacher=url,
                                              max_new_tokens=4, scoring=QUIET, device="cpu"))
    finally:
        server.shutdown()
    samples = scores[0].student_samples
    assert samples is not None
    for teacher_values, student_values in zip(samples.teacher_logprobs, samples.student_logprobs, strict=True):
        assert teacher_values.shape == student_values.shape and np.isfinite(teacher_values).all()
    assert not np.allclose(np.concatenate(samples.teacher_logprobs), np.concatenate(samples.student_logprobs))


def test_impossible_requests_are_refused_before_any_work(models, teacher_cache):
    with pytest.raises(DivergenceInputError, match="--student"):
        run_divergence(DivergenceRun(teacher_cache, SEMANTICS, []))
    with pytest.raises(DivergenceInputError, match="local teacher"):
        run_divergence(DivergenceRun(teacher_cache, SEMANTICS, ["missing"], teacher="http://127.0.0.1:9",
                                     noise_floor=True))
    with pytest.raises(DivergenceInputError, match="local teacher"):
        run_divergence(DivergenceRun(teacher_cache, SEMANTICS, ["missing"], rescore_teacher=True))
