"""The local engine on a tiny random model (CPU): log-probs equal a plain forward pass, rows batch and join
without changing what they sample, stops and budgets end rows, bad requests and failing calls are
reported to their callers, and the engine keeps serving after a failure."""

from __future__ import annotations

import pytest
import torch

from pdbgym.engine import EngineError, EngineRequest, EngineSettings, LocalEngine
from pdbgym.nucleus import nucleus_logprobs

STOP = 299


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    return LlamaForCausalLM(config).eval()


def engine_of(model, static: bool) -> LocalEngine:
    return LocalEngine(model, {STOP}, 0, EngineSettings(static=static, min_length=64))


def forward_logprobs(model, request: EngineRequest, ids: list[int]) -> torch.Tensor:
    """What the engine should report for ``ids`` after ``request``'s prompt, from one plain forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([list(request.prompt_ids) + ids])).logits[0].float()
    steps = logits[len(request.prompt_ids) - 1:-1]
    tempered = torch.log_softmax(steps / request.temperature, -1)
    if request.logprob_mode == "processed":
        tempered = nucleus_logprobs(tempered, request.top_p)
    return tempered.gather(-1, torch.tensor(ids)[:, None])[:, 0]


REQUESTS = [EngineRequest(list(range(1, 4 + 9 * i)), 12, temperature=0.8, top_p=1.0 if i % 2 else 0.7, seed=i,
                          logprob_mode="processed" if i % 2 == 0 else "tempered") for i in range(5)]


@pytest.mark.parametrize("static", [False, True])
def test_logprobs_equal_a_plain_forward_pass_and_rows_sample_alike_alone_or_together(model, static):
    engine = engine_of(model, static)
    together = engine.generate(REQUESTS)
    for request, result in zip(REQUESTS, together, strict=True):
        assert 1 <= len(result.ids) <= request.max_new_tokens
        expected = forward_logprobs(model, request, result.ids)
        assert result.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
        if result.finish == "stop":
            assert result.ids[-1] == STOP and STOP not in result.ids[:-1]
        else:
            assert result.finish == "length" and len(result.ids) == request.max_new_tokens and STOP not in result.ids
    alone = [engine.generate([r])[0] for r in REQUESTS[:3]]
    assert [a.ids for a in alone] == [t.ids for t in together[:3]]
    engine.close()


def test_static_and_dynamic_paths_sample_the_same_ids(model):
    results = [engine_of(model, static).generate(REQUESTS) for static in (False, True)]
    assert [r.ids for r in results[0]] == [r.ids for r in results[1]]


class SubmitAtStep:
    """A mask that changes nothing but, at one step of its row, submits another request to the engine
    (from inside the decode loop, as a second episode asking for a turn would)."""

    def __init__(self, engine: LocalEngine, at: int, request: EngineRequest):
        self.engine, self.at, self.request = engine, at, request
        self.steps = 0
        self.future = None

    def apply(self, logits, left):
        self.steps += 1
        if self.steps == self.at:
            self.future = self.engine.submit(self.request)
        return logits

    def accept(self, token):
        return None


def test_a_request_arriving_mid_decode_joins_the_running_batch(model):
    engine = LocalEngine(model, set(), 0, EngineSettings(static=True, min_length=64))
    late = EngineRequest([5, 6, 7], 6, temperature=0.9, seed=11)
    hook = SubmitAtStep(engine, 4, late)
    first = engine.submit(EngineRequest([1, 2, 3, 4, 5, 6, 7, 8], 24, temperature=0.9, seed=10, mask=hook)).result()
    joined = hook.future.result()
    assert len(first.ids) == 24 and len(joined.ids) == 6
    assert engine.stats.batches == 1  # one session served both: the late request did not wait for the first
    assert engine.stats.to_dict()["mean_live_rows"] > 1
    assert joined.logprobs == pytest.approx(forward_logprobs(model, late, joined.ids).tolist(), abs=1e-4)
    assert joined.ids == engine.generate([late])[0].ids  # and it sampled what it samples alone


def test_bad_requests_are_refused_by_name(model):
    engine = engine_of(model, False)
    for bad, what in ((EngineRequest([], 4), "empty prompt"), (EngineRequest([1], 0), "max_new_tokens"),
                      (EngineRequest([1], 4, top_p=0.0), "top_p"), (EngineRequest([1], 4, temperature=-1), "temperature"),
                      (EngineRequest([1], 4, logprob_mode="vllm"), "logprob_mode")):
        with pytest.raises(EngineError, match=what):
            engine.submit(bad)


def test_a_failing_batch_reaches_its_callers_and_the_engine_serves_on(model):
    engine = engine_of(model, False)
    broken = engine.submit(EngineRequest([1, 2, 10_000], 4, seed=1))  # an id past the embedding table
    with pytest.raises(IndexError):
        broken.result(timeout=60)
    assert len(engine.generate([EngineRequest([1, 2, 3], 4, seed=1)])[0].ids) >= 1
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.submit(EngineRequest([1, 2, 3], 4))


def test_greedy_rows_take_the_argmax_and_report_the_t1_logprob(model):
    engine = engine_of(model, True)
    request = EngineRequest([3, 4, 5], 5, temperature=0.0, seed=None, logprob_mode="processed")
    result = engine.generate([request])[0]
    with torch.no_grad():
        logits = model(torch.tensor([[3, 4, 5] + result.ids])).logits[0, 2:-1].float()
    assert result.ids[:len(logits)] == logits.argmax(-1).tolist()[:len(result.ids)]
    assert result.logprobs == pytest.approx(torch.log_softmax(logits, -1).gather(
        -1, torch.tensor(result.ids)[:, None])[:, 0].tolist(), abs=1e-4)


def test_a_cancelled_request_is_dropped_and_the_batch_goes_on(model):
    engine = engine_of(model, True)
    stopper = None

    class CancelAtStep(SubmitAtStep):
        def apply(self, logits, left):
            self.steps += 1
            if self.steps == 3:
                stopper.cancel()  # the caller of the other row gives up mid-decode (Ctrl-C)
            return logits

    hook = CancelAtStep(engine, 0, REQUESTS[0])
    stopper = engine.submit(EngineRequest([9, 8, 7], 30, temperature=0.9, seed=5))
    kept = engine.submit(EngineRequest([1, 2, 3], 12, temperature=0.9, seed=6, mask=hook))
    assert len(kept.result(timeout=60).ids) >= 1 and stopper.cancelled()
    assert engine.generate([EngineRequest([1, 2], 3, seed=1)])[0].ids  # the engine serves on
