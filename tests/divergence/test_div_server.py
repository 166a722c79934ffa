"""A teacher behind a real OpenAI-compatible /v1/completions endpoint on loopback (echo + logprobs)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
from div_models import make_record, tiny_model

from pdbgym.divergence.scoring import ScoringConfig, score_records
from pdbgym.divergence.semantics import SemanticsError
from pdbgym.divergence.server_teacher import TeacherServerError, score_records_with_server
from pdbgym.rollouts.record import LogprobSemantics

RAW = LogprobSemantics(engine="server", temperature=1.0)


def serve_completions(model, truncate_echo: bool = False) -> ThreadingHTTPServer:
    """The subset of vLLM's /v1/completions that prompt scoring uses: token-id prompts, echo, logprobs."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's naming)
            if self.path != "/v1/completions":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ids = torch.tensor([body["prompt"]])
            with torch.no_grad():
                log_probs = torch.log_softmax(model(ids).logits[0].double(), -1)
            prompt_lp = log_probs[:-1].gather(-1, ids[0, 1:, None]).squeeze(-1).tolist()
            generated = int(log_probs[-1].argmax())
            token_logprobs = [None, *prompt_lp, float(log_probs[-1, generated])]
            if truncate_echo:
                token_logprobs = token_logprobs[:3]
            answer = {"choices": [{"text": "", "logprobs": {"token_logprobs": token_logprobs}}]}
            payload = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def teacher():
    return tiny_model("qwen3", seed=5)


@pytest.fixture(scope="module")
def records():
    rng = np.random.default_rng(4)
    return [make_record(rng, f"t{i}", 5, 25 + 7 * i) for i in range(3)]


def test_server_scores_equal_local_scores(teacher, records):
    server = serve_completions(teacher)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        remote = score_records_with_server(url, "teacher", records, RAW)
        local = score_records(teacher, records, RAW, ScoringConfig(show_progress=False))
        for a, b in zip(remote, local, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-5)
        # The same through the /v1 base URL form.
        assert np.allclose(score_records_with_server(url + "/v1", "teacher", records[:1], RAW)[0], local[0], atol=1e-5)
    finally:
        server.shutdown()


def test_server_transform_mismatch_is_refused_before_any_request(records):
    with pytest.raises(SemanticsError, match="temperature 1"):
        score_records_with_server("http://127.0.0.1:9", "m", records, LogprobSemantics("sglang", 0.7))


def test_unreachable_and_wrong_answers_are_named(teacher, records):
    with pytest.raises(TeacherServerError, match="cannot reach"):
        score_records_with_server("http://127.0.0.1:9", "m", records, RAW)
    server = serve_completions(teacher, truncate_echo=True)
    try:
        with pytest.raises(TeacherServerError, match="echoed 3 log-probs"):
            score_records_with_server(f"http://127.0.0.1:{server.server_address[1]}", "m", records, RAW)
        with pytest.raises(TeacherServerError, match="HTTP 404"):
            score_records_with_server(f"http://127.0.0.1:{server.server_address[1]}/v2/completions", "m",
                                      records, RAW)
    finally:
        server.shutdown()
