"""Tiny random causal LMs and records shared by the divergence tests (built in-process, no hub)."""

from __future__ import annotations

import numpy as np

from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord

VOCAB = 1000


def tiny_model(kind: str = "qwen3", seed: int = 0, layers: int = 2):
    """A few-layer random Qwen3 or Llama model in fp32 on CPU, vocab ``VOCAB``."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    torch.manual_seed(seed)
    common = dict(
        hidden_size=64, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=4096,
    )
    config = Qwen3Config(head_dim=16, **common) if kind == "qwen3" else LlamaConfig(**common)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    # Random init gives near-uniform logits; scale the head so distributions are peaked like real ones.
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(10.0)
    return model.eval()


def make_record(
    rng: np.random.Generator,
    instance_id: str,
    prompt_len: int,
    response_length: int,
    sample_idx: int = 0,
    semantics: LogprobSemantics | None = None,
    mask_share: float = 0.6,
) -> RolloutRecord:
    """A record with random ids, a random loss mask (at least one 1) and made-up teacher log-probs."""
    tokens = rng.integers(0, VOCAB, size=prompt_len + response_length).tolist()
    mask = (rng.random(response_length) < mask_share).astype(int)
    mask[rng.integers(0, response_length)] = 1
    logprobs = np.where(mask == 1, -rng.exponential(1.0, size=response_length), 0.0)
    metadata: dict = {"instance_id": instance_id, "_sample_idx": sample_idx, "_termination_reason": "solved"}
    if semantics is not None:
        metadata["logprob_semantics"] = semantics.to_dict()
    return RolloutRecord(
        instance_id=instance_id, dataset="unit", tokens=tokens, prompt_len=prompt_len,
        response_length=response_length, loss_mask=mask.tolist(), rollout_log_probs=logprobs.tolist(),
        metadata=metadata,
    )
