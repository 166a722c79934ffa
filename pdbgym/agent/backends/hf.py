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
from pdbgym.rollouts.record import LogprobSemantics

_LOADED: dict[tuple[str, str], tuple[Any, Any]] = {}
_LOAD_LOCK = threading.Lock()


def load_model_and_tokenizer(path: str | Path, device: str = "cpu") -> tuple[Any, Any]:
    """Load (once per process) a causal LM and its tokenizer from a local folder."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise BackendError(f"model path {folder} does not exist; give a folder holding config.json "
                           "and weights, 'embedded', or a server URL")
    if not (folder / "config.json").is_file():
        raise BackendError(f"{folder} holds no config.json: not a Hugging Face model folder")
    key = (str(folder.resolve()), device)
    with _LOAD_LOCK:
        if key not in _LOADED:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(folder)
            dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
            _LOADED[key] = (model, tokenizer)
    return _LOADED[key]


def sample_turn(model: Any, prompt_ids: list[int], params: SamplingParams, stops: set[int],
                logprob_mode: str = "tempered") -> tuple[list[int], list[float], str]:
    """Sample up to ``params.max_new_tokens`` ids after ``prompt_ids``; stop after a stop id.

    Returns ``(ids, logprobs, finish_reason)``; ``logprobs[i]`` is the reported log-prob of ``ids[i]``.
    """
    import torch

    from pdbgym.agent.sampling import draw_token

    device = next(model.parameters()).device
    generator = torch.Generator(device="cpu")
    generator.manual_seed(params.seed if params.seed is not None else int.from_bytes(os.urandom(4), "little"))
    cache_arg = _cache_argument(model)
    ids: list[int] = []
    logprobs: list[float] = []
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True)
        for _ in range(params.max_new_tokens):
            logits = out.logits[0, -1].to("cpu")
            token, logprob = draw_token(logits, params.temperature, params.top_p, generator, logprob_mode)
            ids.append(token)
            logprobs.append(logprob)
            if token in stops:
                return ids, logprobs, "stop"
            past = out.get("cache", None) if cache_arg == "cache" else out.past_key_values
            out = model(input_ids=torch.tensor([[token]], device=device), use_cache=True, **{cache_arg: past})
    return ids, logprobs, "length"


def _cache_argument(model: Any) -> str:
    """The forward() keyword for the KV cache: ``cache`` (transformers >= 5.2x) or ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class HFBackend:
    """A transformers model in this process. ``generate`` runs in a worker thread, one call at a time."""

    def __init__(self, model: Any, tokenizer: Any, name: str, logprob_mode: str = "tempered"):
        self.model = model
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
    def from_path(cls, path: str | Path, device: str = "cpu") -> HFBackend:
        model, tokenizer = load_model_and_tokenizer(path, device)
        return cls(model, tokenizer, name=Path(path).name)

    def semantics(self, params: SamplingParams) -> LogprobSemantics:
        return LogprobSemantics(engine=f"hf:{self.logprob_mode}",
                                **semantics_fields(self.logprob_mode, params.temperature, params.top_p))

    def _generate_sync(self, request: GenerationRequest) -> Generation:
        with self._lock:
            started = time.perf_counter()
            ids, logprobs, finish = sample_turn(self.model, request.prompt_ids, request.params, self.stops,
                                                self.logprob_mode)
            elapsed = time.perf_counter() - started
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        return Generation(ids, logprobs, text, finish, model_seconds=elapsed)

    async def generate(self, request: GenerationRequest) -> Generation:
        return await asyncio.to_thread(self._generate_sync, request)

    async def aclose(self) -> None:
        return None
