"""OpenAI-compatible chat completions (vLLM and others) with token ids and log-probs.

The server renders the messages with its own chat template, so this backend's later turns are
conditioned on the server's rendering of the conversation; the recorded trajectory still holds the
sampled ids exactly (from ``token_ids`` or ``logprobs`` with ``return_tokens_as_token_ids``). For
token-in/token-out use SGLang's ``/generate`` (``sglang.py``).

The log-prob semantics depend on the server's configuration (vLLM ``--logprobs-mode``: ``raw_logprobs``
by default, T=1; ``processed_logprobs`` after temperature and top-p, renormalized); pass the mode.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pdbgym.agent.backends.base import (
    LOGPROB_MODES,
    BackendError,
    ChatMessage,
    Generation,
    GenerationRequest,
    SamplingParams,
    semantics_fields,
    stop_token_ids,
)
from pdbgym.agent.backends.http import AsyncJsonClient, request_json
from pdbgym.env.tools import ToolSpec
from pdbgym.rollouts.record import LogprobSemantics

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase


def token_ids_from_choice(choice: dict[str, Any]) -> list[int] | None:
    """Sampled ids from a chat choice: ``token_ids`` (vLLM ``return_token_ids``) or ``token_id:N`` tokens."""
    if isinstance(choice.get("token_ids"), list):
        return [int(t) for t in choice["token_ids"]]
    content = (choice.get("logprobs") or {}).get("content") or []
    if content and all(str(entry.get("token", "")).startswith("token_id:") for entry in content):
        return [int(entry["token"].split(":", 1)[1]) for entry in content]
    return None


def chat_body(model: str, messages: list[ChatMessage], tools: list[ToolSpec] | None,
              params: SamplingParams, **extra: Any) -> dict[str, Any]:
    """A chat-completions request: the OpenAI fields, then ``extra`` (vendor fields such as vLLM's)."""
    body: dict[str, Any] = {"model": model, "messages": messages, "temperature": params.temperature,
                            "top_p": params.top_p, "max_tokens": params.max_new_tokens, **extra}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "none"  # tool calls stay in the text, which pdbgym parses itself
    if params.seed is not None:
        body["seed"] = params.seed
    return body


def served_models(root: str, api_key: str | None) -> list[dict[str, Any]]:
    """The server's ``/v1/models`` entries; an error naming the fix when it serves none."""
    models = request_json(f"{root}/v1/models", api_key=api_key).get("data") or []
    if not models:
        raise BackendError(f"{root}/v1/models lists no model; start the server with a model")
    return models


class OpenAIChatBackend:
    """Chat completions on ``base_url`` (``http://host:port``, with or without ``/v1``)."""

    def __init__(self, base_url: str, tokenizer: PreTrainedTokenizerBase, model: str, logprob_mode: str = "raw",
                 engine: str = "vllm", api_key: str | None = None, timeout_s: float = 600.0):
        if logprob_mode not in LOGPROB_MODES:
            raise BackendError(f"logprob mode must be one of {LOGPROB_MODES}, got {logprob_mode!r}")
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.tokenizer, self.name, self.logprob_mode, self.engine = tokenizer, model, logprob_mode, engine
        self.api_key, self.timeout_s = api_key, timeout_s
        self.stops = stop_token_ids(tokenizer)
        self._client = AsyncJsonClient(self.base_url, self.timeout_s, self.api_key)

    @classmethod
    def connect(cls, base_url: str, tokenizer: PreTrainedTokenizerBase, require_logprobs: bool = True, **kwargs: Any) -> OpenAIChatBackend:
        """Check before any episode that the server answers, serves a model, and returns ids + log-probs."""
        root = base_url.rstrip("/").removesuffix("/v1")
        models = served_models(root, kwargs.get("api_key"))
        backend = cls(root, tokenizer, kwargs.pop("model", None) or models[0]["id"], **kwargs)
        probe = request_json(f"{root}/v1/chat/completions", backend._body(
            [{"role": "user", "content": "hi"}], None, SamplingParams(1.0, 1.0, 2, 0)), api_key=backend.api_key)
        choice = (probe.get("choices") or [{}])[0]
        if require_logprobs and token_ids_from_choice(choice) is None:
            raise BackendError(f"{root} returns no token ids/log-probs for chat completions (asked with "
                               "logprobs=true, return_tokens_as_token_ids=true); use vLLM or SGLang, or "
                               "a policy that does not need log-probs")
        return backend

    def semantics(self, params: SamplingParams) -> LogprobSemantics:
        return LogprobSemantics(engine=f"{self.engine}:{self.logprob_mode}",
                                **semantics_fields(self.logprob_mode, params.temperature, params.top_p))

    def _body(self, messages: list[ChatMessage], tools: list[ToolSpec] | None,
              params: SamplingParams) -> dict[str, Any]:
        return chat_body(self.name, messages, tools, params, logprobs=True, return_tokens_as_token_ids=True,
                         return_token_ids=True, skip_special_tokens=False)

    async def generate(self, request: GenerationRequest) -> Generation:
        started = time.perf_counter()
        reply = await self._client.post("/v1/chat/completions",
                                        self._body(request.messages, request.tools, request.params))
        choice = reply["choices"][0]
        ids = token_ids_from_choice(choice)
        content = (choice.get("logprobs") or {}).get("content") or []
        if ids is None or len(content) != len(ids):
            raise BackendError(f"{self.base_url} returned {len(content)} log-probs for "
                               f"{'no' if ids is None else len(ids)} token ids")
        finish = "stop" if ids and ids[-1] in self.stops else "length"
        return Generation(ids, [float(e["logprob"]) for e in content],
                          self.tokenizer.decode(ids, skip_special_tokens=False), finish,
                          model_seconds=time.perf_counter() - started)

    async def aclose(self) -> None:
        await self._client.aclose()
