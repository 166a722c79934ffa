"""``RolloutRecord``: one sample of an agent episode in the teacher-cache record format.

The dict form (``to_dict``) has exactly the keys of the teacher-cache format, so caches written by
pdbgym load in code written for that format and vice versa. What the format has no key for (how the
log-probs were produced, which tokenizer) lives inside ``metadata`` under ``logprob_semantics`` and
``tokenizer``.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import NotRequired, Protocol, TypedDict, TypeVar, cast, runtime_checkable

from pdbgym.errors import PdbgymError
from pdbgym.fileio import JSONValue

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
OPTIONAL_RECORD_KEYS = ("reward_score", "reward_extra", "metadata")


class SemanticsDict(TypedDict):
    """``LogprobSemantics.to_dict()``: ``constrained`` and ``grammar`` only for a constrained producer."""

    engine: str
    temperature: float
    top_p: float
    top_p_renormalized: bool
    constrained: NotRequired[bool]
    grammar: NotRequired[str]


class TokenizerInfo(TypedDict):
    """``metadata["tokenizer"]``: the tokenizer's name, ``len(tokenizer)`` and ``tokenizer_fingerprint``
    (synthetic caches carry no fingerprint)."""

    name: str
    vocab_size: int
    fingerprint: NotRequired[str]


class RecordMetadata(TypedDict, total=False):
    """The ``metadata`` keys pdbgym writes and reads; a cache made elsewhere may hold others besides.

    ``_termination_reason`` one of ``TERMINATION_REASONS``; ``_sample_idx`` tells the samples of one
    instance apart; ``wrong_site_touched`` None where the task declares no wrong site; ``_sampler`` and
    ``_stop`` are divergence sampling's (the sampler's name, ``eos`` or ``max_new_tokens``)."""

    instance_id: str
    _eval_dataset_name: str
    task_type: str
    _termination_reason: str | None
    actions_used: int
    _sample_idx: int
    tokenizer: TokenizerInfo
    policy: str
    tool_format: str
    wrong_site_touched: bool | None
    logprob_semantics: SemanticsDict
    _sampler: str
    _stop: str


class RewardExtra(TypedDict, total=False):
    """``reward_extra`` as pdbgym writes it; other producers' keys may sit beside these."""

    final_test_passed: bool
    duration_s: float


class Vocabulary(Protocol):
    """A tokenizer as ``tokenizer_fingerprint`` reads it: its id -> token map."""

    def get_vocab(self) -> dict[str, int]: ...


@runtime_checkable
class _Array(Protocol):
    """A torch tensor or a numpy array, as record fields may come (torch is optional: no import of it)."""

    shape: tuple[int, ...]

    def tolist(self) -> list[JSONValue]: ...


@runtime_checkable
class _Item(Protocol):
    """A tensor or numpy scalar: ``item()`` is its Python number."""

    def item(self) -> JSONValue: ...


Number = TypeVar("Number", int, float)


class CacheFormatError(PdbgymError):
    """A record, cache file or manifest does not follow the teacher-cache format."""


def record_label(dataset: object, instance_id: object, sample_idx: object = 0) -> str:
    """How messages name a record: ``dataset/instance_id#sample``."""
    return f"{dataset}/{instance_id}#{sample_idx}"


def _all_of_type(values: Sequence[object], kind: type) -> bool:
    # set(map(type, ...)) runs in C: about twice as fast as all(type(v) is kind ...) on 32k-item lists
    return set(map(type, values)) <= {kind}


def _plain_sequence(value: object, label: str, field_name: str) -> list[JSONValue]:
    """A new list of Python scalars from a list, tuple, 1-D torch tensor or 1-D numpy array."""
    if isinstance(value, _Array):
        if len(value.shape) != 1:
            raise CacheFormatError(
                f"{label}: field {field_name!r} must be 1-D, got shape {tuple(value.shape)}"
            )
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [v.item() if hasattr(v, "item") else v for v in value]
    raise CacheFormatError(
        f"{label}: field {field_name!r} must be a list or a 1-D tensor/array, got {type(value).__name__}"
    )


