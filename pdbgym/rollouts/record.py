"""``RolloutRecord``: one sample of an agent episode in the teacher-cache record format.

The dict form (``to_dict``) has exactly the keys of the teacher-cache format, so caches written by
pdbgym load in code written for that format and vice versa. What the format has no key for (how the
log-probs were produced, which tokenizer) lives inside ``metadata`` under ``logprob_semantics`` and
``tokenizer``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

RECORD_KEYS = (
    "instance_id",
    "dataset",
    "tokens",
    "prompt_len",
    "response_length",
    "loss_mask",
    "rollout_log_probs",
    "reward_score",
    "reward_extra",
    "metadata",
)
TERMINATION_REASONS = ("solved", "finish_unresolved", "ctx_overflow", "budget", "other")


@dataclass(frozen=True)
class LogprobSemantics:
    """How ``rollout_log_probs`` were computed from the model's logits z.

    log p(y) = log_softmax(z / temperature)[y], restricted to the top-p nucleus and renormalized over it
    when ``top_p_renormalized`` is true. ``temperature == 1`` with ``top_p_renormalized`` false is the raw
    distribution. ``engine`` names the producer (``hf``, ``sglang``, ``vllm:raw_logprobs``, ...).
    """

    engine: str
    temperature: float
    top_p: float = 1.0
    top_p_renormalized: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogprobSemantics:
        return cls(
            engine=str(data["engine"]),
            temperature=float(data["temperature"]),
            top_p=float(data.get("top_p", 1.0)),
            top_p_renormalized=bool(data.get("top_p_renormalized", False)),
        )


@dataclass
class RolloutRecord:
    """One rollout: prompt + response token ids, with the response's mask and log-probs.

    Shapes: ``tokens`` has ``prompt_len + response_length`` ids; ``loss_mask`` and
    ``rollout_log_probs`` have ``response_length`` entries, aligned with ``tokens[prompt_len:]``.
    ``loss_mask[t] == 1`` marks a model-generated token (counted for KL and SFT loss); 0 marks tool
    output and chat-template tokens. ``rollout_log_probs[t]`` is the producer's log-prob (nats, <= 0)
    of ``tokens[prompt_len + t]``; positions with mask 0 carry 0.0.
    """

    instance_id: str
    dataset: str
    tokens: list[int]
    prompt_len: int
    response_length: int
    loss_mask: list[int]
    rollout_log_probs: list[float]
    reward_score: float = 0.0
    reward_extra: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def termination_reason(self) -> str | None:
        return self.metadata.get("_termination_reason")

    @property
    def sample_idx(self) -> int:
        return int(self.metadata.get("_sample_idx", 0))

    @property
    def logprob_semantics(self) -> LogprobSemantics | None:
        data = self.metadata.get("logprob_semantics")
        return LogprobSemantics.from_dict(data) if data else None

    @property
    def vocab_size(self) -> int | None:
        tok = self.metadata.get("tokenizer") or {}
        return tok.get("vocab_size")

    @property
    def response_tokens(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    def to_dict(self) -> dict[str, Any]:
        """The teacher-cache dict: exactly ``RECORD_KEYS``."""
        return {key: getattr(self, key) for key in RECORD_KEYS}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutRecord:
        """Build from a teacher-cache dict. Field checks live in ``pdbgym.rollouts.validate``."""
        missing = [k for k in RECORD_KEYS if k not in data and k not in ("reward_extra", "metadata")]
        if missing:
            ident = data.get("instance_id", "<unknown>")
            raise KeyError(f"record {ident!r} lacks teacher-cache field(s) {missing}")
        return cls(
            instance_id=str(data["instance_id"]),
            dataset=str(data["dataset"]),
            tokens=[int(t) for t in data["tokens"]],
            prompt_len=int(data["prompt_len"]),
            response_length=int(data["response_length"]),
            loss_mask=[int(m) for m in data["loss_mask"]],
            rollout_log_probs=[float(x) for x in data["rollout_log_probs"]],
            reward_score=float(data.get("reward_score", 0.0)),
            reward_extra=dict(data.get("reward_extra") or {}),
            metadata=dict(data.get("metadata") or {}),
        )
