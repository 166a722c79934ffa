"""Loading a HF causal LM for scoring, and the checks that must pass before any scoring starts."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pdbgym.errors import PdbgymError
from pdbgym.rollouts.record import RolloutRecord

# Config fields that change logits after the lm_head; scoring without them would be silently wrong.
_UNSUPPORTED_LOGIT_FIELDS = ("final_logit_softcapping", "logit_scale", "output_multiplier_scale")


class ModelLoadError(PdbgymError):
    """A model path cannot be loaded or the model cannot be scored with."""


class VocabMismatchError(PdbgymError):
    """The cache's token ids do not fit the model's vocabulary."""


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_dtype(device: str) -> str:
    """bf16 on CUDA; fp32 elsewhere (CPU bf16 matmuls are slow and lose fp32 agreement)."""
    return "bfloat16" if str(device).startswith("cuda") else "float32"


def load_causal_lm(spec: str | os.PathLike[str], device: str | None = None, dtype: str | None = None) -> Any:
    """Load a local HF causal LM: a model folder, or a ``.gguf`` file (de-quantized by transformers).

    Never reaches a hub: a path that does not exist is an error. ``dtype`` defaults to bf16 on CUDA,
    fp32 on CPU; attention is sdpa. The model is returned in eval mode on ``device``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    path = Path(spec)
    if not path.exists():
        raise ModelLoadError(
            f"model path {str(spec)!r} does not exist; give a local model folder (config.json + weights) "
            "or a .gguf file (models are never downloaded)"
        )
    device = device or default_device()
    torch_dtype = getattr(torch, dtype or default_dtype(device))
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "attn_implementation": "sdpa", "local_files_only": True}
    folder = path
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(f"{path} is a file but not a .gguf; give the model's folder instead")
        folder, kwargs["gguf_file"] = path.parent, path.name
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load a causal LM from {path}: {exc}") from exc
    return model.to(device).eval()


def lm_head_and_decoder(model: Any) -> tuple[Any, Any]:
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


def vocab_rows(model: Any) -> int:
    """Number of rows of the model's output projection (ids >= this cannot be scored)."""
    return int(lm_head_and_decoder(model)[0].weight.shape[0])


def check_vocab(model: Any, records: Sequence[RolloutRecord], label: str = "model") -> None:
    """Error before scoring when a cached id is out of range or the cache names another vocab size."""
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
