"""Student samples on the cached prompts, for KL(student || teacher) and the JSD's student half.

The student continues each cached prompt (the cached prompt ids, never re-tokenized text) with HF
``generate`` under the comparison's transform (its temperature and top-p; top-k off, no repetition
penalty), and the generated ids are kept as they are. Each sample becomes a ``RolloutRecord`` whose
whole response is scored (loss_mask 1) and whose ``rollout_log_probs`` are the student's own log-probs
under the same transform, computed by the same force-decoding scorer that scores the cache. These are
single-turn continuations; multi-turn agent rollouts from the agent package are records too and go
through the same scoring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pdbgym.divergence.scoring import ScoringConfig, score_records
from pdbgym.modelload import own_sampling
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord
from pdbgym.versions import require


def _generation_config(model: Any, semantics: LogprobSemantics, max_new_tokens: int) -> Any:
    require("transformers")
    from transformers import GenerationConfig  # optional: transformers (pdbgym[hf])

    model_defaults = getattr(model, "generation_config", None)
    eos = getattr(model_defaults, "eos_token_id", None) or getattr(model.config, "eos_token_id", None)
    # top_k=0 and, in sample_continuations, own_sampling: nothing of the checkpoint's own defaults
    # (top_k=20, repetition penalties) changes the distribution sampled away from the one scored.
    return GenerationConfig(
        do_sample=True, temperature=semantics.temperature, top_p=semantics.top_p, top_k=0,
        max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=eos if eos is not None else 0,
    )


def sample_continuations(
    model: Any,
    prompts: Sequence[RolloutRecord],
    semantics: LogprobSemantics,
    max_new_tokens: int,
    sampler_name: str,
    seed: int = 0,
    scoring: ScoringConfig | None = None,
) -> list[RolloutRecord]:
    """One student sample per prompt record, scored by the student itself under ``semantics``.

    ``prompts[i].tokens[:prompt_len]`` is the prompt; the sample keeps instance_id, dataset and the
    sample index of its prompt record, so task-level statistics pair it with the teacher's samples.
    """
    samples = generate_samples(model, prompts, semantics, max_new_tokens, sampler_name, seed)
    return with_own_logprobs(samples, score_records(model, samples, semantics, scoring))


def generate_samples(
    model: Any,
    prompts: Sequence[RolloutRecord],
    semantics: LogprobSemantics,
    max_new_tokens: int,
    sampler_name: str,
    seed: int = 0,
    indices: Sequence[int] | None = None,
) -> list[RolloutRecord]:
    """The unscored samples of ``prompts[i]`` for i in ``indices`` (default all), in that order.

    Sample i is drawn under seed ``seed * 1_000_003 + i`` whatever else is sampled, so a shard of the
    prompts samples exactly what the whole run would. ``rollout_log_probs`` are zeros until
    ``with_own_logprobs``.
    """
    import torch  # optional: torch (pdbgym[hf])

    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    config = _generation_config(model, semantics, max_new_tokens)
    device = next(model.parameters()).device
    samples = []
    with torch.inference_mode():
        for index in range(len(prompts)) if indices is None else indices:
            prompt_record = prompts[index]
            prompt = prompt_record.tokens[: prompt_record.prompt_len]
            torch.manual_seed(seed * 1_000_003 + index)
            with own_sampling(model):
                output = model.generate(torch.tensor([prompt], device=device), generation_config=config)
            generated = output[0, len(prompt):].tolist()
            samples.append(_sample_record(prompt_record, prompt, generated, semantics, sampler_name, config))
    return samples


def with_own_logprobs(samples: list[RolloutRecord], own: Sequence[Any]) -> list[RolloutRecord]:
    """``samples`` with ``rollout_log_probs`` set to the sampler's own scores (one array per sample)."""
    for record, values in zip(samples, own, strict=True):
        record.rollout_log_probs = values.tolist()
    return samples


def _sample_record(
    prompt_record: RolloutRecord, prompt: list[int], generated: list[int], semantics: LogprobSemantics,
    sampler_name: str, config: Any,
) -> RolloutRecord:
    eos = config.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list) else {eos}
    stopped_on_eos = bool(generated) and generated[-1] in eos_ids
    metadata = {
        "instance_id": prompt_record.instance_id,
        "_sample_idx": prompt_record.sample_idx,
        "_sampler": sampler_name,
        "_stop": "eos" if stopped_on_eos else "max_new_tokens",
        "logprob_semantics": semantics.to_dict(),
    }
    if "tokenizer" in prompt_record.metadata:
        metadata["tokenizer"] = prompt_record.metadata["tokenizer"]
    return RolloutRecord(
        instance_id=prompt_record.instance_id, dataset=prompt_record.dataset, tokens=prompt + generated,
        prompt_len=len(prompt), response_length=len(generated), loss_mask=[1] * len(generated),
        rollout_log_probs=[0.0] * len(generated), metadata=metadata,
    )
