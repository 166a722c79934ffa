"""An iterate's scores: pass@1 on the val tasks (episodes, ``pdbgym.evaluate`` statistics) and, given a
teacher cache, KL(teacher || student) per token on it (``pdbgym.divergence.tocache.kl_to_cache``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pdbgym.divergence.tocache import kl_to_cache as kl_of_model
from pdbgym.divergence.tocache import open_teacher_cache
from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.results import EpisodeRow
from pdbgym.tasks.model import Task
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.dagger.play import play
from pdbgym.train.dagger.policy import Policy
from pdbgym.train.errors import DaggerError


def val_pass1(policy: Policy, tasks: list[Task], config: DaggerConfig, transcripts: Path) -> tuple[float, str] | None:
    """pass@1 on ``tasks`` (``eval_runs`` each) with its task-clustered CI, via ``pdbgym.evaluate``."""
    if not tasks:
        return None
    outcomes = asyncio.run(play(policy, tasks, config.eval_runs, config, config.seed + 7, transcripts))
    rows = [EpisodeRow("student", o.record.instance_id, o.record.sample_idx, bool(o.record.reward_score >= 1.0),
                       o.record.termination_reason or "other", int(o.record.metadata.get("actions_used", 0)),
                       o.wall_seconds, str(transcripts)) for o in outcomes]
    summary = summarize(rows, ["student"], [t.instance_id for t in tasks], config.eval_runs)
    estimate = summary["arm_results"]["student"]["pass@1"]
    low, high = estimate["ci"]
    return float(estimate["mean"]), f"[{low:.3f}, {high:.3f}]"


def kl_to_cache(policy: Policy, cache: Path) -> float:
    """KL(teacher || student) in nats per teacher token on the teacher cache's own samples: the divergence
    library's ``kl_to_cache`` (its ``token_mean`` over the cache's scored tokens; k3, or k1, exact, for a
    deterministic teacher). The cache is checked before the model is touched."""
    target = open_teacher_cache(cache)  # a grammar-constrained or log-prob-less cache is refused here
    kl = kl_of_model(policy.backend.model, target, name=policy.label, tokenizer=policy.tokenizer)
    if kl.value is None:
        raise DaggerError(f"no finite KL term of {policy.label} on {cache} (share non-finite: "
                          f"{kl.nonfinite_share:.0%}); the model puts no probability on the cache's tokens")
    return kl.value
