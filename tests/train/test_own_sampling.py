"""Samplers sample what is scored: a model shipping a repetition penalty in its generation_config.json
does not change what the engine draws for an agent backend, GRPO's batched generator or the divergence
sampler.

The model's own defaults would make the prompt's token all but impossible to draw again; the recorded
and scored distribution is plain softmax(z / T). Each sampler draws one token many times from a prompt
made of the token the plain model favours, and its frequency must match the plain probability.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

import pytest
import torch

from pdbgym.agent.backends.base import GenerationRequest, SamplingParams
from pdbgym.agent.backends.hf import HFBackend
from pdbgym.agent.runner import run_to_end
from pdbgym.divergence.sampling import generate_samples
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord
from pdbgym.train.grpo.rollout import BatchedGenerator

from modelfixtures import save_tiny_llama, word_tokenizer

DRAWS = 400


@pytest.fixture(scope="module")
def penalised(tmp_path_factory):
    """A tiny model whose shipped generation config carries a crushing repetition penalty and top_k=1;
    the favoured next token of the prompt [t, t, t, t] and its plain probability at T = 1."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("penalised")
    tokenizer = word_tokenizer(48)
    save_tiny_llama(folder, tokenizer, seed=3)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.generation_config.repetition_penalty = 1e4
    model.generation_config.top_k = 1
    model.generation_config.do_sample = True
    model.generation_config.save_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    assert model.generation_config.repetition_penalty == 1e4  # shipped, as a checkpoint would
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)  # peaked distributions, like a trained model's
        best, chosen = -1.0, None
        for token in range(2, len(tokenizer)):
            probs = torch.softmax(model(torch.tensor([[token] * 4])).logits[0, -1], dim=-1)
            # wanted: the prompt's own token likely but not certain, so both samplers are tested
            if 0.3 < float(probs[token]) < 0.8 and float(probs[token]) > best:
                best, chosen = float(probs[token]), token
    assert chosen is not None, "no token favours itself in this random model; change the seed"
    return model, tokenizer, chosen, best


def _within(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p))


def test_grpo_generator_draws_from_the_plain_distribution(penalised):
    model, tokenizer, token, p = penalised
    generator = BatchedGenerator(model, tokenizer)
    params = SamplingParams(1.0, 1.0, 1, None)
    requests = [GenerationRequest([token] * 4, [], None, replace(params, seed=seed)) for seed in range(DRAWS)]

    async def draw_all():
        return await asyncio.gather(*(generator.generate(r) for r in requests))

    drawn = run_to_end(draw_all())
    generator.close()
    count = sum(g.token_ids[0] == token for g in drawn)
    # with the model's own penalty and top_k=1 the count would be 0 (or every draw the top token)
    assert _within(count, DRAWS, p), (count, DRAWS * p)


def test_agent_backend_draws_from_the_plain_distribution(penalised):
    model, tokenizer, token, p = penalised
    backend = HFBackend(model, tokenizer, "penalised")

    async def draw_all():
        return await asyncio.gather(*(backend.generate(GenerationRequest([token] * 4, [], None,
                                                                         SamplingParams(1.0, 1.0, 1, seed)))
                                      for seed in range(DRAWS)))

    count = sum(g.token_ids[0] == token for g in run_to_end(draw_all()))
    assert _within(count, DRAWS, p), (count, DRAWS * p)


def test_divergence_sampler_draws_from_the_plain_distribution(penalised):
    model, _, token, p = penalised
    semantics = LogprobSemantics(engine="unit", temperature=1.0, top_p=1.0, top_p_renormalized=False)
    prompt = RolloutRecord(instance_id="t", dataset="unit", tokens=[token] * 5, prompt_len=4,
                           response_length=1, loss_mask=[1], rollout_log_probs=[0.0], reward_score=0.0)
    samples = generate_samples(model, [prompt] * DRAWS, semantics, max_new_tokens=1, sampler_name="unit", seed=3)
    count = sum(record.tokens[record.prompt_len] == token for record in samples)
    assert _within(count, DRAWS, p), (count, DRAWS * p)
    assert model.generation_config.repetition_penalty == 1e4  # the model's own config is left as it was