def as_int_list(value: object, label: str, field_name: str) -> list[int]:
    """Integer ids or mask values; integral floats (1.0) are accepted, fractional ones are refused."""
    if type(value) is list and _all_of_type(value, int):
        return list(value)  # the common case (the source's own files)
    items = _plain_sequence(value, label, field_name)
    if _all_of_type(items, int):
        return cast(list[int], items)
    out: list[int] = []
    for position, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise CacheFormatError(
                f"{label}: field {field_name!r}[{position}] is {item!r}, expected an integer"
            )
        if isinstance(item, float) and not (math.isfinite(item) and item.is_integer()):
            raise CacheFormatError(
                f"{label}: field {field_name!r}[{position}] is {item!r}, expected an integer"
            )
        out.append(int(item))
    return out


def as_float_list(value: object, label: str, field_name: str) -> list[float]:
    """Floats, converted exactly (a float32 tensor's values are kept bit-for-bit as Python floats)."""
    if type(value) is list and _all_of_type(value, float):
        return list(value)
    items = _plain_sequence(value, label, field_name)
    if _all_of_type(items, float):
        return cast(list[float], items)
    out: list[float] = []
    for position, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise CacheFormatError(
                f"{label}: field {field_name!r}[{position}] is {item!r}, expected a float"
            )
        out.append(float(item))
    return out


def _as_scalar(value: object, kind: type[Number], label: str, field_name: str) -> Number:
    if isinstance(value, _Item) and getattr(value, "shape", ()) in ((), (1,)):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CacheFormatError(f"{label}: field {field_name!r} is {value!r}, expected {kind.__name__}")
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise CacheFormatError(f"{label}: field {field_name!r} is {value!r}, expected an integer")
    return kind(value)


