"""OpenAI-compatible chat servers that return text only (``transformers serve``, most hosted APIs).

Such a server gives neither the sampled token ids nor their log-probs (``transformers serve`` ignores
``logprobs`` and refuses vLLM's ``return_token_ids``). The trajectory then holds the reply text
re-tokenized with the local tokenizer, closed with the end-of-turn token when the server says the turn
stopped, and every generated id carries log-prob 0.0 under ``LogprobSemantics(engine="none")``: the
same convention as the scripted policy's turns, usable for SFT and evaluation, never as a model's own
log-probs. ``connect_chat`` prefers the token-exact ``OpenAIChatBackend`` and falls back to this one,
saying so on stderr.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from pdbgym.agent.backends.base import (
    BackendError,
    ChatMessage,
    Generation,
    GenerationRequest,
    SamplingParams,
)
from pdbgym.agent.backends.http import AsyncJsonClient, ServerUnreachableError, request_json
from pdbgym.agent.backends.openai_server import OpenAIChatBackend, chat_body, served_models
from pdbgym.env.tools import ToolSpec
from pdbgym.rollouts.record import LogprobSemantics

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase

TEXT_ONLY_SEMANTICS = LogprobSemantics(engine="none", temperature=1.0)


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id that closes an assistant turn: ChatML's ``<|im_end|>`` when the vocabulary has it, else eos."""
    im_end = tokenizer.get_vocab().get("<|im_end|>")
    if im_end is not None:
        return int(im_end)
    if tokenizer.eos_token_id is None:
        raise BackendError("the tokenizer has neither <|im_end|> nor an eos token to close a turn with")
    return int(tokenizer.eos_token_id)


class OpenAITextChatBackend:
    """Chat completions on ``base_url`` read as text: ids re-tokenized locally, no log-probs."""

    def __init__(self, base_url: str, tokenizer: PreTrainedTokenizerBase, model: str, api_key: str | None = None,
                 timeout_s: float = 600.0):
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.tokenizer, self.name, self.api_key = tokenizer, model, api_key
        self.stop_id = end_of_turn_id(tokenizer)
        self._client = AsyncJsonClient(self.base_url, timeout_s, api_key)

    @classmethod
    def connect(cls, base_url: str, tokenizer: PreTrainedTokenizerBase, model: str | None = None,
                api_key: str | None = None) -> OpenAITextChatBackend:
        """Check that the server lists a model and answers a one-token chat request with standard fields."""
        root = base_url.rstrip("/").removesuffix("/v1")
        models = served_models(root, api_key)
        backend = cls(root, tokenizer, model or models[0]["id"], api_key)
        probe = request_json(f"{root}/v1/chat/completions", backend.body(
            [{"role": "user", "content": "hi"}], None, SamplingParams(1.0, 1.0, 1, 0)), api_key=api_key)
        if not isinstance(((probe.get("choices") or [{}])[0].get("message") or {}).get("content", ""), str):
            raise BackendError(f"{root}/v1/chat/completions answered without a message: {str(probe)[:200]}")
        return backend

    def semantics(self, params: SamplingParams) -> LogprobSemantics:
        return TEXT_ONLY_SEMANTICS

    def body(self, messages: list[ChatMessage], tools: list[ToolSpec] | None,
             params: SamplingParams) -> dict[str, Any]:
        """Only fields of the OpenAI chat API (strict servers refuse vendor extensions with HTTP 422)."""
        return chat_body(self.name, messages, tools, params)

    async def generate(self, request: GenerationRequest) -> Generation:
        started = time.perf_counter()
        reply = await self._client.post("/v1/chat/completions",
                                        self.body(request.messages, request.tools, request.params))
        choice = (reply.get("choices") or [{}])[0]
        content = (choice.get("message") or {}).get("content") or ""
        if not isinstance(content, str):
            raise BackendError(f"{self.base_url} answered a message without text content: {str(choice)[:200]}")
        ids = list(self.tokenizer.encode(content, add_special_tokens=False))
        finish = "stop" if choice.get("finish_reason") == "stop" else "length"
        if finish == "stop":
            ids.append(self.stop_id)
        text = self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return Generation(ids, [0.0] * len(ids), text, finish, model_seconds=time.perf_counter() - started,
                          extra={"ids": "re-tokenized reply text", "logprobs": "none"})

    async def aclose(self) -> None:
        await self._client.aclose()


def connect_chat(base_url: str, tokenizer: PreTrainedTokenizerBase, logprob_mode: str = "raw", api_key: str | None = None) -> Any:
    """The token-exact chat backend when the server returns ids and log-probs, else the text-only one.

    An unreachable server is an error either way; a server that answers but refuses or lacks vLLM's
    token-id fields (``transformers serve``) gets ``OpenAITextChatBackend``, with a note on stderr that
    its turns carry no log-probs.
    """
    try:
        return OpenAIChatBackend.connect(base_url, tokenizer, logprob_mode=logprob_mode, api_key=api_key)
    except ServerUnreachableError:
        raise
    except BackendError as exact_error:
        backend = OpenAITextChatBackend.connect(base_url, tokenizer, api_key=api_key)
        print(f"note: {base_url} gives no token ids/log-probs ({exact_error}); reading its replies as text: "
              "ids re-tokenized locally, log-probs recorded as none", file=sys.stderr)
        return backend
