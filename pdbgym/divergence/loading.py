"""Loading a HF causal LM for scoring, and the checks that must pass before any scoring starts.

Loading itself is the one model loader's (``pdbgym.modelload.load_causal_lm``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pdbgym.errors import PdbgymError
from pdbgym.modelload import ModelLoadError, load_tokenizer, model_path
from pdbgym.rollouts.record import RolloutRecord, declared_fingerprints, tokenizer_fingerprint

if TYPE_CHECKING:  # annotations only: torch and transformers load with a model
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# Config fields that change logits after the lm_head; scoring without them would be silently wrong.
_UNSUPPORTED_LOGIT_FIELDS = ("final_logit_softcapping", "logit_scale", "output_multiplier_scale")


class VocabMismatchError(PdbgymError):
    """The cache's token ids do not fit the model's vocabulary."""


def lm_head_and_decoder(model: PreTrainedModel) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The output projection and the base model that returns final hidden states.

    Refuses models whose logits are post-processed after the lm_head (soft-capping, logit scales):
    chunked scoring would skip that step.
    """
    config = getattr(model, "config", None)
    for field in _UNSUPPORTED_LOGIT_FIELDS:
        value = getattr(config, field, None)
        if value not in (None, 1, 1.0):
            raise ModelLoadError(
                f"{type(model).__name__} post-processes logits ({field}={value}); pdbgym's chunked "
                "scorer does not apply that, so it refuses to score this model"
            )
    lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    if lm_head is None or decoder is None or not hasattr(lm_head, "weight"):
        raise ModelLoadError(
            f"{type(model).__name__} has no separate decoder and lm_head; give a HF *ForCausalLM model"
        )
    return lm_head, decoder


def vocab_rows(model: PreTrainedModel) -> int:
    """Number of rows of the model's output projection (ids >= this cannot be scored)."""
    return int(lm_head_and_decoder(model)[0].weight.shape[0])


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_tokenizer_if_any(spec: str | os.PathLike[str]) -> PreTrainedTokenizerBase | None:
    """The tokenizer shipped beside a local model (its folder, or the .gguf file itself); None when it
    has none or it cannot be read (then only the vocabulary size can be checked)."""
    path = model_path(spec)  # 'embedded' and adapter-store names included
    if path.is_dir() and not any((path / name).exists() for name in _TOKENIZER_FILES):
        return None
    try:
        return load_tokenizer(path)
    except ModelLoadError:
        return None


def check_tokenizer(tokenizer: PreTrainedTokenizerBase, records: Sequence[RolloutRecord], label: str = "model") -> None:
    """Error when the cache records a tokenizer fingerprint other than ``tokenizer``'s, or several.

    Equal vocabulary sizes do not make equal tokenizers: ids of another tokenizer force-decoded by
    this model give numbers that look fine and mean nothing."""
    declared = declared_fingerprints(records)
    if len(declared) > 1:
        raise VocabMismatchError(f"the cache mixes samples of {len(declared)} tokenizers (fingerprints "
                                 f"{', '.join(sorted(declared))}); score each tokenizer's samples apart")
    ours = tokenizer_fingerprint(tokenizer)
    if declared and ours not in declared:
        names = {name for r in records
                 if (tok := r.metadata.get("tokenizer")) and (name := tok.get("name")) is not None}
        raise VocabMismatchError(
            f"the cache was tokenized by {', '.join(sorted(names)) or 'a tokenizer'} (fingerprint "
            f"{next(iter(declared))}) but {label}'s tokenizer has fingerprint {ours}: its ids would be read "
            "as other tokens. Score with a model that shares the cache's tokenizer"
        )


def check_vocab(model: PreTrainedModel, records: Sequence[RolloutRecord], label: str = "model",
                tokenizer: PreTrainedTokenizerBase | None = None) -> None:
    """Error before scoring when a cached id is out of range, the cache names another vocab size, or
    (given the model's ``tokenizer``) the cache records another tokenizer's fingerprint."""
    if tokenizer is not None:
        check_tokenizer(tokenizer, records, label)
    rows = vocab_rows(model)
    declared = {r.vocab_size for r in records} - {None}
    for size in declared:
        # Fewer tokenizer entries than embedding rows is normal (rows are padded, e.g. 151,669 vs 151,936).
        if int(size) > rows:
            raise VocabMismatchError(
                f"the cache was tokenized with a {size}-entry vocabulary but {label} has only {rows} "
                "output rows; score with a model that shares the cache's tokenizer"
            )
    for record in records:
        if not record.tokens:
            continue
        top, low = max(record.tokens), min(record.tokens)
        if top >= rows or low < 0:
            raise VocabMismatchError(
                f"record {record.instance_id!r} (sample {record.sample_idx}) holds token id "
                f"{top if top >= rows else low}, outside {label}'s vocabulary of {rows}; the cache was "
                "made with another tokenizer, score it with a model that shares it"
            )
