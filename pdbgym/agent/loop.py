"""The episode loop: one linear conversation between a turn source and a ``DebugEnv``.

The trajectory is the prompt: every assistant turn and every observation is appended, nothing is
rewritten. Each turn is parsed into one tool call and executed; a malformed call is answered with an
error observation, and ``max_malformed`` malformed calls in a row end the episode as ``other``.
Other ends: the env's turn budget (``budget``), ``submit`` (``solved`` / ``finish_unresolved`` by
grading), the context budget in tokens (``ctx_overflow``). A turn source that fails (a backend error,
a server gone, a CUDA fault in the engine) ends no episode: ``run_episode`` raises ``TurnSourceFailed``
after closing the env, since such an episode says nothing about the policy; campaigns and cache builds
count it as not run (a rerun plays it), never as unsolved.
A Ctrl-C while a person types a turn (the ``human`` policy) also ends it as ``other``; the outcome is
then marked ``interrupted`` so the caller can save what happened and stop. A person's input that ends
(EOF) ends the episode as ``other`` too.

Every caller plays episodes through ``run_episode``: ``pdbgym run``, campaigns and cache builds (via
``pdbgym.agent.runner.run_job``) and the trainers. Action policies (scripted, human) and model
backends both reach it as a ``TurnSource`` (``pdbgym.agent.turns``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from pdbgym.agent.backends.base import (
    ChatMessage,
    EpisodeTranscript,
    Generation,
    GenerationRequest,
    SamplingParams,
    tokenizer_info,
)
from pdbgym.agent.prompts import system_prompt
from pdbgym.agent.toolcalls import ToolCallError, parse_tool_call
from pdbgym.agent.trajectory import ChatTemplate, TokenTrajectory, check_decodes_to
from pdbgym.agent.turns import TurnSource
from pdbgym.env.environment import DebugEnv, EpisodeResult
from pdbgym.env.tools import tool_specs
from pdbgym.episode_defaults import EPISODE
from pdbgym.errors import PdbgymError
from pdbgym.rollouts.record import RecordMetadata, RewardExtra, RolloutRecord
from pdbgym.seeds import turn_seed
from pdbgym.tasks.model import Task

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase

P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class AgentConfig:
    """Agent-side settings of one episode. Token counts are tokens of the trajectory (prompt + response).

    Args:
        tool_format: how turns write tool calls: ``text``, ``qwen3_xml`` or ``hermes``
            (``agent.toolcalls.FORMATS``); callers usually take it from the tokenizer's chat template.
        max_context_tokens: trajectory cap; a turn may use only the room left, and none left ends the
            episode as ``ctx_overflow``. Default ``EPISODE.max_context_tokens`` (32,768).
        sampling: temperature, top_p, max_new_tokens (per turn), seed. Default ``SamplingParams()``.
        max_malformed: malformed tool calls in a row that end the episode as ``other``. Default 3.
        dataset: the record's ``_eval_dataset_name``. Default ``"pdbgym"``.
        sample_idx: the record's ``_sample_idx`` (which sample of this task). Default 0.
        check_trajectory: decode the ids at the end and compare them with the transcript text
            (``TrajectoryDriftError`` on a mismatch). Default True.
    """

    tool_format: str = "text"
    max_context_tokens: int = EPISODE.max_context_tokens
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_malformed: int = 3
    dataset: str = "pdbgym"
    sample_idx: int = 0
    check_trajectory: bool = True


@dataclass
class EpisodeOutcome:
    """One finished episode: its record, readable transcript and where the time went (seconds)."""

    record: RolloutRecord
    transcript: EpisodeTranscript
    model_seconds: float
    env_seconds: float
    wall_seconds: float
    interrupted: bool = False  # ended by Ctrl-C at a person's turn


class TurnSourceFailed(PdbgymError):
    """The turn source raised: the episode could not be played (not a failed solve)."""


@dataclass(frozen=True)
class _Ending:
    """Why the agent side ended an episode (the env ends it on its own otherwise)."""

    reason: str
    detail: str
    interrupted: bool = False


def episode_template(tokenizer: PreTrainedTokenizerBase, tool_format: str) -> ChatTemplate:
    """The chat template an episode renders with: native formats pass the tool schemas (``tools=``) and
    answer with role ``tool``; ``text`` lists the tools in the system prompt and answers as ``user``."""
    native = tool_format != "text"
    return ChatTemplate(tokenizer, "tool" if native else "user", tool_specs() if native else None)


def first_messages(tool_format: str, first_observation: str) -> list[ChatMessage]:
    """The system prompt and the first user message (``env.reset()``'s observation) of an episode."""
    return [{"role": "system", "content": system_prompt(tool_format, tool_specs())},
            {"role": "user", "content": first_observation}]


class Conversation:
    """The chat messages and the token trajectory of one episode, grown together."""

    def __init__(self, turns: TurnSource, tool_format: str, first_observation: str):
        self.tokenizer = turns.tokenizer
        self.template = episode_template(turns.tokenizer, tool_format)
        self.messages: list[ChatMessage] = first_messages(tool_format, first_observation)
        prompt = self.template.render(self.messages, add_generation_prompt=True)
        self.trajectory = TokenTrajectory(prompt, self.template.encode(prompt))
        self._stop_text: str | None = None

    def request(self, params: SamplingParams) -> GenerationRequest:
        """The next turn's request; a seeded episode's turn draws with its own ``turn_seed``."""
        ids = self.trajectory.all_ids()
        if params.seed is not None:
            params = replace(params, seed=turn_seed(params.seed, len(ids)))
        return GenerationRequest(ids, self.messages, self.template.tools, params)

    def add_turn(self, turn: Generation) -> str:
        """Append a sampled turn; return its text without the end-of-turn token (what gets parsed)."""
        self.trajectory.add_generated(turn.token_ids, turn.logprobs, turn.text)
        closed = turn.finish_reason == "stop" and turn.token_ids
        self._stop_text = self.tokenizer.decode(turn.token_ids[-1:], skip_special_tokens=False) if closed else None
        content = turn.text[: len(turn.text) - len(self._stop_text)] if self._stop_text else turn.text
        self.messages.append({"role": "assistant", "content": content})
        return content

    def add_observation(self, observation: str) -> None:
        delta = self.template.observation_delta(observation, self._stop_text)
        self.trajectory.add_template(self.template.encode(delta), delta)
        self.messages.append({"role": self.template.observation_role, "content": observation})


def check_tool_turns(tokenizer: PreTrainedTokenizerBase, tool_format: str, label: str) -> None:
    """Refuse, before any episode, a chat template that cannot lay out pdbgym's conversation: none at all,
    one that does not render an assistant turn's words as written (the trajectory appends the sampled ids
    and then the template's text after them), or one that drops the turn carrying tool output (role
    ``tool`` for native tool formats, ``user`` for ``text``)."""
    native = tool_format != "text"
    template = episode_template(tokenizer, tool_format)
    said, seen = "b app.py:3  # pdbgym-check", "pdbgym-observation-7f3a"
    messages: list[ChatMessage] = [*first_messages(tool_format, "the task"), {"role": "assistant", "content": said},
                {"role": template.observation_role, "content": seen}]
    try:
        full = template.render(messages, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - a template raising on a role is the answer asked for
        problem = f"it raises on a {template.observation_role!r} turn ({exc})"
    else:
        problem = ""
        if said not in full:
            problem = "it does not render an assistant turn's words as written"
        elif seen not in full[full.index(said):]:
            problem = f"it drops the {template.observation_role!r} turn that carries tool output"
    if problem:
        hint = "use a model whose template renders tool turns" + (", or a text-protocol model" if native else "")
        raise PdbgymError(f"the chat template of {label} cannot render pdbgym's tool turns: {problem}; {hint}")


class _Clock:
    """Seconds spent in the environment (blocking calls run in a thread so model I/O can overlap)."""

    def __init__(self) -> None:
        self.env_seconds = 0.0
        self.model_seconds = 0.0

    async def env(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        started = time.perf_counter()
        try:
            return await in_thread_to_the_end(call, *args, **kwargs)
        finally:
            self.env_seconds += time.perf_counter() - started


async def in_thread_to_the_end(call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``call`` in a worker thread; a cancelled caller still waits for it before the cancellation goes on.

    A thread cannot be stopped, and an environment must not be closed while one of its calls still
    runs: so on Ctrl-C (the episode's task cancelled) the step in progress finishes, then the episode
    unwinds and closes its environment.
    """
    running = asyncio.ensure_future(asyncio.to_thread(call, *args, **kwargs))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        while not running.done():
            with suppress(asyncio.CancelledError):
                await asyncio.shield(running)
        raise


async def run_episode(task: Task, turns: TurnSource, env: DebugEnv, config: AgentConfig) -> EpisodeOutcome:
    """Play one episode of ``task`` in ``env`` (a fresh ``DebugEnv``, closed here) with ``turns``."""
    started, clock = time.perf_counter(), _Clock()
    ending: _Ending | None = None
    try:
        observation = await clock.env(env.reset)
        turns.reset(task, observation)
        conversation = Conversation(turns, config.tool_format, observation)
        ending = await _play(conversation, turns, env, config, clock, observation)
        if ending is not None:
            await clock.env(env.terminate, ending.reason, detail=ending.detail)
        result, env_transcript = env.result, env.transcript
        assert result is not None
    finally:
        await in_thread_to_the_end(env.close)
    trajectory = conversation.trajectory
    if config.check_trajectory:
        check_decodes_to(turns.tokenizer, trajectory.all_ids(), trajectory.expected_text(), task.instance_id)
    transcript: EpisodeTranscript = {"instance_id": task.instance_id, "sample_idx": config.sample_idx, "policy": turns.name,
                  "tool_format": config.tool_format, "termination_reason": result.termination_reason,
                  "final_test_passed": result.final_test_passed, "actions_used": result.actions_used,
                  "messages": conversation.messages, "env": env_transcript}
    return EpisodeOutcome(_record(task, turns, config, trajectory, result), transcript, clock.model_seconds,
                          clock.env_seconds, time.perf_counter() - started,
                          interrupted=ending is not None and ending.interrupted)


async def _play(conversation: Conversation, turns: TurnSource, env: DebugEnv, config: AgentConfig, clock: _Clock,
                observation: str) -> _Ending | None:
    """Turns until the env says done (returns None) or the agent side ends the episode."""
    malformed_in_a_row = 0
    while True:
        room = config.max_context_tokens - len(conversation.trajectory)
        if room <= 0:
            return _Ending("ctx_overflow", f"trajectory reached {len(conversation.trajectory)} tokens")
        params = replace(config.sampling, max_new_tokens=min(config.sampling.max_new_tokens, room))
        try:
            turn = await turns.next_turn(conversation.request(params), observation)
        except KeyboardInterrupt:  # only a turn read from a terminal runs in this thread
            return _Ending("other", f"the {turns.name} policy was interrupted (Ctrl-C)", interrupted=True)
        except EOFError as exc:  # a person's input ended (Ctrl-D, a closed pipe): their episode ends here
            return _Ending("other", f"the {turns.name} policy's input ended: EOFError: {exc}")
        except Exception as exc:  # infrastructure, not the policy: the episode is not played (run_episode)
            raise TurnSourceFailed(f"the {turns.name} policy failed to give a turn (the episode is not "
                                   f"counted; a rerun plays it): {type(exc).__name__}: {exc}") from exc
        clock.model_seconds += turn.model_seconds
        content = conversation.add_turn(turn)
        try:
            action = parse_tool_call(content, config.tool_format)
        except ToolCallError as exc:
            malformed_in_a_row += 1
            if malformed_in_a_row >= config.max_malformed:
                return _Ending("other", f"{malformed_in_a_row} malformed tool calls in a row")
            observation = f"Error: {exc}"
        else:
            malformed_in_a_row = 0
            step = await clock.env(env.step, action)
            if step.done:
                return None
            observation = step.observation
        conversation.add_observation(observation)


def _record(task: Task, turns: TurnSource, config: AgentConfig, trajectory: TokenTrajectory,
            result: EpisodeResult) -> RolloutRecord:
    metadata: RecordMetadata = {
        "instance_id": task.instance_id,
        "_eval_dataset_name": config.dataset,
        "task_type": "pdb_debug",
        "_termination_reason": result.termination_reason,
        "actions_used": result.actions_used,
        "_sample_idx": config.sample_idx,
        "tokenizer": tokenizer_info(turns.tokenizer),
        "policy": turns.name,
        "tool_format": config.tool_format,
        "wrong_site_touched": result.wrong_site_touched,  # None: the task declares no wrong site
    }
    extra: RewardExtra = {"final_test_passed": bool(result.final_test_passed), "duration_s": float(result.duration_s)}
    return trajectory.to_record(task.instance_id, config.dataset, 1.0 if result.final_test_passed else 0.0,
                                metadata, turns.semantics, extra)
