"""One episode of any policy by name (``pdbgym run``): scripted, human, embedded, a model folder or a URL."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

from pdbgym.agent.backends.base import BackendError, SamplingParams
from pdbgym.agent.jobs import EpisodeJob
from pdbgym.agent.loop import AgentConfig, run_episode
from pdbgym.agent.policies import PolicySpec, build_backend, parse_policy, tokenizer_named, tool_format_for
from pdbgym.agent.policy import Policy
from pdbgym.agent.runner import run_job, run_to_end
from pdbgym.agent.turns import ActionPolicyTurns
from pdbgym.defaults import documented
from pdbgym.env.environment import DebugEnv, EnvConfig, EpisodeResult
from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic
from pdbgym.interrupts import clear_stop
from pdbgym.sandbox import Sandbox
from pdbgym.seeds import episode_seed
from pdbgym.tasks.model import Task
from pdbgym.tasks.suites import resolve_task


@dataclass
class RunConfig:
    """What ``pdbgym run`` takes: every field is a flag of the command, with the help and default declared on it
    (``pdbgym.commandapp.config_command``); ``env``'s and ``sampling``'s fields with a flag are flags by their
    own names (``--turn-budget``, ``--sandbox``, ``--temperature``, ``--max-new-tokens``).

    Args:
        task: a built-in task id or a task folder.
        policy: ``scripted`` (reference patch), ``human`` (you, at the terminal), ``embedded``, a model
            folder, or a server URL (``pdbgym.policyname``). Default ``"scripted"``.
        env: the episode's settings (turn budget, sandbox, ...). Default ``EnvConfig()``.
        sampling: how a model policy samples (temperature, top_p, max_new_tokens, seed). Default
            ``SamplingParams()``: temperature 0.7, top_p 1.0, 512 tokens per turn, unseeded.
        transcript: where the JSON transcript goes; None: ``runs/episodes/<id>-<unix time>.json``.
        seed: base seed; the episode samples with ``pdbgym.seeds.episode_seed(seed, task id, 0)`` (run 0,
            as the first sample of a cache build or a campaign). Default None (unseeded).
    """

    task: str = documented(help="A built-in task id or a task folder")
    policy: str = documented("scripted", "scripted (reference patch), human (you, at the terminal), embedded, "
                                         "a model folder, or a server URL")
    env: EnvConfig = documented(help="the episode's settings", factory=EnvConfig,
                                inner={"command_timeout_s": None})  # run shows no --command-timeout-s
    sampling: SamplingParams = documented(help="how a model policy samples", factory=SamplingParams,
                                          inner={"top_p": None})  # run plays at top-p 1.0, no flag
    transcript: Path | None = documented(None, "Where to write the JSON transcript")
    seed: int | None = documented(None, "Base seed (the episode samples with its derived seed)")


def play_episode(task: Task, policy: str, env_config: EnvConfig, transcript_path: Path, *,
                 sampling: SamplingParams | None = None) -> EpisodeResult:
    """Play ``task`` once with ``policy`` and write the transcript to ``transcript_path``.

    Every policy goes through the one episode loop (``pdbgym.agent.loop.run_episode``), in this
    thread so a person's Ctrl-C reaches it: the episode then ends as ``other``, its transcript is
    written, and ``KeyboardInterrupt`` is raised again. The transcript holds the chat messages and the
    environment's own transcript (``env``: steps, grading).

    An episode is a new batch of work: a stop left in this process by earlier work (an executor loop the
    caller left early stops its jobs, ``pdbgym.interrupts``) is forgotten, as ``run_jobs`` forgets it.
    """
    clear_stop()
    try:
        spec = parse_policy(policy)
        # Load the model, reach the server or load the tokenizer before the episode starts.
        if spec.generates_tokens:
            build_backend(spec)
        else:
            tokenizer_named(spec.tokenizer)
    except BackendError as exc:
        raise PdbgymError(f"policy '{policy}': {exc}") from exc
    agent = AgentConfig(sampling=sampling or SamplingParams(), dataset="run")
    result = run_job(EpisodeJob(str(task.path), task.instance_id, 0, spec, agent, env_config))
    write_json_atomic(transcript_path, result.transcript)
    if result.interrupted:
        raise KeyboardInterrupt
    return result.episode_result()


def play_policy(task: Task, policy: Policy, env_config: EnvConfig | None = None, *,
                transcript_path: Path | None = None, sandbox: Sandbox | None = None,
                tokenizer: str = "embedded") -> EpisodeResult:
    """Play ``task`` once with an action-policy object (a custom or test policy) through the one loop.

    ``tokenizer`` (``embedded`` or a folder) tokenizes the policy's turns for the record. Failures and
    Ctrl-C end the episode as ``play_episode`` describes; the transcript is written when a path is given.
    """
    clear_stop()  # a new batch of work, as play_episode's
    loaded = tokenizer_named(tokenizer)
    tool_format = tool_format_for(PolicySpec(kind="scripted", tokenizer=tokenizer), loaded)
    turns = ActionPolicyTurns(policy, loaded, tool_format, policy.name)
    env = DebugEnv(task, env_config, sandbox)
    outcome = run_to_end(run_episode(task, turns, env, AgentConfig(tool_format=tool_format, dataset="run")))
    if transcript_path is not None:
        write_json_atomic(transcript_path, outcome.transcript)
    if outcome.interrupted:
        raise KeyboardInterrupt
    assert env.result is not None
    return env.result


def run_one(config: RunConfig) -> tuple[EpisodeResult, Path]:
    """``pdbgym run``: resolve the task, play it, write the transcript; the result and where it went."""
    task = resolve_task(config.task)
    target = config.transcript or Path("runs") / "episodes" / f"{task.instance_id}-{int(time.time())}.json"
    sampling = config.sampling if config.seed is None else replace(
        config.sampling, seed=episode_seed(config.seed, task.instance_id, 0))
    return play_episode(task, config.policy, config.env, target, sampling=sampling), target
