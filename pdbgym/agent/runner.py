"""Many episodes: tasks x runs, fanned over a process pool (or a Ray cluster), results kept as they land.

Each finished episode is appended to the output cache at once (atomic writes, ``append_records``) and its
transcript written beside it, so a crash or kill loses no finished episode and a rerun skips every
``(instance_id, _sample_idx)`` the cache already holds. Episodes run in worker processes, each playing
one episode at a time; model calls inside are async, so episodes of many workers share one server.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pdbgym.agent.backends.base import tokenizer_info
from pdbgym.agent.loop import AgentConfig, run_episode
from pdbgym.agent.policies import PolicySpec, build_turns
from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic

TRANSCRIPTS_DIR = "transcripts"


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play: picklable, so it can travel to a worker process or a Ray node."""

    task_path: str
    instance_id: str
    sample_idx: int
    policy: PolicySpec
    agent: AgentConfig
    env: Any  # pdbgym.env.EnvConfig


@dataclass
class JobResult:
    """What a worker sends back: the record as a teacher-cache dict, the transcript, timings (s)."""

    instance_id: str
    sample_idx: int
    record: dict[str, Any]
    transcript: dict[str, Any]
    model_seconds: float
    env_seconds: float
    wall_seconds: float

    def episode_result(self) -> Any:
        """The outcome as the environment's ``EpisodeResult`` (what campaigns and ``pdbgym run`` report)."""
        from pdbgym.env.environment import EpisodeResult

        env_result = (self.transcript.get("env") or {}).get("result") or {}
        return EpisodeResult(self.instance_id, self.transcript["termination_reason"],
                             bool(self.transcript["final_test_passed"]), self.transcript["actions_used"],
                             round(self.wall_seconds, 3), env_result.get("detail", ""),
                             env_result.get("grading", {}))


def plan_jobs(tasks: Iterable[Any], runs: int, policy: PolicySpec, agent: AgentConfig, env: Any,
              done: set[tuple[str, int]], seed: int | None = None) -> list[EpisodeJob]:
    """Jobs for every (task, sample_idx < runs) not in ``done``; seeds differ per job when ``seed`` is set."""
    jobs = []
    for task_index, task in enumerate(tasks):
        for sample_idx in range(runs):
            if (task.instance_id, sample_idx) in done:
                continue
            params = agent.sampling
            if seed is not None:
                params = replace(params, seed=seed + 1000 * task_index + sample_idx)
            job_agent = replace(agent, sample_idx=sample_idx, sampling=params)
            jobs.append(EpisodeJob(str(task.path), task.instance_id, sample_idx, policy, job_agent, env))
    return jobs


def run_job(job: EpisodeJob) -> JobResult:
    """Play one job in this process (the worker entry point, also used for Ray tasks)."""
    return asyncio.run(_run_job(job))


async def _run_job(job: EpisodeJob) -> JobResult:
    from pdbgym.env import DebugEnv
    from pdbgym.tasks.model import load_task

    task = load_task(job.task_path)
    turns, tool_format = build_turns(job.policy, job.agent.sampling)
    agent = replace(job.agent, tool_format=tool_format)
    try:
        outcome = await run_episode(task, turns, DebugEnv(task, job.env), agent)
    finally:
        backend = getattr(turns, "backend", None)
        if backend is not None:  # its HTTP client belongs to this event loop
            await backend.aclose()
    return JobResult(job.instance_id, job.sample_idx, outcome.record.to_dict(), outcome.transcript,
                     outcome.model_seconds, outcome.env_seconds, outcome.wall_seconds)


def _init_worker(torch_threads: int) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch

        torch.set_num_threads(torch_threads)
    except ImportError:
        pass


def iter_local(jobs: list[EpisodeJob], workers: int) -> Iterator[JobResult]:
    """Results as episodes finish: in this process for one worker, else in a spawned process pool."""
    if workers <= 1:
        for job in jobs:
            yield run_job(job)
        return
    torch_threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")  # torch's thread pools do not survive fork
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                             initargs=(torch_threads,)) as pool:
        pending: set[Future[JobResult]] = {pool.submit(run_job, job) for job in jobs}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                yield future.result()


def iter_ray(jobs: list[EpisodeJob], address: str | None = None) -> Iterator[JobResult]:
    """Results as episodes finish on a Ray cluster (``address`` None starts or joins a local one)."""
    try:
        import ray
    except ImportError as exc:
        raise PdbgymError("--ray needs Ray: pip install 'pdbgym[ray]'") from exc
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_job)
    pending = [remote.remote(job) for job in jobs]
    while pending:
        finished, pending = ray.wait(pending, num_returns=1)
        yield ray.get(finished[0])


def save_result(out_dir: Path, result: JobResult) -> None:
    """Append the record to the cache and write the transcript, both atomically."""
    from pdbgym.rollouts.cache import append_records
    from pdbgym.rollouts.record import RolloutRecord

    write_json_atomic(out_dir / TRANSCRIPTS_DIR / f"{result.instance_id}__{result.sample_idx}.json", result.transcript)
    append_records(out_dir, [RolloutRecord.from_dict(result.record)])


def completed_samples(out_dir: Path, tokenizer: Any | None) -> set[tuple[str, int]]:
    """``(instance_id, _sample_idx)`` already in ``out_dir``'s cache. Refuses (``PdbgymError``) a cache
    written with another vocabulary than ``tokenizer``'s, before any episode runs."""
    from pdbgym.rollouts.cache import MANIFEST_NAME, read_cache

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


def run_all(jobs: list[EpisodeJob], out_dir: Path, workers: int, use_ray: bool = False,
            ray_address: str | None = None, on_result: Callable[[JobResult], None] | None = None) -> list[JobResult]:
    """Play ``jobs``, saving each result the moment it arrives; returns them in arrival order."""
    results = []
    source = iter_ray(jobs, ray_address) if use_ray else iter_local(jobs, workers)
    for result in source:
        save_result(out_dir, result)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return results


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)

