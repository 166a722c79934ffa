"""Episodes as picklable jobs: plan them, play one (``run_job``), save results as they land.

``run_job`` is the one way a job becomes an episode (``pdbgym.agent.loop.run_episode``); where jobs
run (worker processes, a Ray cluster) is ``pdbgym.agent.executor``'s business. For a cache build each
finished episode is appended to the output cache at once (atomic writes, ``append_records``) and its
transcript written beside it, so a crash or kill loses no finished episode and a rerun skips every
``(instance_id, _sample_idx)`` the cache already holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pdbgym.agent.backends.base import tokenizer_info
from pdbgym.agent.executor import ExecutorConfig, run_jobs
from pdbgym.agent.jobs import EpisodeJob, JobResult
from pdbgym.agent.loop import AgentConfig, run_episode
from pdbgym.agent.policies import PolicySpec, build_turns
from pdbgym.env import DebugEnv
from pdbgym.env.environment import EnvConfig
from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic
from pdbgym.interrupts import deferred, stop_requested, tracked
from pdbgym.rollouts.cache import MANIFEST_NAME, append_records, read_cache
from pdbgym.seeds import episode_seed
from pdbgym.tasks.model import Task, load_task

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase

T = TypeVar("T")
TRANSCRIPTS_DIR = "transcripts"


def plan_jobs(tasks: Iterable[Task], runs: int, policy: PolicySpec, agent: AgentConfig, env: EnvConfig,
              done: set[tuple[str, int]], seed: int | None = None) -> list[EpisodeJob]:
    """Jobs for every (task, sample_idx < runs) not in ``done``; seeds differ per job when ``seed`` is set."""
    jobs = []
    for task in tasks:
        for sample_idx in range(runs):
            if (task.instance_id, sample_idx) in done:
                continue
            params = agent.sampling
            if seed is not None:
                params = replace(params, seed=episode_seed(seed, task.instance_id, sample_idx))
            job_agent = replace(agent, sample_idx=sample_idx, sampling=params)
            jobs.append(EpisodeJob(str(task.path), task.instance_id, sample_idx, policy, job_agent, env))
    return jobs


def run_job(job: EpisodeJob) -> JobResult:
    """Play one job in this process (the worker entry point, also used for Ray tasks and ``pdbgym run``).

    A job that would start after Ctrl-C (``pdbgym.interrupts``) raises ``KeyboardInterrupt`` instead.
    """
    if stop_requested():
        raise KeyboardInterrupt
    return run_to_end(_run_job(job))


def run_to_end(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on a fresh event loop in this thread.

    Unlike ``asyncio.run`` no SIGINT handler is installed, so Ctrl-C raises ``KeyboardInterrupt`` where
    the thread is (a person's ``input()`` included). If it lands while the loop waits, the episode is
    cancelled and its cleanup (closing the environment) runs before the interrupt goes on. In any
    other thread the episode is cancelled by ``pdbgym.interrupts.request_stop`` (the executor calls
    it on Ctrl-C) and ends in ``KeyboardInterrupt`` too, once its cleanup ran.
    """
    loop = asyncio.new_event_loop()
    task = loop.create_task(coroutine)
    try:
        with tracked(loop, task):
            return loop.run_until_complete(task)
    except KeyboardInterrupt:
        task.cancel()
        with suppress(BaseException):
            loop.run_until_complete(task)
        raise
    except asyncio.CancelledError:
        if stop_requested():
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


async def _run_job(job: EpisodeJob) -> JobResult:
    task = load_task(job.task_path)
    turns, tool_format = build_turns(job.policy, job.agent.sampling)
    agent = replace(job.agent, tool_format=tool_format)
    try:
        outcome = await run_episode(task, turns, DebugEnv(task, job.env), agent)
    finally:
        backend = getattr(turns, "backend", None)
        if backend is not None:  # its HTTP client belongs to this event loop
            await backend.aclose()
    return JobResult(job.instance_id, job.sample_idx, outcome.record, outcome.transcript,
                     outcome.model_seconds, outcome.env_seconds, outcome.wall_seconds, outcome.interrupted)


def save_result(out_dir: Path, result: JobResult) -> None:
    """Append the record to the cache and write the transcript, each atomically and both or neither on Ctrl-C."""
    with deferred():
        write_json_atomic(out_dir / TRANSCRIPTS_DIR / f"{result.instance_id}__{result.sample_idx}.json",
                          result.transcript)
        append_records(out_dir, [result.record])


def completed_samples(out_dir: Path, tokenizer: PreTrainedTokenizerBase | None) -> set[tuple[str, int]]:
    """``(instance_id, _sample_idx)`` already in ``out_dir``'s cache. Refuses (``PdbgymError``) a cache
    written with another vocabulary than ``tokenizer``'s, before any episode runs."""
    if not (out_dir / MANIFEST_NAME).exists():
        return set()
    records = read_cache(out_dir)
    if tokenizer is not None:
        ours = tokenizer_info(tokenizer)
        for record in records:
            theirs = record.metadata.get("tokenizer") or {}
            if theirs.get("vocab_size") not in (None, ours["vocab_size"]) or \
                    theirs.get("fingerprint") not in (None, ours["fingerprint"]):
                raise PdbgymError(
                    f"{out_dir} holds samples tokenized with {theirs.get('name')} (vocab {theirs.get('vocab_size')}, "
                    f"fingerprint {theirs.get('fingerprint')}) but this run's tokenizer {ours['name']} has vocab "
                    f"{ours['vocab_size']}, fingerprint {ours['fingerprint']}; write to a new --out")
    return {(r.instance_id, r.sample_idx) for r in records}


def run_all(jobs: list[EpisodeJob], out_dir: Path, executor: ExecutorConfig,
            on_result: Callable[[JobResult], None] | None = None) -> list[JobResult]:
    """Play ``jobs``, saving each result to the cache at ``out_dir`` the moment it arrives.

    Returns the results in arrival order. Jobs that could not run are retried by a rerun (nothing is
    saved for them); after every other job finished, they raise one ``PdbgymError`` listing them.
    """
    results, failures = [], []
    for done in run_jobs(jobs, executor, run_job):
        if done.result is None:
            failures.append(f"{done.job.instance_id}#{done.job.sample_idx}: {done.error!r}")
            continue
        save_result(out_dir, done.result)
        results.append(done.result)
        if on_result is not None:
            on_result(done.result)
    raise_failures(failures)
    return results


def raise_failures(failures: list[str]) -> None:
    """One error for the episodes that could not run (finished ones are saved; a rerun retries the rest)."""
    if failures:
        listing = "\n  ".join(failures[:10])
        raise PdbgymError(f"{len(failures)} episode(s) could not run (finished ones are saved; rerun the same "
                          f"command to retry them):\n  {listing}")
