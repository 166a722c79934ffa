"""The batched HF ``generate`` baseline of the engine's episode bench (``bench/generate_sampler.py``) is a
faithful sampler: every row's log-probs are the model's own over what it sampled, budgets and stop ids end
rows, and ``serve_with`` puts it behind the model's shared engine, which is how the bench plays the same
episodes through it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_engine import STOP, forward_logprobs

from pdbgym.engine import EngineRequest, engine_for
from pdbgym.engine.shared import release_engine, serve_with

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from generate_sampler import GenerateSampler  # noqa: E402 - bench/ is no package

REQUESTS = [EngineRequest(list(range(1, 4 + 9 * i)), 10 + i, temperature=0.8, seed=i, logprob_mode="tempered")
            for i in range(4)]


def test_the_generate_baseline_samples_with_the_models_logprobs_and_serves_the_shared_engines_callers(model):
    sampler = GenerateSampler(model, {STOP}, 0)
    serve_with(model, sampler)
    try:
        assert engine_for(model, {STOP}, 0) is sampler
        results = sampler.generate(REQUESTS)
        for request, result in zip(REQUESTS, results, strict=True):
            assert 1 <= len(result.ids) <= request.max_new_tokens
            assert STOP not in result.ids[:-1]
            assert result.finish == ("stop" if result.ids[-1] == STOP else "length")
            if result.finish == "length":
                assert len(result.ids) == request.max_new_tokens
            expected = forward_logprobs(model, request, result.ids)
            assert result.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
        assert sampler.stats.tokens == sum(len(r.ids) for r in results)
    finally:
        release_engine(model)
