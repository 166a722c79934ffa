"""SGLang's native ``/generate``: token ids in, token ids and log-probs out (no re-rendering).

SGLang (recent, normal sampling) reports ``log_softmax(z / T)[y]``: temperature applied, top-p not
renormalized (docs/cache-format.md, ``logprob_semantics``), recorded as ``LogprobSemantics(engine="sglang", ...)``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pdbgym.agent.backends.base import (
    BackendError,
    Generation,
    GenerationRequest,
    SamplingParams,
    semantics_fields,
    stop_token_ids,
)
from pdbgym.agent.backends.http import AsyncJsonClient, request_json
from pdbgym.rollouts.record import LogprobSemantics

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase


def ids_and_logprobs(reply: dict[str, Any]) -> tuple[list[int], list[float]] | None:
    """``(ids, logprobs)`` from a ``/generate`` reply's ``meta_info.output_token_logprobs``."""
    entries = (reply.get("meta_info") or {}).get("output_token_logprobs")
    if not entries:
        return None
    return [int(entry[1]) for entry in entries], [float(entry[0]) for entry in entries]


class SGLangBackend:
    """``/generate`` on ``base_url``; conditions each turn on the trajectory's ids exactly."""

    def __init__(self, base_url: str, tokenizer: PreTrainedTokenizerBase, name: str, timeout_s: float = 600.0):
        self.base_url = base_url.rstrip("/")
        self.tokenizer, self.name, self.timeout_s = tokenizer, name, timeout_s
        self.stops = stop_token_ids(tokenizer)
        self._client = AsyncJsonClient(self.base_url, self.timeout_s)

    @classmethod
    def connect(cls, base_url: str, tokenizer: PreTrainedTokenizerBase, require_logprobs: bool = True) -> SGLangBackend:
        """Check before any episode that ``/generate`` answers with ids and log-probs."""
        root = base_url.rstrip("/").removesuffix("/v1")
        info = request_json(f"{root}/get_model_info")
        backend = cls(root, tokenizer, str(info.get("model_path", "sglang")))
        probe = request_json(f"{root}/generate", backend._body([tokenizer.eos_token_id or 0],
                                                               SamplingParams(1.0, 1.0, 2, 0)))
        if require_logprobs and ids_and_logprobs(probe) is None:
            raise BackendError(f"{root}/generate returned no output_token_logprobs although "
                               "return_logprob=true was asked; this server cannot record log-probs")
        return backend

    def semantics(self, params: SamplingParams) -> LogprobSemantics:
        return LogprobSemantics(engine="sglang", **semantics_fields("tempered", params.temperature, params.top_p))

    def _body(self, input_ids: list[int], params: SamplingParams) -> dict[str, Any]:
        sampling = {"temperature": params.temperature, "top_p": params.top_p,
                    "max_new_tokens": params.max_new_tokens, "stop_token_ids": sorted(self.stops),
                    "skip_special_tokens": False, "no_stop_trim": True}
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        return {"input_ids": input_ids, "sampling_params": sampling, "return_logprob": True}

    async def generate(self, request: GenerationRequest) -> Generation:
        started = time.perf_counter()
        reply = await self._client.post("/generate", self._body(request.prompt_ids, request.params))
        parsed = ids_and_logprobs(reply)
        if parsed is None:
            raise BackendError(f"{self.base_url}/generate returned no output_token_logprobs")
        ids, logprobs = parsed
        finish = "stop" if ids and ids[-1] in self.stops else "length"
        return Generation(ids, logprobs, self.tokenizer.decode(ids, skip_special_tokens=False), finish,
                          model_seconds=time.perf_counter() - started)

    async def aclose(self) -> None:
        await self._client.aclose()
