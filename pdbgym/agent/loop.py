"""The episode loop: one linear conversation between a turn source and a ``DebugEnv``.

The trajectory is the prompt: every assistant turn and every observation is appended, nothing is
rewritten. Each turn is parsed into one tool call and executed; a malformed call is answered with an
error observation, and ``max_malformed`` malformed calls in a row end the episode as ``other``.
Other ends: the env's turn budget (``budget``), ``submit`` (``solved`` / ``finish_unresolved`` by
grading), the context budget in tokens (``ctx_overflow``), and any backend failure (``other``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from pdbgym.agent.backends.base import GenerationRequest, SamplingParams, tokenizer_info
from pdbgym.agent.prompts import system_prompt
from pdbgym.agent.toolcalls import ToolCallError, parse_tool_call
from pdbgym.agent.trajectory import ChatTemplate, TokenTrajectory, check_decodes_to
from pdbgym.agent.turns import TurnSource
from pdbgym.rollouts.record import RolloutRecord


@dataclass
class AgentConfig:
    """Agent-side limits. Token counts are tokens of the trajectory (prompt + response)."""

    tool_format: str = "text"
    max_context_tokens: int = 32768
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_malformed: int = 3
    dataset: str = "pdbgym"
    sample_idx: int = 0
    check_trajectory: bool = True


@dataclass
class EpisodeOutcome:
    """One finished episode: its record, readable transcript and where the time went (seconds)."""

    record: RolloutRecord
    transcript: dict[str, Any]
    model_seconds: float
    env_seconds: float
    wall_seconds: float


async def run_episode(task: Any, turns: TurnSource, env: Any, config: AgentConfig) -> EpisodeOutcome:
    """Play one episode of ``task`` in ``env`` (a fresh ``DebugEnv``; closed here) with ``turns``."""
    started = time.perf_counter()
    model_seconds = env_seconds = 0.0
    native = config.tool_format != "text"
    from pdbgym.env.tools import tool_specs

    template = ChatTemplate(turns.tokenizer, "tool" if native else "user", tool_specs() if native else None)
    try:
        observation = await asyncio.to_thread(env.reset)
        env_seconds += time.perf_counter() - started
        turns.reset(task, observation)
        messages = [{"role": "system", "content": system_prompt(config.tool_format, tool_specs())},
                    {"role": "user", "content": observation}]
        prompt_text = template.render(messages, add_generation_prompt=True)
        trajectory = TokenTrajectory(prompt_text, template.encode(prompt_text))
        malformed_in_a_row, end_detail = 0, None
        while True:
            room = config.max_context_tokens - len(trajectory)
            if room <= 0:
                end_detail = ("ctx_overflow", f"trajectory reached {len(trajectory)} tokens")
                break
            params = SamplingParams(config.sampling.temperature, config.sampling.top_p,
                                    min(config.sampling.max_new_tokens, room), config.sampling.seed)
            request = GenerationRequest(trajectory.all_ids(), messages, template.tools, params)
            try:
                turn = await turns.next_turn(request, observation)
            except Exception as exc:  # a failing backend ends only this episode
                end_detail = ("other", f"turn source failed: {type(exc).__name__}: {exc}")
                break
            model_seconds += turn.model_seconds
            trajectory.add_generated(turn.token_ids, turn.logprobs, turn.text)
            stop_text = _stop_text(turns, turn.token_ids) if turn.finish_reason == "stop" else None
            content = turn.text[: len(turn.text) - len(stop_text)] if stop_text else turn.text
            messages.append({"role": "assistant", "content": content})
            try:
                action = parse_tool_call(content, config.tool_format)
                malformed_in_a_row = 0
            except ToolCallError as exc:
                malformed_in_a_row += 1
                if malformed_in_a_row >= config.max_malformed:
                    end_detail = ("other", f"{malformed_in_a_row} malformed tool calls in a row")
                    break
                observation = f"Error: {exc}"
            else:
                step_started = time.perf_counter()
                step = await asyncio.to_thread(env.step, action)
                env_seconds += time.perf_counter() - step_started
                if step.done:
                    break
                observation = step.observation
            delta = template.observation_delta(observation, stop_text)
            trajectory.add_template(template.encode(delta), delta)
            messages.append({"role": template.observation_role, "content": observation})
        if end_detail is not None:
            end_started = time.perf_counter()
            await asyncio.to_thread(env.terminate, end_detail[0], detail=end_detail[1])
            env_seconds += time.perf_counter() - end_started
        result = env.result
        env_transcript = env.transcript
    finally:
        await asyncio.to_thread(env.close)
    if config.check_trajectory:
        check_decodes_to(turns.tokenizer, trajectory.all_ids(), trajectory.expected_text(), task.instance_id)
    record = _record(task, turns, config, trajectory, result)
    transcript = {"instance_id": task.instance_id, "sample_idx": config.sample_idx, "policy": turns.name,
                  "tool_format": config.tool_format, "termination_reason": result.termination_reason,
                  "final_test_passed": result.final_test_passed, "actions_used": result.actions_used,
                  "messages": messages, "env": env_transcript}
    return EpisodeOutcome(record, transcript, model_seconds, env_seconds, time.perf_counter() - started)


def _stop_text(turns: TurnSource, token_ids: list[int]) -> str:
    return turns.tokenizer.decode(token_ids[-1:], skip_special_tokens=False) if token_ids else ""


def _record(task: Any, turns: TurnSource, config: AgentConfig, trajectory: TokenTrajectory,
            result: Any) -> RolloutRecord:
    metadata = {
        "instance_id": task.instance_id,
        "_eval_dataset_name": config.dataset,
        "task_type": "pdb_debug",
        "_termination_reason": result.termination_reason,
        "actions_used": result.actions_used,
        "_sample_idx": config.sample_idx,
        "tokenizer": tokenizer_info(turns.tokenizer),
        "policy": turns.name,
        "tool_format": config.tool_format,
    }
    extra = {"final_test_passed": bool(result.final_test_passed), "duration_s": float(result.duration_s)}
    return trajectory.to_record(task.instance_id, config.dataset, 1.0 if result.final_test_passed else 0.0,
                                metadata, turns.semantics, extra)
