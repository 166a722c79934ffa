"""The engine's static path on a CUDA device: the captured decode graph samples what the dynamic path
samples, with log-probs equal to a plain fp32 forward pass, a request arriving mid-decode joins the
running batch, and an episode's next turn continues its kept rows. Skipped without CUDA (CI has none;
run on the GPU machine)."""

from __future__ import annotations

import copy

import pytest
import torch
from test_engine import REQUESTS, STOP, SubmitAtStep, forward_logprobs

from pdbgym.engine import EngineRequest, EngineSettings, LocalEngine

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def cuda_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config).to("cuda").eval()


@pytest.mark.parametrize("graphs", ["capture", "compiled"])
def test_the_captured_graph_samples_what_the_dynamic_path_samples(cuda_model, graphs):
    static = LocalEngine(cuda_model, {STOP}, 0, EngineSettings(static=True, min_length=512, graphs=graphs))
    dynamic = LocalEngine(cuda_model, {STOP}, 0, EngineSettings(static=False))
    assert static.mode == "static"
    drawn = static.generate(REQUESTS)
    assert static.mode == "static" and static.stats.compiles  # the graph was captured, not given up
    assert static.settings.graphs == graphs  # a compiled step stayed compiled (no fallback to capture)
    assert [r.ids for r in drawn] == [r.ids for r in dynamic.generate(REQUESTS)]
    on_cpu = copy.deepcopy(cuda_model).cpu()
    for request, result in zip(REQUESTS, drawn, strict=True):
        expected = forward_logprobs(on_cpu, request, result.ids)
        assert result.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


@pytest.mark.parametrize("graphs", ["capture", "compiled"])
def test_a_request_joins_a_running_graph_session(cuda_model, graphs):
    engine = LocalEngine(cuda_model, set(), 0, EngineSettings(static=True, min_length=512, graphs=graphs))
    late = EngineRequest([5, 6, 7], 6, temperature=0.9, seed=11)
    hook = SubmitAtStep(engine, 4, late)
    engine.submit(EngineRequest([1, 2, 3, 4, 5, 6, 7, 8], 24, temperature=0.9, seed=10, mask=hook)).result()
    joined = hook.future.result()
    assert engine.stats.batches == 1 and len(joined.ids) == 6
    assert joined.ids == engine.generate([late])[0].ids


def test_a_graph_captured_mid_session_leaves_the_live_rows_inputs_as_they_were(cuda_model):
    """A first row with top-p < 1 joining a session of top-p 1 rows has the step with the nucleus
    captured there and then; the capture's warm-up runs move every slot's inputs, which must be put back:
    the running row and the joiner each sample what they sample alone."""
    engine = LocalEngine(cuda_model, set(), 0, EngineSettings(static=True, min_length=512))
    late = EngineRequest([5, 6, 7], 8, temperature=0.9, top_p=0.8, seed=11)
    hook = SubmitAtStep(engine, 4, late)
    first = EngineRequest([1, 2, 3, 4, 5, 6, 7, 8], 24, temperature=0.9, seed=10, mask=hook)
    together = engine.submit(first).result()
    joined = hook.future.result()
    assert engine.stats.batches == 1
    alone = LocalEngine(cuda_model, set(), 0, EngineSettings(static=True, min_length=512))
    assert together.ids == alone.submit(EngineRequest(first.prompt_ids, 24, temperature=0.9, seed=10,
                                                      mask=SubmitAtStep(alone, 10**6, late))).result().ids
    assert joined.ids == alone.generate([late])[0].ids


def test_engines_on_several_threads_capture_and_decode_at_once(cuda_model):
    """An evaluation plays several arms at once, each arm's engine on its own thread: one engine's graph
    capture while another decodes, copies ids to the device and synchronizes must break neither (in
    CUDA's global capture mode the other thread's work invalidated the capture and every later call of
    both failed). Each engine samples exactly what it samples alone."""
    import threading

    models = [copy.deepcopy(cuda_model) for _ in range(3)]
    alone = [LocalEngine(m, {STOP}, 0, EngineSettings(static=True, min_length=512 * (i + 1))).generate(REQUESTS)
             for i, m in enumerate(models)]
    engines = [LocalEngine(m, {STOP}, 0, EngineSettings(static=True, min_length=512 * (i + 1)))
               for i, m in enumerate(models)]  # new shapes: every engine captures while the others run
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(engines))

    def play(i: int) -> None:
        try:
            start.wait()
            results[i] = [engines[i].generate(REQUESTS) for _ in range(3)]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=play, args=(i,)) for i in range(len(engines))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for i, engine in enumerate(engines):
        assert engine.mode == "static" and engine.stats.compiles, engine  # captured, not given up
        for drawn in results[i]:
            assert [r.ids for r in drawn] == [r.ids for r in alone[i]]


def test_an_episodes_next_turn_continues_the_rows_kept_from_a_graph_session(cuda_model):
    from test_engine import next_turns

    engine = LocalEngine(cuda_model, {STOP}, 0, EngineSettings(static=True, min_length=512))
    first = [EngineRequest(list(range(1, 5 + 7 * i)), 6, temperature=0.9, seed=i) for i in range(3)]
    second = next_turns(first, engine.generate(first), [40, 41, 42])
    drawn = engine.generate(second)
    assert engine.stats.compiles and engine.mode == "static"
    assert engine.stats.reused_tokens == sum(len(r.prompt_ids) - 3 - 1 for r in second)
    on_cpu = copy.deepcopy(cuda_model).cpu()
    for request, result in zip(second, drawn, strict=True):
        assert result.logprobs == pytest.approx(forward_logprobs(on_cpu, request, result.ids).tolist(), abs=1e-4)
