"""A small real model server on loopback, speaking the OpenAI chat API and SGLang's ``/generate``.

It serves an in-process transformers model (tests use tiny random models) through the same engine as
``HFBackend`` (``pdbgym.engine``), so the HTTP clients in ``pdbgym.agent.backends`` can be tested against real sockets,
real JSON and real token ids rather than a mock. Endpoints:

- ``GET /v1/models``, ``GET /health``, ``GET /get_model_info`` (SGLang's, when ``sglang_api``)
- ``POST /v1/chat/completions``: messages (+ tools) rendered by the model's chat template; with
  ``logprobs: true`` the choice carries ``logprobs.content`` (``token`` is ``"token_id:N"`` when
  ``return_tokens_as_token_ids``) and, with ``return_token_ids``, ``token_ids`` / ``prompt_token_ids``
  as vLLM does. Log-probs are vLLM's default ``raw`` (T=1) unless the server was started otherwise.
- ``POST /generate``: ``input_ids`` + ``sampling_params``; with ``return_logprob`` the reply's
  ``meta_info.output_token_logprobs`` lists ``[logprob, token_id, null]`` (SGLang: tempered log-probs).

``logprobs_supported=False`` makes it answer like a server that ignores log-prob requests.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from pdbgym.agent.backends.base import SamplingParams, stop_token_ids
from pdbgym.agent.backends.hf import pad_id
from pdbgym.engine import EngineRequest, engine_for

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class ModelServer:
    """Serve ``model``/``tokenizer`` on ``host:port`` (port 0 picks a free one) in a daemon thread."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str = "tiny", host: str = "127.0.0.1", port: int = 0,
                 logprobs_supported: bool = True, sglang_api: bool = True, chat_logprob_mode: str = "raw"):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.logprobs_supported = logprobs_supported
        self.sglang_api = sglang_api
        self.chat_logprob_mode = chat_logprob_mode
        self.stops = stop_token_ids(tokenizer, model)
        self.lock = threading.Lock()
        self.requests_served = 0
        self.httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ModelServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sample(self, prompt_ids: list[int], params: SamplingParams, mode: str) -> tuple[list[int], list[float], str]:
        with self.lock:
            self.requests_served += 1
        engine = engine_for(self.model, self.stops, pad_id(self.tokenizer))
        result = engine.submit(EngineRequest(prompt_ids, params.max_new_tokens, params.temperature, params.top_p,
                                             params.seed, mode)).result()
        return result.ids, result.logprobs, result.finish

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        text = self.tokenizer.apply_chat_template(body["messages"], tools=body.get("tools"), tokenize=False,
                                                  add_generation_prompt=True)
        prompt_ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        params = SamplingParams(float(body.get("temperature", 1.0)), float(body.get("top_p", 1.0)),
                                int(body.get("max_tokens") or body.get("max_completion_tokens") or 256),
                                body.get("seed"))
        ids, logprobs, finish = self.sample(prompt_ids, params, self.chat_logprob_mode)
        visible = ids[:-1] if finish == "stop" else ids  # like vLLM: the stop token is not in the text
        choice: dict[str, Any] = {
            "index": 0, "finish_reason": finish, "logprobs": None,
            "message": {"role": "assistant", "content": self.tokenizer.decode(visible, skip_special_tokens=False)},
        }
        reply: dict[str, Any] = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
                                 "created": int(time.time()), "model": self.name, "choices": [choice],
                                 "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids)}}
        if body.get("logprobs") and self.logprobs_supported:
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            choice["logprobs"] = {"content": [
                {"token": f"token_id:{t}" if as_ids else self.tokenizer.decode([t]), "logprob": lp}
                for t, lp in zip(ids, logprobs, strict=True)]}
        if body.get("return_token_ids") and self.logprobs_supported:
            choice["token_ids"] = ids
            reply["prompt_token_ids"] = prompt_ids
        return reply

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        sampling = body.get("sampling_params") or {}
        params = SamplingParams(float(sampling.get("temperature", 1.0)), float(sampling.get("top_p", 1.0)),
                                int(sampling.get("max_new_tokens", 128)),
                                sampling.get("sampling_seed", sampling.get("seed")))
        prompt_ids = [int(t) for t in body["input_ids"]]
        ids, logprobs, finish = self.sample(prompt_ids, params, "tempered")
        meta: dict[str, Any] = {"prompt_tokens": len(prompt_ids), "completion_tokens": len(ids),
                                "finish_reason": {"type": finish}}
        if body.get("return_logprob") and self.logprobs_supported:
            meta["output_token_logprobs"] = [[lp, t, None] for t, lp in zip(ids, logprobs, strict=True)]
        return {"text": self.tokenizer.decode(ids, skip_special_tokens=True), "output_ids": ids, "meta_info": meta}


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            return None

        def _reply(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                self._reply(200, {"object": "list", "data": [{"id": server.name, "object": "model"}]})
            elif self.path == "/health":
                self._reply(200, {"status": "ok"})
            elif self.path == "/get_model_info" and server.sglang_api:
                self._reply(200, {"model_path": server.name, "is_generation": True})
            else:
                self._reply(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/v1/chat/completions":
                    self._reply(200, server.chat(body))
                elif self.path == "/generate" and server.sglang_api:
                    self._reply(200, server.generate(body))
                else:
                    self._reply(404, {"error": {"message": f"no route {self.path}"}})
            except (KeyError, ValueError, TypeError) as exc:
                self._reply(400, {"error": {"message": f"bad request: {exc}"}})

    return Handler
