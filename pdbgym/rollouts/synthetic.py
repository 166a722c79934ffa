"""Random but realistic teacher caches, for tests and benchmarks of the packages that read caches.

Shape of what is generated (all from one seeded ``numpy`` generator, so a seed gives the same cache):

* a prompt of 8-35% of the sequence, then a response of alternating turns: an assistant turn
  (``loss_mask`` 1, about 20 + Geometric(mean 120) tokens) and a tool-output turn (mask 0, about
  Geometric(mean 250) tokens), starting with an assistant turn;
* log-probs of assistant tokens from a mixture: 75% confident tokens (-Exponential(0.02 nats)) and
  25% uncertain ones (-Exponential(1.5 nats)); tool-output positions carry 0.0;
* token ids skewed towards small ids (id = floor(vocab * u^4)), like a BPE vocabulary's frequencies;
* termination reasons in the teacher's proportions (30 solved, 48 finish_unresolved, 19 ctx_overflow,
  1 budget, 2 other, allotted by largest remainder so 100 samples give exactly those counts);
  ``reward_score`` is 1.0 exactly for solved samples, and ctx_overflow samples are near the maximum
  length.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pdbgym.rollouts.cache import write_cache
from pdbgym.rollouts.record import CacheFormatError, LogprobSemantics, RecordMetadata, RolloutRecord

TEACHER_TERMINATION_MIX = {"solved": 30, "finish_unresolved": 48, "ctx_overflow": 19, "budget": 1, "other": 2}
SYNTHETIC_REPOS = (
    ("getmoto", "moto"), ("pandas-dev", "pandas"), ("python", "mypy"), ("conan-io", "conan"),
    ("iterative", "dvc"), ("pydantic", "pydantic"), ("dask", "dask"), ("Project-MONAI", "MONAI"),
)
SYNTHETIC_SEMANTICS = LogprobSemantics(engine="synthetic", temperature=0.7, top_p=0.9, top_p_renormalized=False)


def allot_terminations(n_samples: int, rng: np.random.Generator) -> list[str]:
    """Termination reasons for ``n_samples`` in the teacher's proportions (largest remainder), shuffled."""
    total = sum(TEACHER_TERMINATION_MIX.values())
    shares = {reason: n_samples * weight / total for reason, weight in TEACHER_TERMINATION_MIX.items()}
    counts = {reason: int(share) for reason, share in shares.items()}
    by_remainder = sorted(shares, key=lambda reason: shares[reason] - counts[reason], reverse=True)
    for reason in by_remainder[: n_samples - sum(counts.values())]:
        counts[reason] += 1
    reasons = [reason for reason, count in counts.items() for _ in range(count)]
    rng.shuffle(reasons)
    return reasons


def synthetic_loss_mask(response_length: int, rng: np.random.Generator) -> np.ndarray:
    """Alternating assistant (1) and tool-output (0) runs covering ``response_length`` positions."""
    mask = np.zeros(response_length, dtype=np.int64)
    position, assistant_turn = 0, True
    while position < response_length:
        run = 20 + int(rng.geometric(1 / 120)) if assistant_turn else int(rng.geometric(1 / 250))
        if assistant_turn:
            mask[position : position + run] = 1
        position += run
        assistant_turn = not assistant_turn
    return mask


def synthetic_log_probs(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Log-probs (nats, <= 0) for assistant positions from the confident/uncertain mixture; 0.0 elsewhere."""
    confident = rng.random(mask.size) < 0.75
    scale = np.where(confident, 0.02, 1.5)
    return np.where(mask == 1, -rng.exponential(scale), 0.0)


def _sequence_length(reason: str, lengths: tuple[int, int], rng: np.random.Generator) -> int:
    shortest, longest = lengths
    if reason == "ctx_overflow":
        return int(rng.integers(max(shortest, int(0.95 * longest)), longest + 1))
    return int(np.exp(rng.uniform(np.log(shortest), np.log(longest))))


def make_synthetic_records(
    n_instances: int = 8,
    samples: int = 1,
    vocab: int = 151_936,
    lengths: tuple[int, int] = (512, 4096),
    seed: int = 0,
    *,
    dataset: str = "synthetic_swe_gym",
) -> list[RolloutRecord]:
    """``n_instances * samples`` records; ``lengths`` bounds the total tokens (prompt + response)."""
    if n_instances < 1 or samples < 1 or vocab < 2:
        raise CacheFormatError("make_synthetic_records needs n_instances >= 1, samples >= 1 and vocab >= 2")
    if not 2 <= lengths[0] <= lengths[1]:
        raise CacheFormatError(f"lengths {lengths} must be (shortest, longest) with 2 <= shortest <= longest")
    rng = np.random.default_rng(seed)
    reasons = allot_terminations(n_instances * samples, rng)
    issue_numbers = rng.choice(10_000, size=n_instances, replace=False)
    records = []
    for instance in range(n_instances):
        owner, repo = SYNTHETIC_REPOS[instance % len(SYNTHETIC_REPOS)]
        instance_id = f"{owner}__{repo}-{issue_numbers[instance]}"
        for sample in range(samples):
            reason = reasons[instance * samples + sample]
            total = _sequence_length(reason, lengths, rng)
            prompt_len = max(1, min(total - 1, int(total * rng.uniform(0.08, 0.35))))
            mask = synthetic_loss_mask(total - prompt_len, rng)
            tokens = np.floor(vocab * rng.random(total) ** 4).astype(np.int64)
            metadata: RecordMetadata = {
                "instance_id": instance_id,
                "_eval_dataset_name": dataset,
                "task_type": "swe_gym",
                "_termination_reason": reason,
                "actions_used": int(np.count_nonzero(np.diff(mask, prepend=0) == 1)),
                "logprob_semantics": SYNTHETIC_SEMANTICS.to_dict(),
                "tokenizer": {"name": "synthetic", "vocab_size": vocab},
            }
            if samples > 1:
                metadata["_sample_idx"] = sample
            records.append(RolloutRecord(
                instance_id=instance_id, dataset=dataset, tokens=tokens.tolist(), prompt_len=prompt_len,
                response_length=total - prompt_len, loss_mask=mask.tolist(),
                rollout_log_probs=synthetic_log_probs(mask, rng).tolist(),
                reward_score=1.0 if reason == "solved" else 0.0,
                reward_extra={"final_test_passed": reason == "solved"}, metadata=metadata,
            ))
    return records


def make_synthetic_cache(
    cache_dir: Path | str,
    n_instances: int = 8,
    samples: int = 1,
    vocab: int = 151_936,
    lengths: tuple[int, int] = (512, 4096),
    seed: int = 0,
    *,
    fmt: str = "pt",
    dataset: str = "synthetic_swe_gym",
) -> Path:
    """Write ``make_synthetic_records(...)`` as a cache folder (see ``write_cache``); returns the folder."""
    records = make_synthetic_records(n_instances, samples, vocab, lengths, seed, dataset=dataset)
    return write_cache(cache_dir, records, fmt=fmt)
