"""Turn sources: what produces the assistant turns of an episode.

``ModelTurns`` asks a backend to sample each turn (ids and log-probs as sampled). ``ActionPolicyTurns``
wraps a policy that returns ``Action`` objects (scripted, human): each action is written in the
tool-call format, tokenized with the chosen tokenizer and closed with its end-of-turn token; these ids
carry loss_mask 1 and log-prob 0.0, so such trajectories can seed SFT. A deterministic policy (scripted)
records semantics ``engine="deterministic"``: its turns have probability 1, so 0.0 is exact; a person's
turns record ``engine="none"``: no distribution, 0.0 is a placeholder.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Protocol

from pdbgym.agent.backends.base import Backend, Generation, GenerationRequest, SamplingParams
from pdbgym.agent.policy import Policy
from pdbgym.agent.toolcalls import render_tool_call
from pdbgym.rollouts.record import LogprobSemantics
from pdbgym.tasks.model import Task

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase

NO_LOGPROBS = LogprobSemantics(engine="none", temperature=1.0)
# A policy that writes the same turn in the same state (``deterministic = True``, e.g. scripted) is a
# point mass: log p = 0 is its exact log-prob, not a placeholder.
POINT_MASS = LogprobSemantics(engine="deterministic", temperature=1.0)


class TurnSource(Protocol):
    name: str
    tokenizer: PreTrainedTokenizerBase
    semantics: LogprobSemantics

    def reset(self, task: Task, observation: str) -> None: ...

    async def next_turn(self, request: GenerationRequest, last_observation: str) -> Generation: ...


class ModelTurns:
    """Turns sampled by a model backend under fixed sampling parameters."""

    def __init__(self, backend: Backend, params: SamplingParams):
        self.backend = backend
        self.params = params
        self.name = backend.name
        self.tokenizer = backend.tokenizer
        self.semantics = backend.semantics(params)

    def reset(self, task: Task, observation: str) -> None:
        return None

    async def next_turn(self, request: GenerationRequest, last_observation: str) -> Generation:
        return await self.backend.generate(request)


class ActionPolicyTurns:
    """Turns written by an action policy (``policy.reset(task, obs)``, ``policy.next_action(obs)``).

    A policy that reads a terminal (``interactive``) is asked in this thread, so Ctrl-C reaches it;
    others run in a worker thread so the event loop stays free.
    """

    def __init__(self, policy: Policy, tokenizer: PreTrainedTokenizerBase, tool_format: str, name: str):
        self.policy = policy
        self.tokenizer = tokenizer
        self.tool_format = tool_format
        self.name = name
        self.semantics = POINT_MASS if getattr(policy, "deterministic", False) else NO_LOGPROBS
        if tokenizer.eos_token_id is None:
            raise ValueError(f"tokenizer {name} has no eos token to close an assistant turn with")

    def reset(self, task: Task, observation: str) -> None:
        self.policy.reset(task, observation)

    async def next_turn(self, request: GenerationRequest, last_observation: str) -> Generation:
        started = time.perf_counter()
        if getattr(self.policy, "interactive", False):
            action = self.policy.next_action(last_observation)
        else:
            action = await asyncio.to_thread(self.policy.next_action, last_observation)
        text = render_tool_call(action, self.tool_format)
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) + [self.tokenizer.eos_token_id]
        full_text = text + self.tokenizer.decode([self.tokenizer.eos_token_id], skip_special_tokens=False)
        return Generation(ids, [0.0] * len(ids), full_text, "stop", model_seconds=time.perf_counter() - started)