@dataclass(frozen=True)
class LogprobSemantics:
    """How ``rollout_log_probs`` were computed from the model's logits z.

    log p(y) = log_softmax(z / temperature)[y], restricted to the top-p nucleus and renormalized over it
    when ``top_p_renormalized`` is true. ``temperature == 1`` with ``top_p_renormalized`` false is the raw
    distribution. ``engine`` names the producer (``hf``, ``sglang``, ``vllm:raw_logprobs``, ...).
    ``engine == "none"`` means the producer gave no log-probs (the values are 0.0 placeholders).
    ``engine == "deterministic"`` means a deterministic policy (scripted) wrote the turns: each has
    probability 1 under that policy, so log-prob 0.0 is exact.
    ``constrained`` means tokens were drawn after a grammar masked the logits (``grammar`` names it):
    the log-probs are then of that masked, renormalized distribution, not of the model's own.
    """

    engine: str
    temperature: float
    top_p: float = 1.0
    top_p_renormalized: bool = False
    constrained: bool = False
    grammar: str = ""

    def to_dict(self) -> SemanticsDict:
        data = cast(SemanticsDict, asdict(self))
        if not self.constrained:  # unconstrained records keep the four-field form
            del data["constrained"], data["grammar"]
        return data

    @classmethod
    def from_dict(cls, data: SemanticsDict) -> LogprobSemantics:
        """From ``to_dict``'s form, each value converted (a cache written elsewhere may hold ``1`` for 1.0)."""
        return cls(
            engine=str(data["engine"]),
            temperature=float(data["temperature"]),
            top_p=float(data.get("top_p", 1.0)),
            top_p_renormalized=bool(data.get("top_p_renormalized", False)),
            constrained=bool(data.get("constrained", False)),
            grammar=str(data.get("grammar", "")),
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
    reward_extra: RewardExtra = field(default_factory=lambda: RewardExtra())
    metadata: RecordMetadata = field(default_factory=lambda: RecordMetadata())

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
        tok = self.metadata.get("tokenizer")
        return tok.get("vocab_size") if tok else None

    @property
    def response_tokens(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    def to_dict(self) -> dict[str, object]:
        """The teacher-cache dict: exactly ``RECORD_KEYS``, in their order (the values are this record's own)."""
        return {"instance_id": self.instance_id, "dataset": self.dataset, "tokens": self.tokens,
                "prompt_len": self.prompt_len, "response_length": self.response_length, "loss_mask": self.loss_mask,
                "rollout_log_probs": self.rollout_log_probs, "reward_score": self.reward_score,
                "reward_extra": self.reward_extra, "metadata": self.metadata}

    @property
    def label(self) -> str:
        """``dataset/instance_id#sample``, the name error messages use for this record."""
        return record_label(self.dataset, self.instance_id, self.metadata.get("_sample_idx", 0))

    @classmethod
    def from_dict(cls, data: object) -> RolloutRecord:
        """Build from a teacher-cache dict; token/mask/log-prob values may be lists or 1-D tensors.

        Types are converted strictly (a mask value of 0.5 or a token id of 3.7 is refused, never
        truncated). Value checks (lengths, ranges) live in ``pdbgym.rollouts.validate``.
        Raises ``CacheFormatError`` naming the record and the field.
        """
        if not isinstance(data, dict):
            raise CacheFormatError(f"a record must be a dict, got {type(data).__name__}")
        meta = data.get("metadata")
        meta = {} if meta is None else meta
        label = record_label(
            data.get("dataset", "<no dataset>"),
            data.get("instance_id", "<no instance_id>"),
            meta.get("_sample_idx", 0) if isinstance(meta, dict) else 0,
        )
        missing = [k for k in RECORD_KEYS if k not in data and k not in OPTIONAL_RECORD_KEYS]
        if missing:
            raise CacheFormatError(f"{label}: lacks teacher-cache field(s) {missing}")
        for key in ("instance_id", "dataset"):
            if not isinstance(data[key], str) or not data[key]:
                raise CacheFormatError(f"{label}: field {key!r} must be a non-empty string")
        reward_extra = data.get("reward_extra")
        for key, value in (("reward_extra", reward_extra), ("metadata", meta)):
            if value is not None and not isinstance(value, dict):
                raise CacheFormatError(f"{label}: field {key!r} must be a dict, got {type(value).__name__}")
        return cls(
            instance_id=data["instance_id"],
            dataset=data["dataset"],
            tokens=as_int_list(data["tokens"], label, "tokens"),
            prompt_len=_as_scalar(data["prompt_len"], int, label, "prompt_len"),
            response_length=_as_scalar(data["response_length"], int, label, "response_length"),
            loss_mask=as_int_list(data["loss_mask"], label, "loss_mask"),
            rollout_log_probs=as_float_list(data["rollout_log_probs"], label, "rollout_log_probs"),
            reward_score=_as_scalar(data.get("reward_score", 0.0), float, label, "reward_score"),
            reward_extra=cast(RewardExtra, dict(reward_extra or {})),  # checked a dict above; its keys are open
            metadata=cast(RecordMetadata, dict(meta)),
        )


def declared_fingerprints(records: Iterable[RolloutRecord]) -> set[str]:
    """The tokenizer fingerprints the records carry in ``metadata.tokenizer`` (records without one skipped)."""
    return {str(tok["fingerprint"]) for r in records
            if isinstance(tok := r.metadata.get("tokenizer"), dict) and tok.get("fingerprint")}


_FINGERPRINTING = threading.Lock()


def tokenizer_fingerprint(tokenizer: Vocabulary) -> str:
    """16 hex digits of sha256 over the tokenizer's id -> token map (added tokens included).

    Two tokenizers with one fingerprint turn ids into the same strings; two with the same vocab size
    but other merges or token order do not, and scoring one's ids with the other's model gives
    divergences that mean nothing. Computed once per tokenizer object."""
    cached = getattr(tokenizer, "_pdbgym_fingerprint", None)
    if isinstance(cached, str):
        return cached
    with _FINGERPRINTING:  # a campaign's episode threads finish their first records together: hash once, not each
        cached = getattr(tokenizer, "_pdbgym_fingerprint", None)
        if isinstance(cached, str):
            return cached
        digest = hashlib.sha256()
        for token, index in sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0])):
            digest.update(f"{index}\t{token}\n".encode("utf-8", "surrogatepass"))
        fingerprint = digest.hexdigest()[:16]
        try:
            setattr(tokenizer, "_pdbgym_fingerprint", fingerprint)  # noqa: B010 (not an attribute of the protocol)
        except AttributeError:
            pass
    return fingerprint
