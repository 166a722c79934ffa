"""The compiled decode step (``EngineSettings(graphs="compiled")``): inductor's kernels for the model's
forward sample the ids the model's own kernels sample, with the same log-probs, and one compile serves
static caches of other slot counts and lengths, and the nucleus's step too (the draw is not compiled). On the CPU (inductor's C++ kernels); the GPU file runs the
same step recorded in a CUDA graph."""

from __future__ import annotations

import pytest
from test_engine import REQUESTS, STOP

from pdbgym.engine import EngineRequest, EngineSettings, LocalEngine

SHORTER = [EngineRequest(list(range(1, 4 + 9 * i)), 12, temperature=0.8, seed=i) for i in range(5)]
LONGER = [EngineRequest(list(range(1, 150 + 7 * i)), 40, temperature=0.9, seed=20 + i) for i in range(11)]


def test_the_compiled_step_samples_what_the_models_own_step_samples_and_one_compile_serves_every_shape(model,
                                                                                                    monkeypatch):
    import torch._dynamo.utils

    # dynamo's memory of earlier processes' dynamic dimensions (local PGO) would hide a first compile that
    # specialized on the first shape's sizes: the engine's own marks must make it serve every shape
    monkeypatch.setattr(torch._dynamo.config, "automatic_dynamic_local_pgo", False)
    plain = LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64))
    compiled = LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64, graphs="compiled"))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    # top-p 1 at 8 slots x 512 positions, then at 16 x 1,024, then rows with top-p < 1: one compiled graph
    for requests in (SHORTER, LONGER, REQUESTS):
        expected, got = plain.generate(requests), compiled.generate(requests)
        assert [r.ids for r in got] == [r.ids for r in expected]
        for a, b in zip(got, expected, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    assert {(c["slots"], c["length"]) for c in compiled.stats.compiles} == {(8, 512), (16, 1024)}
    plain.close()
    compiled.close()


def test_an_unknown_graphs_setting_is_refused_by_name():
    with pytest.raises(ValueError, match="graphs must be one of"):
        EngineSettings(graphs="inductor")
