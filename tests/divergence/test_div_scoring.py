"""The chunked scorer against a brute-force full-logit computation on tiny random models."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from div_models import VOCAB, make_record, tiny_model

from pdbgym.divergence.loading import VocabMismatchError
from pdbgym.divergence.scoring import (
    ScoringConfig,
    ScoringInputError,
    plan_batches,
    score_records,
    scored_positions,
)
from pdbgym.divergence.semantics import SemanticsError
from pdbgym.modelload import ModelLoadError, load_causal_lm
from pdbgym.rollouts.record import LogprobSemantics

RAW = LogprobSemantics(engine="test", temperature=1.0)
QUIET = ScoringConfig(show_progress=False)


def brute_force(model, record, temperature: float, top_p: float = 1.0, renormalized: bool = False):
    """Full logits for the whole sequence, float64 numpy, explicit per-position nucleus."""
    with torch.no_grad():
        logits = model(torch.tensor([record.tokens])).logits[0].double().numpy()
    out = []
    for j in scored_positions(record):
        row = logits[j - 1] / temperature
        logp = row - np.log(np.exp(row - row.max()).sum()) - row.max()
        target = record.tokens[j]
        if renormalized and top_p < 1.0:
            order = np.argsort(-logp, kind="stable")
            probs = np.exp(logp[order])
            cumulative_before = np.concatenate([[0.0], np.cumsum(probs)[:-1]])
            nucleus = order[cumulative_before < top_p]
            if target in set(nucleus.tolist()):
                out.append(logp[target] - np.log(np.exp(logp[nucleus]).sum()))
            else:
                out.append(-np.inf)
        else:
            out.append(logp[target])
    return np.array(out)


@pytest.fixture(scope="module")
def qwen():
    return tiny_model("qwen3")


@pytest.fixture(scope="module")
def records():
    rng = np.random.default_rng(1)
    return [make_record(rng, f"task{i % 3}", 7 + 3 * i, 20 + 11 * i, sample_idx=i) for i in range(6)]


@pytest.mark.parametrize("kind", ["qwen3", "llama"])
def test_matches_brute_force_fp32(kind, records):
    model = qwen_or(kind)
    scored = score_records(model, records, RAW, QUIET)
    for record, values in zip(records, scored, strict=True):
        assert values.shape == (sum(record.loss_mask),)
        np.testing.assert_allclose(values, brute_force(model, record, 1.0), atol=1e-5, rtol=0)


def qwen_or(kind: str):
    return tiny_model(kind, seed=3)


def test_chunked_equals_unchunked_and_batching_does_not_matter(qwen, records):
    one_chunk = score_records(qwen, records, RAW, ScoringConfig(show_progress=False, logit_chunk_positions=10**6))
    tiny_chunks = score_records(qwen, records, RAW, ScoringConfig(show_progress=False, logit_chunk_positions=3,
                                                                  token_budget=10**6, max_padding_share=1.0))
    one_at_a_time = score_records(qwen, records, RAW, ScoringConfig(show_progress=False, token_budget=1))
    assert len(plan_batches([int(p[-1]) for p in map(scored_positions, records)], 10**6, 1.0)) == 1
    for a, b, c in zip(one_chunk, tiny_chunks, one_at_a_time, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)
        np.testing.assert_allclose(a, c, atol=1e-5, rtol=0)


def test_batches_respect_the_token_budget_and_the_padding_limit():
    assert plan_batches([10, 50, 0, 30, 45], token_budget=100, max_padding_share=0.5) == [[1, 4], [3, 0]]
    # 50 and 30 would pad 20 of 100 tokens: over a 10% limit, so 30 starts a new batch.
    assert plan_batches([10, 50, 0, 30, 45], token_budget=100, max_padding_share=0.1) == [[1, 4], [3], [0]]
    assert plan_batches([500, 20], token_budget=100) == [[0], [1]]


def test_masked_positions_are_ignored(qwen, records):
    record = records[2]
    baseline = score_records(qwen, [record], RAW, QUIET)[0]
    # Changing ids at mask-0 response positions AFTER the last scored token cannot change anything,
    # and mask-0 positions are never scored: the output has exactly sum(mask) entries.
    changed = make_copy(record)
    last = scored_positions(record)[-1]
    for j in range(last + 1, len(changed.tokens)):
        changed.tokens[j] = (changed.tokens[j] + 1) % VOCAB
    np.testing.assert_array_equal(score_records(qwen, [changed], RAW, QUIET)[0], baseline)
    # Flipping one mask bit to 0 removes exactly that position's value.
    dropped = make_copy(record)
    first = int(np.flatnonzero(np.array(record.loss_mask) == 1)[0])
    dropped.loss_mask[first] = 0
    if sum(dropped.loss_mask):
        np.testing.assert_allclose(score_records(qwen, [dropped], RAW, QUIET)[0], baseline[1:], atol=1e-5)


def make_copy(record):
    from pdbgym.rollouts.record import RolloutRecord

    return RolloutRecord.from_dict({k: (list(v) if isinstance(v, list) else v) for k, v in record.to_dict().items()})


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_temperature_scaling(qwen, records, temperature):
    semantics = LogprobSemantics(engine="test", temperature=temperature)
    scored = score_records(qwen, records[:3], semantics, QUIET)
    for record, values in zip(records[:3], scored, strict=True):
        np.testing.assert_allclose(values, brute_force(qwen, record, temperature), atol=1e-5, rtol=0)
    raw = score_records(qwen, records[:1], RAW, QUIET)[0]
    assert not np.allclose(raw, scored[0], atol=1e-3)


def test_top_p_renormalized_matches_explicit_nucleus(qwen, records):
    semantics = LogprobSemantics(engine="test", temperature=0.7, top_p=0.9, top_p_renormalized=True)
    scored = score_records(qwen, records, semantics, ScoringConfig(show_progress=False, logit_chunk_positions=7))
    expected = [brute_force(qwen, r, 0.7, 0.9, renormalized=True) for r in records]
    all_scored, all_expected = np.concatenate(scored), np.concatenate(expected)
    np.testing.assert_array_equal(np.isneginf(all_scored), np.isneginf(all_expected))
    assert np.isneginf(all_scored).any(), "random ids must fall outside some nuclei"
    assert np.isfinite(all_scored).any()
    finite = np.isfinite(all_expected)
    np.testing.assert_allclose(all_scored[finite], all_expected[finite], atol=1e-5, rtol=0)
    # Inside the nucleus the renormalized value is higher by -log Z > 0.
    unrenormalized = np.concatenate(score_records(qwen, records, LogprobSemantics("t", 0.7, 0.9, False), QUIET))
    assert np.all(all_scored[finite] >= unrenormalized[finite] - 1e-6)


def test_top_p_without_renormalization_is_plain_temperature(qwen, records):
    plain = score_records(qwen, records[:2], LogprobSemantics("t", 0.7), QUIET)
    nucleus = score_records(qwen, records[:2], LogprobSemantics("t", 0.7, 0.5, False), QUIET)
    for a, b in zip(plain, nucleus, strict=True):
        np.testing.assert_array_equal(a, b)


def test_out_of_vocab_ids_are_refused_before_scoring(qwen, records):
    bad = make_copy(records[0])
    bad.tokens[3] = VOCAB + 5
    with pytest.raises(VocabMismatchError, match="outside"):
        score_records(qwen, [bad], RAW, QUIET)
    declared = make_copy(records[0])
    declared.metadata["tokenizer"] = {"vocab_size": 151936}
    with pytest.raises(VocabMismatchError, match="151936"):
        score_records(qwen, [declared], RAW, QUIET)


@pytest.mark.parametrize(
    "semantics,match",
    [(LogprobSemantics("t", 0.0), "greedy"), (LogprobSemantics("t", 1.0, 1.5, True), "top_p")],
)
def test_unusable_transforms_are_refused(qwen, records, semantics, match):
    with pytest.raises(SemanticsError, match=match):
        score_records(qwen, records[:1], semantics, QUIET)


def test_load_errors_name_the_path(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_causal_lm(tmp_path / "nope")
    stray = tmp_path / "weights.bin"
    stray.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        load_causal_lm(stray)
    with pytest.raises(ModelLoadError, match="cannot load"):
        load_causal_lm(tmp_path)


def test_saved_model_round_trip(qwen, records, tmp_path):
    qwen.save_pretrained(tmp_path / "student")
    loaded = load_causal_lm(tmp_path / "student", device="cpu")
    assert next(loaded.parameters()).dtype == torch.float32
    a = score_records(qwen, records[:2], RAW, QUIET)
    b = score_records(loaded, records[:2], RAW, QUIET)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-6)


def test_a_first_token_without_context_is_refused(qwen, records):
    bare = make_copy(records[0])
    bare.tokens = bare.tokens[bare.prompt_len :]
    bare.prompt_len = 0
    bare.loss_mask[0] = 1
    with pytest.raises(ScoringInputError, match="no context"):
        score_records(qwen, [bare], RAW, QUIET)
