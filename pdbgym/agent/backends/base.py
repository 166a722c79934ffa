"""The backend interface: a model turns a conversation into one assistant turn, with token ids.

A backend receives the conversation both as token ids (``prompt_ids``: the exact trajectory so far)
and as chat messages (for engines that only take messages). Token-in backends (HF, SGLang ``/generate``)
condition on ``prompt_ids`` exactly; chat backends (OpenAI-compatible ``/v1/chat/completions``) let the
server render ``messages`` itself, so their later turns may be conditioned on a re-rendered prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

from pdbgym.defaults import documented
from pdbgym.env.tools import ToolSpec
from pdbgym.episode_defaults import EPISODE, check_setting
from pdbgym.errors import PdbgymError
from pdbgym.rollouts.record import LogprobSemantics, TokenizerInfo, tokenizer_fingerprint

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from pdbgym.env.environment import Transcript

LOGPROB_MODES = ("raw", "tempered", "processed")  # = pdbgym.engine.draw.LOGPROB_MODES (that module needs torch)


class BackendError(PdbgymError):
    """A backend cannot be built or reached, or does not offer what the run needs."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` is greedy. ``max_new_tokens`` caps one turn (tokens)."""

    # pdbgym.episode_defaults: every command's defaults; the help is ``pdbgym run``'s flags'
    # (``pdbgym.agent.play.RunConfig.sampling``, flattened by ``pdbgym.commandapp.config_command``)
    temperature: float = documented(EPISODE.temperature, "Sampling temperature of a model policy")
    top_p: float = documented(EPISODE.top_p, "Nucleus mass of a model policy (1: the whole distribution)")
    max_new_tokens: int = documented(EPISODE.max_new_tokens, "Token cap of one model turn")
    seed: int | None = documented(None, "the episode's own sampling seed (pdbgym.seeds), not a command's base seed",
                                  cli=False)

    def __post_init__(self) -> None:
        # Checked where the settings are made (a command's flags), not at an episode's first turn, where
        # every episode of the arm failed with advice to rerun the same command; by EpisodeSettings' rules.
        for name in ("temperature", "top_p", "max_new_tokens"):
            check_setting(name, getattr(self, name))


class ChatMessage(TypedDict):
    """One message of an episode's conversation: ``system``, ``user``, ``assistant`` or ``tool``, and its text."""

    role: str
    content: str


class EpisodeTranscript(TypedDict):
    """An episode's readable transcript (``run_episode``): who played, how it ended, the conversation, and the
    environment's own transcript."""

    instance_id: str
    sample_idx: int
    policy: str
    tool_format: str
    termination_reason: str
    final_test_passed: bool
    actions_used: int
    messages: list[ChatMessage]
    env: Transcript


@dataclass
class GenerationRequest:
    """One model turn to produce. ``prompt_ids`` is the whole trajectory so far (prompt + turns)."""

    prompt_ids: list[int]
    messages: list[ChatMessage]
    tools: list[ToolSpec] | None
    params: SamplingParams


@dataclass
class Generation:
    """A sampled turn: ids exactly as sampled, one log-prob (nats) per id, and the text they decode to.

    ``finish_reason`` is ``stop`` (an end-of-turn token was sampled; it is the last id) or ``length``
    (``max_new_tokens`` ran out). ``model_seconds`` is wall time spent in the model call.
    """

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    model_seconds: float = 0.0
    extra: dict[str, str] = field(default_factory=dict)  # what a backend notes about the turn (how ids were had)


class Backend(Protocol):
    """What the episode loop needs from a model."""

    name: str
    tokenizer: PreTrainedTokenizerBase  # a transformers tokenizer: the vocabulary the trajectory's ids live in

    def semantics(self, params: SamplingParams) -> LogprobSemantics:
        """How this backend's log-probs relate to the logits under ``params``."""
        ...

    async def generate(self, request: GenerationRequest) -> Generation:
        """Sample one assistant turn."""
        ...

    async def aclose(self) -> None:
        """Release connections (no-op for in-process models)."""
        ...


def tokenizer_info(tokenizer: PreTrainedTokenizerBase) -> TokenizerInfo:
    """``{name, vocab_size, fingerprint}`` recorded in every rollout's metadata (vocab_size =
    len(tokenizer); fingerprint: :func:`tokenizer_fingerprint`)."""
    source = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    return {"name": Path(source).name,
            "vocab_size": int(len(tokenizer)),
            "fingerprint": tokenizer_fingerprint(tokenizer)}


def semantics_fields(logprob_mode: str, temperature: float, top_p: float) -> dict[str, float | bool]:
    """``LogprobSemantics`` fields (temperature, top_p, top_p_renormalized) for a mode and sampling."""
    if logprob_mode == "raw" or temperature <= 0:
        return {"temperature": 1.0, "top_p": 1.0, "top_p_renormalized": False}
    return {"temperature": temperature, "top_p": top_p,
            "top_p_renormalized": logprob_mode == "processed" and top_p < 1.0}


def stop_token_ids(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel | None = None) -> set[int]:
    """Ids that end an assistant turn: the tokenizer's eos, the generation config's eos list, and
    ChatML's ``<|im_end|>`` when the vocabulary has it (some configs name only ``<|endoftext|>``)."""
    stops = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    stops.update([config_eos] if isinstance(config_eos, int) else (config_eos or []))
    im_end = tokenizer.get_vocab().get("<|im_end|>")
    if im_end is not None:
        stops.add(im_end)
    return stops
