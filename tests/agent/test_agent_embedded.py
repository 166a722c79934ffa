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
