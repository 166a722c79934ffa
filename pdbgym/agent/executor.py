"""The one executor of episodes: local worker processes, or a Ray cluster; campaigns and cache builds share it.

``run_jobs`` takes picklable ``EpisodeJob`` objects and the function that plays one (a module-level
function, so a worker process or a Ray task can import it; ``pdbgym.agent.runner.run_job``) and yields each one's result (or the exception
that stopped it) as it finishes; callers save results the moment they arrive. Locally, jobs of a
local model (``embedded``, a model folder) run in this process, ``local_episodes`` at once in threads,
so the model is loaded once and its engine (``pdbgym.engine``) batches their turns; every other job
runs in a pool of ``workers`` spawned processes (in this process when ``workers`` is 1). On Ray every
job is a Ray task.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdbgym.agent.localprocs import Spread, init_worker, signal_processes
from pdbgym.defaults import documented
from pdbgym.errors import PdbgymError
from pdbgym.fdwait import raise_descriptor_limit
from pdbgym.interrupts import clear_stop, request_stop
from pdbgym.versions import require

if TYPE_CHECKING:  # annotations only: the executor loads in a few milliseconds, before any episode's modules
    from pdbgym.agent.jobs import EpisodeJob, JobResult

    Play = Callable[[EpisodeJob], JobResult]  # how one job is played (pdbgym.agent.runner.run_job)

LOCAL_RAY = "local"
STOP_GRACE_S = 30.0  # how long Ctrl-C waits for running episodes to end cleanly
# Open descriptors one episode may hold at a peak (pty, fork-server sockets and pidfds, a test run's pipes; about
# 5 to 10 measured on the tiny task), with room: the soft limit is raised to fit the episodes played at once.
DESCRIPTORS_PER_EPISODE = 16
LOCAL_EPISODES_GPU = 48  # a local model's episodes at once on a GPU: their turns fill the engine's batches
SPREAD_POLL_S = 0.2  # with episodes in other local processes: how long each side is waited on in turn


@dataclass(frozen=True)
class ExecutorConfig:
    """Where episodes run.

    Args:
        workers: episodes at once (worker processes locally, tasks in flight on Ray); 0 picks one per
            CPU core. Jobs of a local model ignore it: they run in this process. Default 0.
        ray_address: ``None`` runs locally; ``"local"`` starts (or joins) a Ray cluster on this machine;
            any other value is a cluster address such as ``ray://head:10001``. Default ``None``.
        local_episodes: episodes of a local model played at once in this process, their turns batched
            by the model's engine; 0 picks ``LOCAL_EPISODES_GPU`` when the model is on a GPU, else 1 (on
            CPU one episode at a time keeps each turn's KV cache for the next). Default 0.
        local_processes: processes that share a local model's jobs, each with its own copy of the model and
            its engine and ``local_episodes`` episodes at once (``pdbgym.agent.localprocs``): one process's
            interpreter, not the GPU, bounds how many episodes a minute it plays. 1 plays them in this
            process. Default 1.
    """

    workers: int = documented(0, "Episodes at once (0: one per core)")
    ray_address: str | None = documented(None, "Ray cluster address ('local' starts one here)", old_flags=("--ray",))
    local_episodes: int = documented(
        0, f"Local-model episodes at once, their turns batched (0: {LOCAL_EPISODES_GPU} on a GPU, 1 on CPU)", min=0)
    local_processes: int = documented(
        1, "Processes sharing a local model's episodes, each with its own copy of the model (1: this one)", min=1)

    def worker_count(self) -> int:
        return self.workers or max(1, os.cpu_count() or 1)

    def local_count(self, jobs: list[EpisodeJob]) -> int:
        if self.local_episodes:
            return self.local_episodes
        on_gpu = any(job.policy.device.startswith("cuda") for job in jobs)
        return LOCAL_EPISODES_GPU if on_gpu else 1


@dataclass
class JobDone:
    """One finished job: its result, or the exception that stopped it (an infrastructure failure)."""

    job: EpisodeJob
    result: JobResult | None
    error: BaseException | None = None


def init_ray(address: str) -> None:
    """Connect to the Ray cluster at ``address`` (``"local"``: start or join one here), once per process."""
    require("ray")
    try:
        import ray  # optional: ray (pdbgym[ray])
    except ImportError as exc:
        raise PdbgymError("--ray-address needs Ray: pip install 'pdbgym[ray]'") from exc
    if not ray.is_initialized():
        ray.init(address=None if address == LOCAL_RAY else address, include_dashboard=False, log_to_driver=False)


def run_jobs(jobs: list[EpisodeJob], config: ExecutorConfig, play: Play) -> Iterator[JobDone]:
    """Play each of ``jobs`` with ``play`` where ``config`` says; yield each as it finishes (arrival order)."""
    if not jobs:
        return
    if config.ray_address is not None:
        yield from _on_ray(jobs, config.ray_address, play)
    else:
        yield from _locally(jobs, config.worker_count(), config.local_count(jobs), play, config.local_processes)


def _locally(jobs: list[EpisodeJob], workers: int, local: int, play: Play, processes: int = 1) -> Iterator[JobDone]:
    here = [job for job in jobs if workers <= 1 or job.policy.in_process]
    away = [job for job in jobs if not (workers <= 1 or job.policy.in_process)]
    spread_jobs = [job for job in here if job.policy.in_process] if processes > 1 else []
    if spread_jobs:
        here = [job for job in here if not job.policy.in_process]
    descriptors = DESCRIPTORS_PER_EPISODE * local + 256  # the soft limit that fits ``local`` episodes at once
    clear_stop()
    with ExitStack() as stack:
        spread = None
        if spread_jobs:  # a local model's jobs over several processes, each its own model and engine
            spread = Spread(spread_jobs, play, processes, local, grace=STOP_GRACE_S,
                            descriptors=descriptors)
            stack.callback(spread.close)
            stack.callback(spread.stop)  # however this block ends, its processes end with it (stopped if not done)
        if here:
            from pdbgym.agent.policies import models_released_after  # the model stack: local jobs only

            stack.enter_context(models_released_after())
        futures: dict[Future[JobResult], EpisodeJob] = {}
        pools: list[Executor] = []
        if here:  # this process's episodes, ``local`` at a time (each in its own thread and event loop)
            if local > 1:
                from pdbgym.engine import expect_rows  # heavy: torch, only when local models play

                expect_rows(local, max(job.agent.max_context_tokens for job in here))
                raise_descriptor_limit(descriptors)
            pools.append(stack.enter_context(ThreadPoolExecutor(local, thread_name_prefix="pdbgym-episode")))
            _submit(pools[-1], play, here, futures)
        if away:
            context = multiprocessing.get_context("spawn")  # torch's thread pools do not survive fork
            threads = max(1, (os.cpu_count() or 1) // workers)
            pool = ProcessPoolExecutor(min(workers, len(away)), mp_context=context, initializer=init_worker,
                                       initargs=(threads, STOP_GRACE_S))
            pools.append(stack.enter_context(pool))
            _submit(pool, play, away, futures)
        try:
            while futures or (spread is not None and not spread.finished):
                if spread is not None and not spread.finished:
                    for job, result, error in spread.poll(SPREAD_POLL_S if not futures else 0.0):
                        yield JobDone(job, result, error)
                if not futures:
                    continue
                finished, _ = wait(futures, timeout=SPREAD_POLL_S if spread else None, return_when=FIRST_COMPLETED)
                for future in finished:
                    job = futures.pop(future)
                    error = future.exception()
                    yield JobDone(job, None if error else future.result(), error)
        except BaseException:  # Ctrl-C here or in the caller (GeneratorExit): stop now, not after every job
            if spread is not None:
                spread.terminate()  # its children unwind while this process's episodes do (the stack waits)
            _stop_all(pools, futures)
            raise


def _stop_all(pools: list[Executor], futures: dict[Future[JobResult], EpisodeJob]) -> None:
    """Start no job, end the running ones cleanly (their workspaces removed), then return.

    Queued jobs are cancelled; episodes in this process's threads are cancelled through
    ``pdbgym.interrupts``; worker processes get SIGTERM, which stops their episode the same way (a
    job a worker had already taken from the queue is refused by ``run_job``). A second Ctrl-C while
    this waits stops waiting.
    """
    request_stop()
    workers = [process for pool in pools for process in (getattr(pool, "_processes", None) or {}).values()]
    for future in futures:
        future.cancel()
    for pool in pools:
        pool.shutdown(wait=False, cancel_futures=True)
    signal_processes(workers, signal.SIGTERM)
    running = [future for future in futures if not future.cancelled()]  # a cancelled one never turns "done"
    with suppress(KeyboardInterrupt):
        _, stuck = wait(running, timeout=STOP_GRACE_S)
        if stuck:  # a worker that does not end its episode in time is killed (its sandbox dies with it)
            signal_processes(workers, signal.SIGKILL)


def _submit(pool: Executor, play: Play, jobs: list[EpisodeJob],
            futures: dict[Future[JobResult], EpisodeJob]) -> None:
    for job in jobs:
        futures[pool.submit(play, job)] = job


def _on_ray(jobs: list[EpisodeJob], address: str, play: Play) -> Iterator[JobDone]:
    import ray  # optional: the ray extra

    init_ray(address)
    remote = ray.remote(play)
    pending = {remote.remote(job): job for job in jobs}
    try:
        while pending:
            finished, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(finished[0])
            try:
                result = ray.get(finished[0])
            except Exception as exc:  # noqa: BLE001 - a failed Ray task is one failed job
                yield JobDone(job, None, exc)
            else:
                yield JobDone(job, result)
    except BaseException:  # Ctrl-C: no task of this run goes on on the cluster
        for ref in pending:
            with suppress(Exception):
                ray.cancel(ref)
        raise
