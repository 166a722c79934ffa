"""Episodes of a DAgger policy through ``pdbgym.agent.loop.run_episode`` (real pdb sessions): an
iteration's student play, kept as a rollout cache with transcripts, and the val episodes of an iterate."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.executor import LOCAL_EPISODES_GPU
from pdbgym.agent.loop import AgentConfig, EpisodeOutcome, run_episode
from pdbgym.agent.toolcalls import detect_format
from pdbgym.agent.turns import ModelTurns
from pdbgym.env import DebugEnv, EnvConfig
from pdbgym.fileio import write_json_atomic
from pdbgym.rollouts.cache import append_records
from pdbgym.seeds import episode_seed
from pdbgym.tasks.model import Task
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.dagger.policy import Policy


async def play(policy: Policy, tasks: list[Task], runs: int, config: DaggerConfig, seed: int,
               transcripts: Path) -> list[EpisodeOutcome]:
    """Episodes of ``policy`` on ``tasks`` x ``runs``, transcripts written as ``TASK__RUN.json``; the outcomes
    in (task, run) order. Up to ``episodes_at_once(policy)`` play together, their turns batched by the
    policy's engine."""
    fmt = detect_format(getattr(policy.tokenizer, "chat_template", None))
    episode = config.episode
    env_config = EnvConfig(turn_budget=episode.turn_budget)
    gate = asyncio.Semaphore(episodes_at_once(policy))

    async def one(task: Task, run: int) -> EpisodeOutcome:
        params = SamplingParams(episode.temperature, 1.0, episode.max_new_tokens, episode_seed(seed, task.instance_id, run))
        agent = AgentConfig(tool_format=fmt, max_context_tokens=episode.max_context_tokens, sampling=params,
                            dataset="dagger", sample_idx=run)
        async with gate:
            outcome = await run_episode(task, ModelTurns(policy.backend, params), DebugEnv(task, env_config), agent)
        write_json_atomic(transcripts / f"{task.instance_id}__{run}.json", outcome.transcript)
        return outcome

    return list(await asyncio.gather(*(one(task, run) for task in tasks for run in range(runs))))


def episodes_at_once(policy: Policy) -> int:
    """``LOCAL_EPISODES_GPU`` for a model on a GPU (the engine batches their turns), else 1 (on CPU one
    episode at a time keeps each turn's KV cache for the next)."""
    engine = getattr(policy.backend, "engine", None)
    return LOCAL_EPISODES_GPU if engine is not None and engine.device.type == "cuda" else 1


def play_iteration(student: Policy, tasks: list[Task], config: DaggerConfig, iteration: int,
                   folder: Path) -> list[EpisodeOutcome]:
    """Iteration ``iteration``'s student episodes: ``runs`` per task, kept as the rollout cache
    ``folder/rollouts`` with transcripts in ``folder/transcripts``."""
    outcomes = asyncio.run(play(student, tasks, config.runs, config, config.seed + 100 * iteration,
                                folder / "transcripts"))
    append_records(folder / "rollouts", [o.record for o in outcomes])
    return outcomes
