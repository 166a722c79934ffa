"""Figures of each arm beyond pass@k, read from what a campaign and a teacher cache hold.

- ``oracle_kl``: KL(oracle || arm) on a held-out cache of a deterministic teacher (``scripted``). Such a
  teacher puts probability 1 on each token it writes, so KL(teacher || arm) at a token is
  ``-log q_arm(token | context)`` exactly; the figure is the divergence library's ``kl_to_cache``: the mean
  over all the cache's scored (loss_mask 1) tokens pooled (nats/token), with a task-bootstrap 95% CI.
- ``tool_call_validity``: per arm, the share of model turns that parse as a tool call in the episode's
  tool-call format (``agent.toolcalls.parse_tool_call``, the loop's own parser), from the transcripts:
  pooled, and per episode with a 95% interval clustered by episode.

``pdbgym experiment run`` (and so ``pdbgym demo``, one of its files) writes both beside its campaign.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import NotRequired, TypedDict, cast

import numpy as np

from pdbgym.agent.backends.base import EpisodeTranscript
from pdbgym.agent.toolcalls import ToolCallError, parse_tool_call
from pdbgym.divergence.tocache import kl_to_cache, open_teacher_cache
from pdbgym.evaluate import stats
from pdbgym.evaluate.divergence_arms import local_model_of
from pdbgym.evaluate.results import ResultsStore
from pdbgym.fileio import write_json_atomic
from pdbgym.reportkit import EstimateDict


class OracleArm(TypedDict):
    """One arm of ``oracle_kl``: scored (its model folder, KL per token with its interval, tasks and tokens) or
    not, and why."""

    available: bool
    reason: NotRequired[str]
    path: NotRequired[str]
    kl_per_token: NotRequired[float | None]
    ci_low: NotRequired[float | None]
    ci_high: NotRequired[float | None]
    tasks: NotRequired[int]
    tokens: NotRequired[int]


class OracleKL(TypedDict):
    """``oracle_kl``'s file: the oracle's cache, its records, the window scored, the metric, each arm, and what
    the figure means."""

    cache: str
    records: int
    max_ids: int
    metric: str
    arms: dict[str, OracleArm]
    meaning: str


class ToolCallValidity(TypedDict):
    """One arm's tool calls over a campaign (``tool_call_validity``)."""

    turns: int
    valid: int
    episodes: int
    episodes_with_valid: int
    longest_repeat: int
    rate: float | None
    episode_rate: EstimateDict | None
    per_task_rate: dict[str, float]


def oracle_kl(cache: Path, arms: Mapping[str, str], out_file: Path, max_ids: int = 0,
              device: str = "cpu") -> OracleKL:
    """KL(oracle || arm) per arm with a local model, by the divergence library's ``kl_to_cache`` (one
    aggregation everywhere: the token mean over the cache's scored tokens with a task-bootstrap 95% CI;
    k1, exact for the deterministic oracle); kept in ``out_file``.

    ``max_ids`` (0: whole episodes) scores only the first ids of each episode: the prompt and the first
    tool calls (scoring cost grows with the ids scored). Models are scored in float32 on ``device``.

    An arm already scored with the same model path, window and metric is reused. Arms without local
    weights (scripted, a URL, a grammar-constrained arm) get ``{"available": False, "reason"}``.
    """
    target = open_teacher_cache(cache, max_ids=max_ids)
    old = json.loads(out_file.read_text()) if out_file.is_file() else {}
    same = old.get("max_ids") == max_ids and old.get("metric") == target.metric
    done = old.get("arms", {}) if same else {}
    result: dict[str, OracleArm] = {}
    for arm, model in arms.items():
        path, reason = local_model_of(model)
        if path is None:
            result[arm] = {"available": False, "reason": reason}
            continue
        if done.get(arm, {}).get("path") == path:
            result[arm] = done[arm]
            continue
        kl = kl_to_cache(path, target, name=arm, device=device, dtype="float32")
        result[arm] = {"available": True, "path": path, "kl_per_token": kl.value, "ci_low": kl.ci_low,
                       "ci_high": kl.ci_high, "tasks": kl.n_tasks, "tokens": kl.n_tokens}
    data: OracleKL = {"cache": str(target.folder), "records": len(target.records), "max_ids": max_ids, "metric": target.metric,
            "arms": result, "meaning": f"KL(teacher || arm) in nats per teacher token: {target.metric}, the "
                                       "divergence library's token mean (for the oracle: the arm's mean -log q of "
                                       "the oracle's tokens)"}
    write_json_atomic(out_file, data, indent=1)
    return data


