"""Student samples on the cached prompts, for KL(student || teacher) and the JSD's student half.

The student continues each cached prompt (the cached prompt ids, never re-tokenized text) through the
local engine (``pdbgym.engine``: all prompts batched) under the comparison's transform, its temperature
and top-p and nothing else (nothing from the checkpoint's ``generation_config``), and the generated ids
are kept as they are. Each sample becomes a ``RolloutRecord`` whose
whole response is scored (loss_mask 1) and whose ``rollout_log_probs`` are the student's own log-probs
under the same transform, computed by the same force-decoding scorer that scores the cache. These are
single-turn continuations; multi-turn agent rollouts from the agent package are records too and go
through the same scoring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pdbgym.divergence.scoring import ScoringConfig, score_records
from pdbgym.engine import EngineRequest, LocalEngine
from pdbgym.rollouts.record import LogprobSemantics, RecordMetadata, RolloutRecord

if TYPE_CHECKING:  # annotations only: numpy arrays of scores, a transformers model
    import numpy as np
    from transformers import PreTrainedModel


def sample_continuations(
    model: PreTrainedModel,
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
    model: PreTrainedModel,
    prompts: Sequence[RolloutRecord],
    semantics: LogprobSemantics,
    max_new_tokens: int,
    sampler_name: str,
    seed: int = 0,
    indices: Sequence[int] | None = None,
) -> list[RolloutRecord]:
    """The unscored samples of ``prompts[i]`` for i in ``indices`` (default all), in that order.

    Sample i is drawn under seed ``seed * 1_000_003 + i``, and the engine's draw depends on a row's own
    seed alone, so a shard of the prompts samples what the whole run would (up to the batch's numerics). ``rollout_log_probs`` are zeros until
    ``with_own_logprobs``.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    chosen = list(range(len(prompts)) if indices is None else indices)
    stops = model_stops(model)
    engine = LocalEngine(model, stops, min(stops) if stops else 0)
    try:
        results = engine.generate([EngineRequest(
            list(prompts[i].tokens[: prompts[i].prompt_len]), max_new_tokens, semantics.temperature, semantics.top_p,
            seed * 1_000_003 + i) for i in chosen])
    finally:
        engine.close()
    return [_sample_record(prompts[i], list(prompts[i].tokens[: prompts[i].prompt_len]), result.ids, semantics,
                           sampler_name, result.finish) for i, result in zip(chosen, results, strict=True)]


def model_stops(model: PreTrainedModel) -> set[int]:
    """The ids that end a continuation: the eos id(s) of the model's generation config, else its config's."""
    defaults = getattr(model, "generation_config", None)
    eos = getattr(defaults, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    return set(eos) if isinstance(eos, list) else ({int(eos)} if eos is not None else set())


def with_own_logprobs(samples: list[RolloutRecord], own: Sequence[np.ndarray]) -> list[RolloutRecord]:
    """``samples`` with ``rollout_log_probs`` set to the sampler's own scores (one array per sample)."""
    for record, values in zip(samples, own, strict=True):
        record.rollout_log_probs = values.tolist()
    return samples


def _sample_record(
    prompt_record: RolloutRecord, prompt: list[int], generated: list[int], semantics: LogprobSemantics,
    sampler_name: str, finish: str,
) -> RolloutRecord:
    metadata: RecordMetadata = {
        "instance_id": prompt_record.instance_id,
        "_sample_idx": prompt_record.sample_idx,
        "_sampler": sampler_name,
        "_stop": "eos" if finish == "stop" else "max_new_tokens",
        "logprob_semantics": semantics.to_dict(),
    }
    if "tokenizer" in prompt_record.metadata:
        metadata["tokenizer"] = prompt_record.metadata["tokenizer"]
    return RolloutRecord(
        instance_id=prompt_record.instance_id, dataset=prompt_record.dataset, tokens=prompt + generated,
        prompt_len=len(prompt), response_length=len(generated), loss_mask=[1] * len(generated),
        rollout_log_probs=[0.0] * len(generated), metadata=metadata,
    )
