"""Evaluation campaigns: every task x run x arm is an episode; resumable; reports at the end.

All arms see the same tasks and the same number of runs (matched power). Solve is the environment's
``final_test_passed``, nothing else. Episodes are ``EpisodeJob`` objects played by the shared executor
(``pdbgym.agent.executor``), the same one cache builds use; each finished episode's transcript, its
token-exact record (``OUT/cache/ARM/``) and its row (``episodes.jsonl``) are written as it lands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.executor import ExecutorConfig, run_jobs
from pdbgym.agent.jobs import EpisodeJob, JobResult
from pdbgym.agent.loop import AgentConfig
from pdbgym.agent.policies import check_policy, parse_policy
from pdbgym.agent.runner import raise_failures, run_job
from pdbgym.env.environment import EnvConfig, EpisodeResult
from pdbgym.episode_defaults import EPISODE, EpisodeSettings, check_setting
from pdbgym.errors import PdbgymError
from pdbgym.evaluate.results import EpisodeRow, ResultsStore
from pdbgym.fileio import write_json_atomic
from pdbgym.interrupts import Interrupted, deferred
from pdbgym.modelload import is_model_ref
from pdbgym.policyname import INTERACTIVE_POLICIES, PolicyKind, policy_kind, split_constrained
from pdbgym.rollouts.cache import append_records
from pdbgym.sandbox.workspace import reap_stale_workspaces
from pdbgym.seeds import episode_seed
from pdbgym.tasks.model import Task
from pdbgym.termination import verdict_refused


@dataclass(frozen=True)
class Arm:
    """A named policy: ``model`` is ``scripted``, ``embedded``, a local model folder, an adapter-store reference
    (name or hash), or a server URL."""

    name: str
    model: str

    @property
    def kind(self) -> PolicyKind:
        return policy_kind(self.model)

    @classmethod
    def parse(cls, text: str) -> Arm:
        name, sep, model = text.partition("=")
        if not sep or not name or not model:
            raise PdbgymError("--arm must be NAME=MODEL (MODEL: scripted, embedded, a model folder, an adapter-store "
                              f"name or a URL), got '{text}'")
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise PdbgymError(f"arm name '{name}' may hold only letters, digits, '-', '_' and '.'")
        arm = cls(name, model)
        if arm.kind in INTERACTIVE_POLICIES:
            raise PdbgymError(f"arm '{name}': the {model} policy reads a terminal; play it with `pdbgym run`")
        target, _ = split_constrained(model)  # constrained:FOLDER names FOLDER
        if arm.kind == "path" and not Path(target).exists() and not is_model_ref(target):
            raise PdbgymError(f"arm '{name}': model '{target}' is neither scripted, embedded, a URL, an existing folder, "
                              "nor an adapter-store name or hash (`pdbgym adapters list` shows them)")
        return arm


@dataclass
class CampaignConfig:
    """What a campaign folder holds and is resumed by (stored in ``campaign.json``; a rerun must match).

    Args:
        tasks: the suite name or task folder the tasks came from.
        arms: the policies compared.
        runs: episodes per task per arm. Default 2.
        split: the split evaluated (``None``: all tasks). splits_file: the split file it came from.
        episode: context, turn budget, temperature, top-p and tokens a turn of every episode (model arms
            sample with them). Default ``EPISODE``.
        seed: base of the per-(task, run) sampling seeds, shared by all arms. Default 0.
        task_ids: filled in by ``run_campaign`` with the ids played.
        device: where local-model arms run (``cpu``, ``cuda``); not stored: a campaign may resume on
            another device. Default ``"cpu"``.
    """

    tasks: str
    arms: list[Arm]
    runs: int = 2
    split: str | None = None
    splits_file: str | None = None
    episode: EpisodeSettings = EPISODE
    seed: int = 0
    task_ids: list[str] = field(default_factory=list)
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_setting("runs", self.runs)

    def to_dict(self) -> dict[str, Any]:
        """What ``campaign.json`` holds: the episode settings flat, under the names campaign folders have
        always stored (the context as ``context_tokens``), so a folder of an earlier pdbgym resumes."""
        data = asdict(self)
        episode = data.pop("episode")
        data.update(turn_budget=episode["turn_budget"], temperature=episode["temperature"], top_p=episode["top_p"],
                    max_new_tokens=episode["max_new_tokens"], context_tokens=episode["max_context_tokens"])
        data["arms"] = {a.name: a.model for a in self.arms}
        del data["device"]
        return data


EpisodeFn = Callable[[Task, int, Path], EpisodeResult]
"""An in-process episode function (task, run index, transcript path) -> result, for harness tests."""


def _episode_seed(config: CampaignConfig, task: Task, run_index: int) -> int:
    """A seed per (task, run), the same for every arm: arms differ by policy, not by luck of the draw."""
    return episode_seed(config.seed, task.instance_id, run_index)


def campaign_job(arm: Arm, config: CampaignConfig, task: Task, run_index: int) -> EpisodeJob:
    """The episode of ``arm`` on ``task``, run ``run_index``, as a job for the shared executor."""
    episode = config.episode
    sampling = SamplingParams(episode.temperature, episode.top_p, episode.max_new_tokens,
                              _episode_seed(config, task, run_index))
    agent = AgentConfig(max_context_tokens=episode.max_context_tokens, sampling=sampling,
                        dataset=f"campaign_{arm.name}", sample_idx=run_index)
    return EpisodeJob(str(task.path), task.instance_id, run_index, parse_policy(arm.model, device=config.device), agent,
                      EnvConfig(turn_budget=episode.turn_budget))


def check_arm(arm: Arm, on_ray: bool, device: str = "cpu", params: SamplingParams | None = None,
              tasks: Sequence[Task] = (), max_context_tokens: int | None = None) -> None:
    """Build what the arm's episodes build (model loaded, server reached, tool-call format, a constrained
    arm's grammar at ``params.max_new_tokens``) or its tokenizer now, and with ``max_context_tokens`` check
    that each of ``tasks``' first prompt leaves room for a turn, so a bad arm fails before any episode.

    On Ray the model loads on the cluster's nodes instead, so only a model arm's spec is checked here.
    """
    spec = parse_policy(arm.model, device=device)
    if spec.generates_tokens and on_ray:
        return
    check_policy(spec, params or SamplingParams(), tasks, max_context_tokens, f"arm '{arm.name}' ({arm.model})")


def run_campaign(
    config: CampaignConfig,
    tasks: Sequence[Task],
    out_dir: Path,
    *,
    executor: ExecutorConfig | None = None,
    on_episode: Callable[[EpisodeRow], None] | None = None,
    episode_fns: dict[str, EpisodeFn] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
) -> list[EpisodeRow]:
    """Run every missing (arm, task, run) episode; return the rows of ``config.arms``, old and new.

    Each arm with episodes to play is checked first (``check_arm``), before the folder is written to.

    Episodes run on ``executor`` (default: local processes, one per core). ``episode_fns`` replaces
    the agent loop with in-process functions (one at a time), for tests of the bookkeeping. An
    episode that could not run is left out (a rerun retries it) and reported in one error at the end.
    ``on_plan(already_done, to_play)`` is called once, before the first episode (progress totals).
    """
    reap_stale_workspaces()  # workspaces a killed earlier run left in the temp folder
    store = ResultsStore(out_dir)
    config.task_ids = [t.instance_id for t in tasks]
    store.open(config.to_dict(), check_only=True)
    done = store.done_keys()
    todo = [(arm, task, run) for run in range(config.runs) for task in tasks for arm in config.arms
            if (arm.name, task.instance_id, run) not in done]
    executor = executor or ExecutorConfig()
    if episode_fns is None:  # every setting that would fail each episode fails now, the folder untouched
        episode = config.episode
        params = SamplingParams(episode.temperature, episode.top_p, episode.max_new_tokens)
        for arm in dict.fromkeys(arm for arm, _, _ in todo):
            left = list({t.instance_id: t for a, t, _ in todo if a == arm}.values())  # the tasks it still plays
            check_arm(arm, executor.ray_address is not None, config.device, params, left, episode.max_context_tokens)
    store.open(config.to_dict())
    names = {arm.name for arm in config.arms}

    def keep(arm: Arm, run: int, result: EpisodeResult) -> None:
        transcript = store.transcript_path(arm.name, result.instance_id, run)
        row = EpisodeRow(arm.name, result.instance_id, run, bool(result.final_test_passed),
                         result.termination_reason, result.actions_used, result.duration_s,
                         str(transcript.relative_to(store.out_dir)), result.wrong_site_touched,
                         verdict_refused(result.grading, result.termination_reason), result.commands_cut)
        store.append([row])
        if on_episode is not None:
            on_episode(row)

    kept_before = len(config.arms) * len(tasks) * config.runs - len(todo)
    if on_plan is not None:
        on_plan(kept_before, len(todo))
    try:
        if episode_fns is not None:
            failures = _run_in_process(todo, episode_fns, store, keep)
        else:
            failures = _run_on_executor(todo, config, store, executor, keep)
    except KeyboardInterrupt:
        kept = len(todo) - len(_missing(store, todo))
        raise Interrupted(
            f"interrupted: {kept} new episode(s) saved to {out_dir} ({kept_before + kept} of "
            f"{kept_before + len(todo)} in the campaign); episodes in flight were discarded; rerun the same "
            f"command to resume, or report what is there with `pdbgym eval report {out_dir}`") from None
    raise_failures(failures)
    return [row for row in store.rows() if row.arm in names]  # an arm left out now keeps its rows, unreported


def _missing(store: ResultsStore, todo: list[tuple[Arm, Task, int]]) -> list[tuple[Arm, Task, int]]:
    done = store.done_keys()
    return [(arm, task, run) for arm, task, run in todo if (arm.name, task.instance_id, run) not in done]


def _run_in_process(todo: list[tuple[Arm, Task, int]], fns: dict[str, EpisodeFn], store: ResultsStore,
                    keep: Callable[[Arm, int, EpisodeResult], None]) -> list[str]:
    failures = []
    for arm, task, run in todo:
        try:
            result = fns[arm.name](task, run, store.transcript_path(arm.name, task.instance_id, run))
        except Exception as exc:  # noqa: BLE001 - an infrastructure failure is not a failed solve
            failures.append(f"{arm.name}/{task.instance_id}/run-{run}: {exc!r}")
            continue
        keep(arm, run, result)
    return failures


def _run_on_executor(todo: list[tuple[Arm, Task, int]], config: CampaignConfig, store: ResultsStore,
                     executor: ExecutorConfig, keep: Callable[[Arm, int, EpisodeResult], None]) -> list[str]:
    jobs = [campaign_job(arm, config, task, run) for arm, task, run in todo]
    arm_of = {id(job): arm for job, (arm, _, _) in zip(jobs, todo, strict=True)}
    failures = []
    for done in run_jobs(jobs, executor, run_job):
        arm = arm_of[id(done.job)]
        if done.result is None:
            failures.append(f"{arm.name}/{done.job.instance_id}/run-{done.job.sample_idx}: {done.error!r}")
            continue
        with deferred():  # transcript, record and row all, or (on Ctrl-C before) none
            _save(store, arm, done.result)
            keep(arm, done.job.sample_idx, done.result.episode_result())
    return failures


def _save(store: ResultsStore, arm: Arm, result: JobResult) -> None:
    """The transcript, then the record: a row is written only after both (a kill reruns the episode)."""
    write_json_atomic(store.transcript_path(arm.name, result.instance_id, result.sample_idx), result.transcript)
    append_records(store.out_dir / "cache" / arm.name, [result.record])
