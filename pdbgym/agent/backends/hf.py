"""Local Hugging Face model backend (CPU or GPU): token ids in, sampled ids and log-probs out.

Sampling runs token by token with a KV cache so the log-prob of every sampled id comes from the same
processed logits it was drawn from (see ``pdbgym.agent.sampling``). Models are loaded once per process.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdbgym.agent.backends.base import (
    BackendError,
    Generation,
    GenerationRequest,
    SamplingParams,
    semantics_fields,
    stop_token_ids,
)
from pdbgym.agent.constrained import TurnMask, compile_constraint
from pdbgym.modelload import ModelLoadError, load_model
from pdbgym.rollouts.record import LogprobSemantics

_LOADED: dict[tuple[str, str], tuple[Any, Any]] = {}
_LOAD_LOCK = threading.Lock()


def load_model_and_tokenizer(path: str | Path, device: str = "cpu") -> tuple[Any, Any]:
    """Load (once per process) a causal LM and its tokenizer from a local folder, by the one model loader
    (``pdbgym.modelload``); a folder it refuses is a ``BackendError`` with the loader's message."""
    folder = Path(path).expanduser()
    key = (str(folder.resolve()), device)
    with _LOAD_LOCK:
        if key not in _LOADED:
            try:
                loaded = load_model(folder, device)
            except ModelLoadError as exc:
                raise BackendError(str(exc)) from exc
            _LOADED[key] = (loaded.model, loaded.tokenizer)
    return _LOADED[key]


@dataclass
class PrefixCache:
    """A KV cache and the ids it covers. Trajectories only grow, so the next turn of the same episode
    starts with these ids and only the new suffix (this turn's last id, the observation) is prefilled."""

    ids: list[int]
    cache: Any


def sample_turn(model: Any, prompt_ids: list[int], params: SamplingParams, stops: set[int],
                logprob_mode: str = "tempered", prefix: PrefixCache | None = None,
                mask: TurnMask | None = None) -> tuple[list[int], list[float], str, PrefixCache]:
    """Sample up to ``params.max_new_tokens`` ids after ``prompt_ids``; stop after a stop id.

    Returns ``(ids, logprobs, finish_reason, prefix)``; ``logprobs[i]`` is the reported log-prob of
    ``ids[i]``; ``prefix`` covers ``prompt_ids + ids[:-1]`` and may be passed to the next call.
    ``mask`` (a grammar's state for this turn) sets forbidden logits to -inf before each draw, so ids
    and log-probs then come from the grammar-constrained distribution.
    """
    import torch  # optional: torch (pdbgym[hf])

    from pdbgym.agent.sampling import draw_token  # heavy: imports torch at load

    device = next(model.parameters()).device
    generator = torch.Generator(device="cpu")
    generator.manual_seed(params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little"))
    cache_arg = _cache_argument(model)
    reusable = prefix is not None and len(prefix.ids) < len(prompt_ids) and prompt_ids[:len(prefix.ids)] == prefix.ids
    past = prefix.cache if reusable else None
    feed = prompt_ids[len(prefix.ids):] if reusable else prompt_ids
    ids: list[int] = []
    logprobs: list[float] = []
    finish = "length"
    with torch.inference_mode():
        for _ in range(params.max_new_tokens):
            out = model(input_ids=torch.tensor([feed], device=device), use_cache=True, **{cache_arg: past})
            past = out.get("cache", None) if cache_arg == "cache" else out.past_key_values
            logits = out.logits[0, -1].to("cpu", torch.float32)
            if mask is not None:
                logits = mask.apply(logits, params.max_new_tokens - len(ids))
            token, logprob = draw_token(logits, params.temperature, params.top_p, generator, logprob_mode)
            if mask is not None:
                mask.accept(token)
            ids.append(token)
            logprobs.append(logprob)
            if token in stops:
                finish = "stop"
                break
            feed = [token]
    return ids, logprobs, finish, PrefixCache(list(prompt_ids) + ids[:-1], past)


def _cache_argument(model: Any) -> str:
    """The forward() keyword for the KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class HFBackend:
    """A transformers model in this process. ``generate`` runs in a worker thread, one call at a time.

    ``constrained_format`` (a tool-call format) makes every turn one grammar-valid tool call of that
    format (``pdbgym.agent.constrained``); the records' semantics then say ``constrained``.
    """

    def __init__(self, model: Any, tokenizer: Any, name: str, logprob_mode: str = "tempered",
                 reuse_prefix: bool = True, constrained_format: str | None = None):
        self.model = model
        self.constrained_format = constrained_format
        self.reuse_prefix = reuse_prefix
        self._prefix: PrefixCache | None = None
        self.tokenizer = tokenizer
        self.name = name
        self.logprob_mode = logprob_mode
        self.stops = stop_token_ids(tokenizer, model)
        self._lock = threading.Lock()
        vocab_rows = model.get_input_embeddings().weight.shape[0]
        if vocab_rows < len(tokenizer):
            raise BackendError(f"model {name} has {vocab_rows} embedding rows but its tokenizer has "
                               f"{len(tokenizer)} tokens: tokenizer and weights do not belong together")

    @classmethod
    def from_path(cls, path: str | Path, device: str = "cpu", constrained_format: str | None = None) -> HFBackend:
        model, tokenizer = load_model_and_tokenizer(path, device)
        return cls(model, tokenizer, name=Path(path).name, constrained_format=constrained_format)

    def semantics(self, params: SamplingParams) -> LogprobSemantics:
        fields = semantics_fields(self.logprob_mode, params.temperature, params.top_p)
        if self.constrained_format is not None:
            grammar = self._constraint(params.max_new_tokens).label
            return LogprobSemantics(engine=f"hf:{self.logprob_mode}", constrained=True, grammar=grammar, **fields)
        return LogprobSemantics(engine=f"hf:{self.logprob_mode}", **fields)

    def _constraint(self, max_new_tokens: int) -> Any:
        vocab = self.model.get_output_embeddings().weight.shape[0]
        return compile_constraint(self.tokenizer, vocab, self.stops, str(self.constrained_format), max_new_tokens)

    def _generate_sync(self, request: GenerationRequest) -> Generation:
        mask = None
        if self.constrained_format is not None:
            mask = TurnMask(self._constraint(request.params.max_new_tokens))
        with self._lock:
            started = time.perf_counter()
            ids, logprobs, finish, prefix = sample_turn(self.model, request.prompt_ids, request.params,
                                                        self.stops, self.logprob_mode, self._prefix, mask)
            self._prefix = prefix if self.reuse_prefix else None
            elapsed = time.perf_counter() - started
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return Generation(ids, logprobs, text, finish, model_seconds=elapsed)

    async def generate(self, request: GenerationRequest) -> Generation:
        return await asyncio.to_thread(self._generate_sync, request)

    async def aclose(self) -> None:
        return None
