"""Evaluation campaigns: every task x run x arm is an episode; resumable; reports at the end.

All arms see the same tasks and the same number of runs (matched power). Solve is the environment's
``final_test_passed``, nothing else.
"""

from __future__ import annotations

import os
import threading
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdbgym.env.environment import EnvConfig, EpisodeResult
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.results import EpisodeRow, ResultsStore
from pdbgym.fileio import write_json_atomic
from pdbgym.sandbox.workspace import reap_stale_workspaces
from pdbgym.tasks.model import Task


@dataclass(frozen=True)
class Arm:
    """A named policy: ``model`` is ``scripted``, ``embedded``, a local model folder, or a server URL."""

    name: str
    model: str

    @property
    def kind(self) -> str:
        if self.model in ("scripted", "embedded"):
            return self.model
        if self.model.startswith(("http://", "https://")):
            return "url"
        return "path"

    @classmethod
    def parse(cls, text: str) -> Arm:
        name, sep, model = text.partition("=")
        if not sep or not name or not model:
            raise PdbgymError(f"--arm must be NAME=MODEL (MODEL: scripted, embedded, a model folder or a URL), got '{text}'")
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise PdbgymError(f"arm name '{name}' may hold only letters, digits, '-', '_' and '.'")
        arm = cls(name, model)
        if arm.kind == "path" and not Path(model).exists():
            raise PdbgymError(f"arm '{name}': model '{model}' is neither scripted, embedded, a URL, nor an existing folder")
        return arm


@dataclass
class CampaignConfig:
    tasks: str
    arms: list[Arm]
    runs: int = 2
    split: str | None = None
    splits_file: str | None = None
    turn_budget: int = 30
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 512
    context_tokens: int = 8192
    seed: int = 0
    task_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["arms"] = {a.name: a.model for a in self.arms}
        return data


EpisodeFn = Callable[[Task, int, Path], EpisodeResult]


def scripted_episode(config: CampaignConfig) -> EpisodeFn:
    from pdbgym.agent.scripted import ScriptedPolicy
    from pdbgym.env.runner import run_episode

    def run(task: Task, run_index: int, transcript: Path) -> EpisodeResult:
        return run_episode(task, ScriptedPolicy(task), EnvConfig(turn_budget=config.turn_budget),
                           transcript_path=transcript)

    return run


def _episode_seed(config: CampaignConfig, task: Task, run_index: int) -> int:
    """A seed per (task, run), the same for every arm: arms differ by policy, not by luck of the draw."""
    return (config.seed * 1_000_003 + zlib.crc32(task.instance_id.encode()) * 101 + run_index) % 2**31


def model_episode(arm: Arm, config: CampaignConfig, out_dir: Path, ray_address: str | None = None) -> EpisodeFn:
    """An episode played by the agent loop: a model arm, or any arm when episodes go to Ray.

    The backend is built (model loaded, server reached) here, before any episode starts, so a bad
    arm fails at once. The token-exact record of every episode is appended to ``OUT/cache/ARM/``.
    """
    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.policies import build_backend, load_tokenizer, parse_policy
    from pdbgym.agent.runner import EpisodeJob, run_job
    from pdbgym.rollouts.cache import append_records
    from pdbgym.rollouts.record import RolloutRecord

    spec = parse_policy(arm.model)
    if spec.generates_tokens and ray_address is None:
        build_backend(spec)
    elif not spec.generates_tokens:
        load_tokenizer(spec.tokenizer)
    submit = _ray_submitter(ray_address) if ray_address is not None else run_job
    # A local model keeps one KV cache per process: its episodes take turns. Servers and Ray fan out.
    gate = threading.Semaphore(1 if spec.kind in ("embedded", "path") and ray_address is None else 10_000)
    cache_lock = threading.Lock()

    def run(task: Task, run_index: int, transcript: Path) -> EpisodeResult:
        sampling = SamplingParams(config.temperature, config.top_p, config.max_new_tokens,
                                  _episode_seed(config, task, run_index))
        agent = AgentConfig(max_context_tokens=config.context_tokens, sampling=sampling,
                            dataset=f"campaign_{arm.name}", sample_idx=run_index)
        job = EpisodeJob(str(task.path), task.instance_id, run_index, spec, agent,
                         EnvConfig(turn_budget=config.turn_budget))
        with gate:
            result = submit(job)
        write_json_atomic(transcript, result.transcript)
        with cache_lock:
            append_records(out_dir / "cache" / arm.name, [RolloutRecord.from_dict(result.record)])
        return result.episode_result()

    return run


def _ray_submitter(address: str) -> Callable:
    try:
        import ray
    except ImportError as exc:
        raise PdbgymError("--ray needs Ray: pip install 'pdbgym[ray]'") from exc
    from pdbgym.agent.runner import run_job

    if not ray.is_initialized():
        ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(run_job)
    return lambda job: ray.get(remote.remote(job))


def episode_fn(arm: Arm, config: CampaignConfig, out_dir: Path, ray_address: str | None = None) -> EpisodeFn:
    if arm.kind == "scripted" and ray_address is None:
        return scripted_episode(config)
    return model_episode(arm, config, out_dir, ray_address)


def run_campaign(
    config: CampaignConfig,
    tasks: Sequence[Task],
    out_dir: Path,
    *,
    workers: int | None = None,
    on_episode: Callable[[EpisodeRow], None] | None = None,
    episode_fns: dict[str, EpisodeFn] | None = None,
    ray_address: str | None = None,
) -> list[EpisodeRow]:
    """Run every missing (arm, task, run) episode; return all rows, old and new."""
    reap_stale_workspaces()  # workspaces a killed earlier run left in the temp folder
    store = ResultsStore(out_dir)
    config.task_ids = [t.instance_id for t in tasks]
    store.open(config.to_dict())
    done = store.done_keys()
    fns = episode_fns or {arm.name: episode_fn(arm, config, store.out_dir, ray_address) for arm in config.arms}
    todo = [(arm, task, run) for run in range(config.runs) for task in tasks for arm in config.arms
            if (arm.name, task.instance_id, run) not in done]
    workers = workers or max(1, os.cpu_count() or 1)

    def one(arm: Arm, task: Task, run: int) -> EpisodeRow:
        transcript = store.transcript_path(arm.name, task.instance_id, run)
        result = fns[arm.name](task, run, transcript)
        return EpisodeRow(arm.name, task.instance_id, run, bool(result.final_test_passed),
                          result.termination_reason, result.actions_used, result.duration_s,
                          str(transcript.relative_to(store.out_dir)))

    failures: list[str] = []
    queue = iter(todo)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: dict[Future[EpisodeRow], tuple[Arm, Task, int]] = {}
        for item in queue:
            pending[pool.submit(one, *item)] = item
            if len(pending) >= workers:
                break
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                arm, task, run = pending.pop(future)
                if future.exception() is not None:
                    # An infrastructure failure is not a failed solve: leave it out so a rerun retries it.
                    failures.append(f"{arm.name}/{task.instance_id}/run-{run}: {future.exception()!r}")
                else:
                    row = future.result()
                    store.append([row])
                    if on_episode is not None:
                        on_episode(row)
                nxt = next(queue, None)
                if nxt is not None:
                    pending[pool.submit(one, *nxt)] = nxt
    if failures:
        listing = "\n  ".join(failures[:10])
        raise PdbgymError(f"{len(failures)} episode(s) could not run (finished ones are saved; rerun the same "
                          f"command to retry them):\n  {listing}")
    return store.rows()
