"""Building a teacher cache: tasks x runs played by a policy, written as the teacher-cache format.

Every check that can fail (the policy, the model or server, the cache's vocabulary) runs before the
first episode. Finished episodes are appended as they land, so a rerun resumes where a run stopped.
Episodes run on the shared executor (``pdbgym.agent.executor``), as campaigns' do.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.executor import LOCAL_EPISODES_GPU, ExecutorConfig
from pdbgym.agent.jobs import JobResult
from pdbgym.agent.loop import AgentConfig
from pdbgym.agent.policies import check_policy, parse_policy
from pdbgym.agent.runner import completed_samples, plan_jobs, run_all
from pdbgym.defaults import documented
from pdbgym.env.environment import EnvConfig
from pdbgym.episode_defaults import EpisodeSettings, check_setting, episode_defaults_for
from pdbgym.errors import PdbgymError
from pdbgym.interrupts import Interrupted
from pdbgym.policyname import INTERACTIVE_POLICIES
from pdbgym.sandbox.workspace import reap_stale_workspaces
from pdbgym.tasks.suites import resolve_tasks


@dataclass
class CacheBuildConfig:
    """What ``pdbgym cache build`` takes: every field is a flag of the command, with the help and default declared
    on it (``pdbgym.commandapp.config_command``); ``episode``'s fields are flags by their own names.

    Args:
        policy: ``scripted``, ``embedded``, a model folder, or a server URL (``pdbgym.policyname``).
        out: cache folder to write; a rerun with the same folder resumes it.
        tasks: a suite name (``builtin``, ``regression``) or a task folder. Default ``"builtin"``.
        runs: samples per task; their ``_sample_idx`` is 0..runs-1. Default 1.
        episode: context, turn budget, temperature, top-p and tokens a turn of every episode. Default
            ``EPISODE`` with top-p ``TEACHER_TOP_P`` (0.9, the teacher recipe's).
        dataset: dataset name stored in every record. Default ``"pdbgym_builtin"``.
        workers: episodes at once (``ExecutorConfig.workers``); 0 = one per core; local models play in
            this process, ``local_episodes`` at once. Default 0.
        local_episodes: ``ExecutorConfig.local_episodes`` (0: 48 on a GPU, 1 on CPU). Default 0.
        local_processes: ``ExecutorConfig.local_processes``: processes that share a local model's
            episodes, each with its own copy of the model. Default 1.
        command_timeout_s: seconds before a pdb command is interrupted. Default 10.0.
        seed: base seed; each episode gets ``pdbgym.seeds.episode_seed(seed, task id, sample_idx)``.
            Default None (unseeded).
        tokenizer: tokenizer of action policies and server conversations (``embedded`` or a folder).
        api: server protocol: ``auto``, ``chat`` or ``sglang``. Default ``"auto"``.
        logprob_mode: what a chat server's log-probs are: ``raw``, ``tempered`` or ``processed``.
        tool_format: ``qwen3_xml``, ``hermes`` or ``text``; None reads it from the chat template.
        device: device of local models (``cpu``, ``cuda``). Default ``"cpu"``.
        ray_address: None runs locally; ``"local"`` starts or joins a Ray cluster here; else its address.
    """

    policy: str = documented(help="scripted | embedded | a model folder | a server URL")
    out: Path = documented(help="Cache folder to write (a rerun resumes it)")
    tasks: str = documented("builtin", "A suite name (builtin, regression) or a task folder")
    runs: int = documented(1, "Samples per task (their _sample_idx is 0..runs-1)")
    episode: EpisodeSettings = documented(
        episode_defaults_for("cache build"), "the settings of every episode",
        inner={"temperature": "Sampling temperature (0 = greedy)", "top_p": "Top-p nucleus mass, in (0, 1]",
               "max_context_tokens": "Trajectory cap (tokens): ctx_overflow"})
    dataset: str = documented("pdbgym_builtin", "Dataset name stored in every record")
    workers: int = documented(0, "Parallel episodes (0: all cores; local models: --local-episodes)", min=0)
    local_episodes: int = documented(
        0, f"Local-model episodes at once, turns batched (0: {LOCAL_EPISODES_GPU} on a GPU, 1 on CPU)", min=0)
    local_processes: int = documented(
        1, "Processes sharing a local model's episodes, each with its own copy of the model (1: this one)", min=1)
    command_timeout_s: float = documented(EnvConfig.command_timeout_s, "Seconds before a pdb command is interrupted")
    seed: int | None = documented(None, "Base seed (each episode gets its own derived seed)")
    tokenizer: str = documented("embedded", "Tokenizer for scripted policies and server URLs")
    api: str = documented("auto", "Server protocol: auto | chat | sglang")
    logprob_mode: str = documented("raw", "What a chat server's log-probs are: raw | tempered | processed")
    tool_format: str | None = documented(None, "qwen3_xml | hermes | text (default: from the template)")
    device: str = documented("cpu", "Device for local models (cpu, cuda)")
    ray_address: str | None = documented(None, "Fan episodes over Ray at this address ('local' starts one here)")

    def __post_init__(self) -> None:
        check_setting("runs", self.runs)


class CacheBuildSummary(TypedDict):
    """What ``build_cache`` did: the cache, episodes played and skipped (already there), how they ended, the
    solved ones, the wall time and the rate (None when none was played)."""

    out: str
    episodes_run: int
    episodes_skipped_already_done: int
    termination_reasons: dict[str, int]
    solved: int
    wall_seconds: float
    episodes_per_minute: float | None


def build_cache(config: CacheBuildConfig, on_result: Callable[[JobResult, int], None] | None = None,
                on_plan: Callable[[int, int], None] | None = None) -> CacheBuildSummary:
    """Play every missing (task, sample) and append it to ``config.out``; return a summary dict.

    ``on_plan(already_done, to_play)`` is called once before the first episode, ``on_result(result,
    total)`` as each episode lands. The summary holds ``out``,
    ``episodes_run``, ``episodes_skipped_already_done``, ``termination_reasons``, ``solved``,
    ``wall_seconds`` and ``episodes_per_minute``.
    """
    reap_stale_workspaces()  # workspaces a killed earlier build left in the temp folder
    task_list = resolve_tasks(config.tasks)
    if config.policy in INTERACTIVE_POLICIES:
        raise PdbgymError(f"--policy {config.policy} reads a terminal; play it with `pdbgym run`")
    spec = parse_policy(config.policy, tokenizer=config.tokenizer, api=config.api,
                        logprob_mode=config.logprob_mode, device=config.device, tool_format=config.tool_format)
    # Build (and so check) what every episode builds here, before any episode starts: the backend or
    # tokenizer, the tool-call format, a constrained policy's grammar at this turn cap, room for a turn.
    episode = config.episode
    sampling = SamplingParams(episode.temperature, episode.top_p, episode.max_new_tokens, None)
    vocab_source = check_policy(spec, sampling, task_list, episode.max_context_tokens, f"--policy {config.policy}")
    done = completed_samples(config.out, vocab_source)
    agent = AgentConfig(max_context_tokens=episode.max_context_tokens, dataset=config.dataset,
                        sampling=sampling)
    env = EnvConfig(turn_budget=episode.turn_budget, command_timeout_s=config.command_timeout_s)
    jobs = plan_jobs(task_list, config.runs, spec, agent, env, done, config.seed)
    if on_plan is not None:
        on_plan(len(task_list) * config.runs - len(jobs), len(jobs))
    started = time.perf_counter()
    reasons: Counter[str] = Counter()

    def advance(result: JobResult) -> None:
        reasons[result.record.metadata["_termination_reason"]] += 1
        if on_result is not None:
            on_result(result, len(jobs))

    executor = ExecutorConfig(config.workers, config.ray_address, config.local_episodes, config.local_processes)
    try:
        results = run_all(jobs, config.out, executor, on_result=advance)
    except KeyboardInterrupt:
        # Count what is on disk: an episode can land between the cache's write and its callback.
        kept = len(completed_samples(config.out, None) - done)
        raise Interrupted(
            f"interrupted: {kept} new episode(s) saved to {config.out} ({len(done) + kept} of "
            f"{len(done) + len(jobs)} in the cache); episodes in flight were discarded; rerun the same "
            "command to resume") from None
    seconds = time.perf_counter() - started
    return {
        "out": str(config.out), "episodes_run": len(results), "episodes_skipped_already_done": len(done),
        "termination_reasons": dict(reasons), "solved": reasons.get("solved", 0), "wall_seconds": round(seconds, 2),
        "episodes_per_minute": round(60 * len(results) / seconds, 2) if results and seconds > 0 else None,
    }
