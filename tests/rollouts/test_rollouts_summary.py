"""Summary numbers on a hand-built cache, and the synthetic cache generator other packages rely on."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pdbgym.rollouts.cache import iter_cache, read_cache, write_cache
from pdbgym.rollouts.record import RolloutRecord
from pdbgym.rollouts.summary import summarize
from pdbgym.rollouts.synthetic import allot_terminations, make_synthetic_cache, make_synthetic_records
from pdbgym.rollouts.validate import validate_cache, validate_record
from pdbgym.termination import TERMINATION_REASONS


def hand_record(instance_id: str, prompt_len: int, mask: list[int], log_probs: list[float], reward: float,
                reason: str, sample_idx: int | None = None, dataset: str = "d1") -> RolloutRecord:
    metadata = {"_termination_reason": reason}
    if sample_idx is not None:
        metadata["_sample_idx"] = sample_idx
    return RolloutRecord(instance_id=instance_id, dataset=dataset, tokens=[7] * (prompt_len + len(mask)),
                         prompt_len=prompt_len, response_length=len(mask), loss_mask=mask,
                         rollout_log_probs=log_probs, reward_score=reward, metadata=metadata)


def test_summary_of_a_hand_built_cache(tmp_path: Path) -> None:
    records = [
        hand_record("a", 3, [1, 1, 0], [-1.0, -2.0, 0.0], 1.0, "solved", 0),
        hand_record("a", 2, [1, 0, 0, 1], [-0.5, 0.0, 0.0, -0.5], 0.0, "finish_unresolved", 1),
        hand_record("b", 5, [0, 1], [0.0, -4.0], 0.0, "ctx_overflow"),
        hand_record("c", 1, [1], [-1.0], 0.0, "crashed", dataset="d2"),
    ]
    summary = summarize(iter_cache(write_cache(tmp_path / "c", records)))
    assert (summary.instances, summary.samples) == (3, 4)
    assert (summary.prompt_tokens, summary.response_tokens, summary.total_tokens) == (11, 10, 21)
    assert summary.masked_tokens == 6 and summary.masked_fraction == 0.6
    assert summary.max_sequence_tokens == 7
    assert summary.solved_samples == 1 and summary.solve_rate == 0.25 and summary.instances_solved == 1
    assert summary.mean_masked_log_prob == (-1 - 2 - 0.5 - 0.5 - 4 - 1) / 6
    assert summary.datasets == {"d1": 2, "d2": 1}
    assert summary.termination_line() == "1 solved, 1 finish_unresolved, 1 ctx_overflow, 1 crashed"
    assert summary.to_dict()["termination_line"] == summary.termination_line()


def test_empty_summary_has_no_rates() -> None:
    summary = summarize([])
    assert summary.samples == 0 and np.isnan(summary.solve_rate) and summary.termination_line() == "no samples"


def test_synthetic_cache_has_the_teacher_mix_and_is_valid(tmp_path: Path) -> None:
    folder = make_synthetic_cache(tmp_path / "c", 50, 2, vocab=3000, lengths=(40, 400), seed=11)
    assert validate_cache(folder, vocab_size=3000) == []
    summary = summarize(read_cache(folder))
    assert summary.termination_line() == "30 solved, 48 finish_unresolved, 19 ctx_overflow, 1 budget, 2 other"
    assert summary.samples == 100 and summary.instances == 50 and summary.solve_rate == 0.3
    assert 0.05 < summary.masked_fraction < 0.95


def test_synthetic_records_look_like_agent_rollouts() -> None:
    records = make_synthetic_records(6, 3, vocab=1000, lengths=(300, 3000), seed=5)
    tool_output_runs = 0
    assert records[0].to_dict() == make_synthetic_records(6, 3, vocab=1000, lengths=(300, 3000), seed=5)[0].to_dict()
    assert records[0].tokens != make_synthetic_records(6, 3, vocab=1000, lengths=(300, 3000), seed=6)[0].tokens
    for record in records:
        assert validate_record(record, vocab_size=1000) == []
        assert 300 <= len(record.tokens) <= 3000 and record.prompt_len >= 1
        mask = np.asarray(record.loss_mask)
        log_probs = np.asarray(record.rollout_log_probs)
        assert mask[0] == 1 and np.all(log_probs <= 0) and np.all(log_probs[mask == 0] == 0)
        tool_output_runs += np.count_nonzero(np.diff(mask) == -1)
        assert record.metadata["actions_used"] == np.count_nonzero(np.diff(mask, prepend=0) == 1)
        assert (record.reward_score == 1.0) == (record.termination_reason == "solved")
        if record.termination_reason == "ctx_overflow":
            assert len(record.tokens) >= 0.95 * 3000
    assert tool_output_runs >= 2 * len(records)  # multi-turn: several tool outputs per rollout
    assert {r.sample_idx for r in records} == {0, 1, 2}


def test_termination_allotment_matches_proportions() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 7, 100, 333):
        reasons = allot_terminations(n, rng)
        assert len(reasons) == n and set(reasons) <= set(TERMINATION_REASONS)
    assert sorted(allot_terminations(200, rng)).count("finish_unresolved") == 96
