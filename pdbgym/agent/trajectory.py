"""Token-exact trajectories: the token sequence is built by concatenation, never by re-tokenizing.

``tokens = prompt_ids + turn_1_generated + delta_1 + turn_2_generated + delta_2 + ...`` where each
``turn_k_generated`` is the ids exactly as sampled (loss_mask 1, their log-probs) and ``delta_k`` is the
chat-template text between turns (end-of-turn if the model did not sample it, the observation's
message, the next assistant header) tokenized on its own (loss_mask 0, log-prob 0.0). Generated text is
never decoded and re-encoded: decode -> encode is not the identity (e.g. ``"hel" + "lo"`` sampled as two
tokens re-encodes as one ``"hello"``), and a trajectory rebuilt from text would hold ids the model never
sampled, with log-probs that belong to other ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pdbgym.agent.backends.base import ChatMessage
from pdbgym.env.tools import ToolSpec
from pdbgym.errors import PdbgymError
from pdbgym.rollouts.record import LogprobSemantics, RecordMetadata, RewardExtra, RolloutRecord

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase

_PLACEHOLDER = "PDBGYM_ASSISTANT_TURN_7f3a"


class TrajectoryDriftError(PdbgymError):
    """A trajectory's ids do not decode to the text of its transcript."""


class ChatTemplate:
    """Renders the prompt and the between-turn deltas of one tokenizer's chat template.

    ``observation_role`` is ``tool`` for templates with tool calling and ``user`` for the text
    protocol (a plain ChatML model has never seen a tool role). ``tools`` are passed to templates that
    accept them so the tool list appears in the prompt exactly as the model was trained to see it.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, observation_role: str, tools: list[ToolSpec] | None):
        if not getattr(tokenizer, "chat_template", None):
            raise PdbgymError(f"tokenizer {getattr(tokenizer, 'name_or_path', '?')} has no chat template; "
                              "pdbgym needs one to lay out the conversation")
        self.tokenizer = tokenizer
        self.observation_role = observation_role
        self.tools = tools

    def render(self, messages: list[ChatMessage], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=self.tools, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def observation_delta(self, observation: str, end_of_turn_sampled: str | None) -> str:
        """Text after an assistant turn up to the next assistant header, holding ``observation``.

        ``end_of_turn_sampled`` is the text of the stop token the model sampled (already in the
        trajectory), or None when the turn ran out of tokens and the template must close it.
        """
        messages: list[ChatMessage] = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _PLACEHOLDER},
            {"role": self.observation_role, "content": observation},
        ]
        full = self.render(messages, add_generation_prompt=True)
        after = full[full.index(_PLACEHOLDER) + len(_PLACEHOLDER):]
        if end_of_turn_sampled and after.startswith(end_of_turn_sampled):
            after = after[len(end_of_turn_sampled):]
        return after


@dataclass
class Segment:
    """One stretch of the response: ``generated`` (sampled ids) or ``template`` (delta ids)."""

    kind: str
    text: str
    ids: list[int]


@dataclass
class TokenTrajectory:
    """Prompt ids plus response segments; the source of a ``RolloutRecord``'s token fields."""

    prompt_text: str
    prompt_ids: list[int]
    segments: list[Segment] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.loss_mask)

    def all_ids(self) -> list[int]:
        ids = list(self.prompt_ids)
        for segment in self.segments:
            ids.extend(segment.ids)
        return ids

    def add_generated(self, ids: list[int], logprobs: list[float], text: str) -> None:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} generated ids but {len(logprobs)} log-probs")
        self.segments.append(Segment("generated", text, list(ids)))
        self.loss_mask.extend([1] * len(ids))
        self.logprobs.extend(float(x) for x in logprobs)

    def add_template(self, ids: list[int], text: str) -> None:
        self.segments.append(Segment("template", text, list(ids)))
        self.loss_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))

    def expected_text(self) -> str:
        """What the ids must decode to: prompt text, generated text, template deltas, in order."""
        return self.prompt_text + "".join(segment.text for segment in self.segments)

    def to_record(self, instance_id: str, dataset: str, reward_score: float, metadata: RecordMetadata,
                  semantics: LogprobSemantics, reward_extra: RewardExtra | None = None) -> RolloutRecord:
        meta = metadata.copy()
        meta["logprob_semantics"] = semantics.to_dict()
        return RolloutRecord(
            instance_id=instance_id, dataset=dataset, tokens=self.all_ids(), prompt_len=len(self.prompt_ids),
            response_length=len(self.loss_mask), loss_mask=list(self.loss_mask),
            rollout_log_probs=list(self.logprobs), reward_score=reward_score,
            reward_extra=reward_extra.copy() if reward_extra else RewardExtra(), metadata=meta)


def check_decodes_to(tokenizer: PreTrainedTokenizerBase, token_ids: list[int], expected_text: str, where: str = "trajectory") -> None:
    """Raise ``TrajectoryDriftError`` unless ``token_ids`` decode to ``expected_text`` exactly."""
    decoded = tokenizer.decode(token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    if decoded == expected_text:
        return
    at = next((i for i, (a, b) in enumerate(zip(decoded, expected_text, strict=False)) if a != b),
              min(len(decoded), len(expected_text)))
    raise TrajectoryDriftError(
        f"{where}: token ids decode to text that differs from the transcript at char {at}: "
        f"ids give {decoded[max(0, at - 30):at + 30]!r}, transcript has {expected_text[max(0, at - 30):at + 30]!r}")
