"""Replay backend: plays back recorded assistant turns (token ids and their log-probs) in order.

Uses: re-running a recorded rollout's turns against a fresh environment (re-grading, checking a
cache), and driving the loop with exact, known ids in tests (e.g. non-canonical tokenizations that
re-encoding would change). It samples nothing; its semantics are those of the recording.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdbgym.agent.backends.base import (
    BackendError,
    Generation,
    GenerationRequest,
    SamplingParams,
    stop_token_ids,
)
from pdbgym.rollouts.record import LogprobSemantics

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase


class ReplayBackend:
    """Return ``turns[k]`` (``(ids, logprobs)``) as the k-th generation; error when they run out."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, turns: list[tuple[list[int], list[float]]],
                 semantics: LogprobSemantics, name: str = "replay"):
        self.tokenizer, self.name, self._semantics = tokenizer, name, semantics
        self.turns = list(turns)
        self.next_index = 0
        self.stops = stop_token_ids(tokenizer)

    def semantics(self, params: SamplingParams) -> LogprobSemantics:
        return self._semantics

    async def generate(self, request: GenerationRequest) -> Generation:
        if self.next_index >= len(self.turns):
            raise BackendError(f"replay backend {self.name} has no turn {self.next_index + 1} "
                               f"(it holds {len(self.turns)})")
        ids, logprobs = self.turns[self.next_index]
        self.next_index += 1
        finish = "stop" if ids and ids[-1] in self.stops else "length"
        return Generation(list(ids), list(logprobs), self.tokenizer.decode(ids, skip_special_tokens=False), finish)

    async def aclose(self) -> None:
        return None
