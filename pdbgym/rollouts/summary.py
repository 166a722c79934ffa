"""What a cache holds, in numbers: instances, samples, tokens, solve rate, how episodes ended."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from pdbgym.rollouts.cache import FileProgress
from pdbgym.rollouts.record import CacheFormatError, RolloutRecord
from pdbgym.rollouts.validate import ValidationReport, iter_validated_cache
from pdbgym.termination import TERMINATION_REASONS

NO_REASON = "unknown"


class CacheSummaryDict(TypedDict):
    """``CacheSummary.to_dict()``: its fields, then the figures computed from them."""

    instances: int
    samples: int
    prompt_tokens: int
    response_tokens: int
    masked_tokens: int
    solved_samples: int
    instances_solved: int
    max_sequence_tokens: int
    mean_masked_log_prob: float
    datasets: dict[str, int]
    terminations: dict[str, int]
    total_tokens: int
    solve_rate: float
    masked_fraction: float
    termination_line: str


@dataclass
class CacheSummary:
    """Counts over a set of records. Token counts are totals over all samples.

    ``solve_rate`` is the share of samples with ``reward_score == 1.0`` (the graded outcome, never the
    model's claim); ``instances_solved`` counts instances with at least one such sample.
    ``mean_masked_log_prob`` is the mean producer log-prob (nats, <= 0) over positions with
    ``loss_mask == 1``, i.e. minus the per-token cross-entropy of the producer on its own samples.
    """

    instances: int = 0
    samples: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 0
    masked_tokens: int = 0
    solved_samples: int = 0
    instances_solved: int = 0
    max_sequence_tokens: int = 0
    mean_masked_log_prob: float = float("nan")
    datasets: dict[str, int] = field(default_factory=dict)
    terminations: dict[str, int] = field(default_factory=dict)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.response_tokens

    @property
    def solve_rate(self) -> float:
        return self.solved_samples / self.samples if self.samples else float("nan")

    @property
    def masked_fraction(self) -> float:
        """Share of response tokens that the model generated (loss_mask == 1)."""
        return self.masked_tokens / self.response_tokens if self.response_tokens else float("nan")

    def termination_line(self) -> str:
        """E.g. ``30 solved, 48 finish_unresolved, 19 ctx_overflow, 1 budget, 2 other``."""
        return ", ".join(f"{count} {reason}" for reason, count in self.terminations.items()) or "no samples"

    def to_dict(self) -> CacheSummaryDict:
        return {"instances": self.instances, "samples": self.samples, "prompt_tokens": self.prompt_tokens,
                "response_tokens": self.response_tokens, "masked_tokens": self.masked_tokens,
                "solved_samples": self.solved_samples, "instances_solved": self.instances_solved,
                "max_sequence_tokens": self.max_sequence_tokens, "mean_masked_log_prob": self.mean_masked_log_prob,
                "datasets": dict(self.datasets), "terminations": dict(self.terminations),
                "total_tokens": self.total_tokens, "solve_rate": self.solve_rate,
                "masked_fraction": self.masked_fraction, "termination_line": self.termination_line()}


def _ordered_terminations(counts: Counter[str]) -> dict[str, int]:
    """Known reasons in their canonical order, then any others alphabetically; zero counts left out."""
    known = [(reason, counts[reason]) for reason in TERMINATION_REASONS if counts[reason]]
    unknown = sorted((reason, count) for reason, count in counts.items() if reason not in TERMINATION_REASONS)
    return dict(known + unknown)


def summarize(records: Iterable[RolloutRecord]) -> CacheSummary:
    """Summarize records in one streaming pass (works on ``iter_cache`` without holding the cache)."""
    summary = CacheSummary()
    instances: set[tuple[str, str]] = set()
    solved_instances: set[tuple[str, str]] = set()
    datasets: Counter[str] = Counter()
    terminations: Counter[str] = Counter()
    masked_log_prob_sum = 0.0
    masked_scored = 0
    for record in records:
        key = (record.dataset, record.instance_id)
        if key not in instances:
            instances.add(key)
            datasets[record.dataset] += 1
        summary.samples += 1
        summary.prompt_tokens += record.prompt_len
        summary.response_tokens += record.response_length
        summary.max_sequence_tokens = max(summary.max_sequence_tokens, len(record.tokens))
        summary.masked_tokens += record.loss_mask.count(1)
        for mask, log_prob in zip(record.loss_mask, record.rollout_log_probs, strict=False):
            if mask == 1:
                masked_scored += 1
                masked_log_prob_sum += log_prob
        if record.reward_score == 1.0:
            summary.solved_samples += 1
            solved_instances.add(key)
        terminations[record.termination_reason or NO_REASON] += 1
    summary.instances = len(instances)
    summary.instances_solved = len(solved_instances)
    summary.datasets = dict(datasets)
    summary.terminations = _ordered_terminations(terminations)
    if masked_scored:
        summary.mean_masked_log_prob = masked_log_prob_sum / masked_scored
    return summary


def summarize_cache(cache_dir: Path | str | None = None, *, on_file: FileProgress | None = None,
                    show: int = 10) -> CacheSummary:
    """Summarize a cache while the one validator checks it; a cache ``cache validate`` refuses
    (NaN log-probs, loss_mask values other than 0/1, manifest paths out of the folder, ...) is refused
    here too, with the validator's first ``show`` errors, rather than summarized into wrong figures."""
    report = ValidationReport()
    summary = summarize(iter_validated_cache(cache_dir, report, on_file=on_file))  # one file in memory at a time
    if not report.ok:
        more = f" (and {len(report.errors) - show} more)" if len(report.errors) > show else ""
        raise CacheFormatError("the cache is not valid, so it is not summarized; `pdbgym cache validate` lists "
                               "every problem: " + "; ".join(report.errors[:show]) + more)
    return summary
