"""Backends against real models: in-process HF, and HTTP clients talking to a loopback model server."""

import asyncio
import socket

import pytest
import torch

from pdbgym.agent.backends.base import BackendError, GenerationRequest, SamplingParams
from pdbgym.agent.backends.hf import HFBackend
from pdbgym.agent.backends.openai_server import OpenAIChatBackend
from pdbgym.agent.backends.sglang import SGLangBackend
from pdbgym.agent.policies import PolicySpec, build_backend, parse_policy
from pdbgym.agent.testing_server import ModelServer


def force_decoded_logprobs(model, prompt_ids, ids, temperature):
    """log_softmax(z / T) of each of ``ids`` given the prefix, from one full forward pass (no KV cache)."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt_ids + ids])).logits[0].float()
    scores = torch.log_softmax(logits[len(prompt_ids) - 1:-1] / temperature, -1)  # token j from logits j-1
    return scores[torch.arange(len(ids)), torch.tensor(ids)].tolist()


def request(tokenizer, params, text="Fix sub()."):
    messages = [{"role": "user", "content": text}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return GenerationRequest(list(ids), messages, None, params)


def test_hf_logprobs_are_the_tempered_scores_of_the_sampled_ids(tiny_backend):
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=12, seed=3)
    req = request(tiny_backend.tokenizer, params)
    turn = asyncio.run(tiny_backend.generate(req))
    assert len(turn.token_ids) == len(turn.logprobs) > 0
    expected = force_decoded_logprobs(tiny_backend.model, req.prompt_ids, turn.token_ids, 0.7)
    assert turn.logprobs == pytest.approx(expected, abs=1e-4)
    assert tiny_backend.semantics(params).to_dict() == {
        "engine": "hf:tempered", "temperature": 0.7, "top_p": 0.9, "top_p_renormalized": False}
    again = asyncio.run(tiny_backend.generate(req))
    assert again.token_ids == turn.token_ids  # same seed, same ids


def test_sglang_generate_is_token_in_token_out(tiny_server, tiny_backend):
    backend = build_backend(PolicySpec(kind="url", target=tiny_server.url))  # auto-detects /generate
    assert isinstance(backend, SGLangBackend)
    params = SamplingParams(temperature=0.7, top_p=1.0, max_new_tokens=10, seed=5)
    req = request(backend.tokenizer, params)
    turn = asyncio.run(backend.generate(req))
    local = asyncio.run(tiny_backend.generate(req))
    assert turn.token_ids == local.token_ids and turn.logprobs == pytest.approx(local.logprobs, abs=1e-5)
    assert backend.semantics(params).engine == "sglang"
    asyncio.run(backend.aclose())


def test_chat_backend_gets_ids_and_raw_logprobs(tiny_server, tiny_backend):
    backend = OpenAIChatBackend.connect(tiny_server.url + "/v1", tiny_backend.tokenizer)
    params = SamplingParams(temperature=0.8, top_p=1.0, max_new_tokens=10, seed=7)
    req = request(backend.tokenizer, params)
    turn = asyncio.run(backend.generate(req))
    expected = force_decoded_logprobs(tiny_backend.model, req.prompt_ids, turn.token_ids, 1.0)  # vLLM raw
    assert turn.logprobs == pytest.approx(expected, abs=1e-4)
    sem = backend.semantics(params)
    assert (sem.engine, sem.temperature) == ("vllm:raw", 1.0)
    asyncio.run(backend.aclose())


def test_many_concurrent_requests_share_one_server(tiny_server, tiny_backend):
    backend = SGLangBackend.connect(tiny_server.url, tiny_backend.tokenizer)
    before = tiny_server.requests_served

    async def burst():
        params = SamplingParams(temperature=1.0, max_new_tokens=4)
        turns = await asyncio.gather(*(backend.generate(request(backend.tokenizer, params, f"task {i}"))
                                       for i in range(8)))
        await backend.aclose()
        return turns

    turns = asyncio.run(burst())
    assert all(len(t.token_ids) == len(t.logprobs) >= 1 for t in turns)
    assert tiny_server.requests_served - before == 8


def test_unreachable_server_is_a_clear_error_before_any_episode(smol_tokenizer):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connections are refused
        with pytest.raises(BackendError, match="cannot reach model server"):
            OpenAIChatBackend.connect(f"http://127.0.0.1:{port}", smol_tokenizer)


def test_server_without_logprobs_is_refused(tiny_backend):
    with ModelServer(tiny_backend.model, tiny_backend.tokenizer, logprobs_supported=False, sglang_api=False) as bare:
        with pytest.raises(BackendError, match="no token ids/log-probs"):
            OpenAIChatBackend.connect(bare.url, tiny_backend.tokenizer)
        assert OpenAIChatBackend.connect(bare.url, tiny_backend.tokenizer, require_logprobs=False).name == "tiny"


def test_missing_model_path_and_unknown_policy_are_clear(tmp_path):
    with pytest.raises(BackendError, match="does not exist"):
        HFBackend.from_path(tmp_path / "nope")
    with pytest.raises(BackendError, match="no config.json"):
        HFBackend.from_path(tmp_path)
    with pytest.raises(BackendError, match="not 'scripted', 'human', 'embedded'"):
        parse_policy("gpt-17")


def test_hf_second_turn_reuses_prefix_cache_with_identical_logprobs(tiny_model_dir, tiny_backend):
    from pdbgym.engine import LocalEngine

    reusing = HFBackend(tiny_backend.model, tiny_backend.tokenizer, "tiny",
                        engine=LocalEngine(tiny_backend.model, tiny_backend.stops, 0))
    params = SamplingParams(temperature=0.9, max_new_tokens=6, seed=4)
    first_req = request(reusing.tokenizer, params)
    first = asyncio.run(reusing.generate(first_req))
    observation = reusing.tokenizer("\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n",
                                    add_special_tokens=False)["input_ids"]
    second_prompt = first_req.prompt_ids + first.token_ids + observation
    second = asyncio.run(reusing.generate(GenerationRequest(second_prompt, [], None, params)))
    # the second turn prefilled only what the first turn's cache did not cover
    assert reusing.engine.stats.reused_tokens == len(first_req.prompt_ids) + len(first.token_ids) - 1
    expected = force_decoded_logprobs(tiny_backend.model, second_prompt, second.token_ids, 0.9)
    assert second.logprobs == pytest.approx(expected, abs=1e-4)
    fresh = HFBackend(tiny_backend.model, tiny_backend.tokenizer, "tiny",
                      engine=LocalEngine(tiny_backend.model, tiny_backend.stops, 0))
    assert asyncio.run(fresh.generate(GenerationRequest(second_prompt, [], None, params))).token_ids == second.token_ids
    assert fresh.engine.stats.reused_tokens == 0
