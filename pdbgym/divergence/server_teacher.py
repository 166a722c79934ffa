"""Scoring records with a teacher behind an OpenAI-compatible ``/v1/completions`` server.

The request sends the record's token ids as the prompt with ``echo: true, logprobs: 1, max_tokens: 1``;
vLLM and SGLang then return the log-prob of every prompt token after the first in
``choices[0].logprobs.token_logprobs``. Those prompt (prefill) log-probs are at temperature 1 with no
top-p on both engines, whatever sampling parameters the request carries, so a server teacher can
only take part in a comparison under the raw transform (temperature 1, no renormalization).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pdbgym import httpjson
from pdbgym.divergence.scoring import scored_positions
from pdbgym.divergence.semantics import SemanticsError, describe
from pdbgym.errors import PdbgymError
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord


class TeacherServerError(PdbgymError):
    """The teacher server could not be reached or answered something unusable."""


def check_server_semantics(semantics: LogprobSemantics) -> None:
    if semantics.temperature != 1.0 or (semantics.top_p_renormalized and semantics.top_p < 1.0):
        raise SemanticsError(
            f"a completions server returns prompt log-probs at temperature 1 without top-p, but this "
            f"comparison is under {describe(semantics)}; use a local teacher model (--teacher PATH), or "
            "compare under --temperature 1 with a cache whose log-probs are raw"
        )


def _post(url: str, payload: dict, timeout_s: float) -> dict:
    try:
        return httpjson.request_json(url, payload, timeout_s)
    except httpjson.HttpStatusError as exc:
        raise TeacherServerError(f"teacher server {url} answered HTTP {exc.status}: {exc.detail}") from exc
    except httpjson.HttpJsonError as exc:
        raise TeacherServerError(
            f"cannot reach the teacher server at {url} ({exc.detail}); is it running and serving /v1/completions?"
        ) from exc


def completions_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if base.endswith("/completions"):
        return base
    return base + ("/completions" if base.endswith("/v1") else "/v1/completions")


def prompt_logprobs(base_url: str, model: str, token_ids: Sequence[int], timeout_s: float = 600.0) -> np.ndarray:
    """log p(token_ids[j] | token_ids[:j]) for j = 1..len-1 from the server (float64 nats, length len-1)."""
    url = completions_url(base_url)
    answer = _post(url, {"model": model, "prompt": list(token_ids), "max_tokens": 1, "echo": True,
                         "logprobs": 1, "temperature": 1.0}, timeout_s)
    try:
        values = answer["choices"][0]["logprobs"]["token_logprobs"]
    except (KeyError, IndexError, TypeError) as exc:
        raise TeacherServerError(
            f"teacher server {url} returned no choices[0].logprobs.token_logprobs; it must support "
            "echo=true with logprobs on /v1/completions (vLLM and SGLang do)"
        ) from exc
    if len(values) < len(token_ids):
        raise TeacherServerError(
            f"teacher server {url} echoed {len(values)} log-probs for a {len(token_ids)}-token prompt; it "
            "must take token ids as the prompt without re-tokenizing them"
        )
    # Entry 0 is None (nothing precedes the first token); entries past the prompt are the generated one.
    return np.array([float("nan") if v is None else v for v in values[1 : len(token_ids)]], dtype=np.float64)


def score_records_with_server(
    base_url: str, model: str, records: Sequence[RolloutRecord], semantics: LogprobSemantics
) -> list[np.ndarray]:
    """Per record, the server's log-probs at the scored (loss_mask == 1) positions; same layout as
    ``scoring.score_records``. Only records' ids up to the last scored token are sent."""
    check_server_semantics(semantics)
    results = []
    for record in records:
        positions = scored_positions(record)
        if positions.size == 0:
            results.append(np.zeros(0))
            continue
        values = prompt_logprobs(base_url, model, record.tokens[: int(positions[-1]) + 1])
        results.append(values[positions - 1])
    return results