def _episode_calls(transcript: EpisodeTranscript) -> tuple[int, int, int]:
    """(model turns, valid tool calls, the most times one valid call was sent in a row) of one episode."""
    valid = turns = repeat = longest = 0
    last = None
    for message in transcript.get("messages", []):
        if message.get("role") != "assistant":
            continue
        turns += 1
        try:
            action = parse_tool_call(str(message.get("content") or ""), transcript.get("tool_format") or "text")
        except ToolCallError:
            last = None
            continue
        valid += 1
        call = (action.tool, json.dumps(action.args, sort_keys=True, default=str))
        repeat = repeat + 1 if call == last else 1
        last, longest = call, max(longest, repeat)
    return turns, valid, longest


def tool_call_validity(campaign: Path, arms: Mapping[str, str], confidence: float = 0.95) -> dict[str, ToolCallValidity]:
    """Per arm, over the campaign's transcripts: ``turns``, ``valid``, ``rate`` (pooled valid / turns),
    ``episodes``, ``episodes_with_valid``, ``longest_repeat`` (the most times one valid call was sent in a row
    in an episode), ``episode_rate`` and ``per_task_rate``.

    Turns of one episode are not independent (a model that found one call tends to send it again), so the
    interval is clustered by episode: ``episode_rate`` is ``evaluate.stats.estimate_mean`` of the per-episode
    valid shares (each episode weighs one; bootstrap over episodes, Wilson-bounded at 0% and 100%, its
    effective size capped by the turns), None when no episode had a turn. ``per_task_rate``: task -> mean of
    its episodes' shares, for comparisons paired by task.
    """
    tallies: dict[str, Counter[str]] = {arm: Counter() for arm in arms}
    shares: dict[str, list[tuple[str, float]]] = {arm: [] for arm in arms}
    for row in ResultsStore(campaign).rows():
        transcript = cast(EpisodeTranscript, json.loads((Path(campaign) / row.transcript).read_text()))  # the runner's
        turns, valid, longest = _episode_calls(transcript)
        tally = tallies.setdefault(row.arm, Counter())
        tally.update(turns=turns, valid=valid, episodes=1, episodes_with_valid=int(valid > 0))
        tally["longest_repeat"] = max(tally["longest_repeat"], longest)
        if turns:
            shares.setdefault(row.arm, []).append((row.instance_id, valid / turns))
    result: dict[str, ToolCallValidity] = {}
    for arm, tally in tallies.items():
        rates = np.array([share for _, share in shares.get(arm, [])])
        by_task: dict[str, list[float]] = {}
        for task, share in shares.get(arm, []):
            by_task.setdefault(task, []).append(share)
        result[arm] = {"turns": tally["turns"], "valid": tally["valid"], "episodes": tally["episodes"],
                       "episodes_with_valid": tally["episodes_with_valid"], "longest_repeat": tally["longest_repeat"],
                       "rate": tally["valid"] / tally["turns"] if tally["turns"] else None,
                       "episode_rate": stats.estimate_mean(rates, confidence, max_n=tally["turns"]).to_dict()
                       if rates.size else None,
                       "per_task_rate": {task: float(np.mean(v)) for task, v in sorted(by_task.items())}}
    return result
