"""A decode-step attention that reads each key/value head once, registered with transformers.

With a mask, transformers' sdpa path on CUDA copies every key/value head once per query head sharing it
(``repeat_kv``: 4x the cache traffic for Qwen3-4B's 32 query / 8 key-value heads), because torch's
masked grouped-query sdpa falls back to its math kernel. A decode step has one query per row, so the
engine's static sessions use this function instead: queries grouped by their key/value head, two
batched matrix products over the cache as it is, the mask applied in fp32. Anything that is not a
one-query step with a boolean mask (prefill above all) goes to transformers' own sdpa function.
It is registered under ``ATTENTION`` in transformers' ``AttentionInterface`` and, with sdpa's mask
builder, in ``AttentionMaskInterface``; ``decode_attention(model)`` switches a model to it for a block.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

ATTENTION = "pdbgym_decode"
_REGISTERED = threading.Lock()
_done: list[bool] = []


def grouped_decode_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, scaling: float | None = None,
                             dropout: float = 0.0, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """``query`` [B, H, 1, D], ``key``/``value`` [B, Hkv, L, D], ``attention_mask`` bool [B, 1, 1, L]
    (True: may look); returns ``[B, 1, H, D]`` as transformers' attention functions do."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # optional: transformers

    if query.shape[2] != 1 or attention_mask is None or attention_mask.dtype != torch.bool or dropout:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    grouped = query.reshape(batch, kv_heads, heads // kv_heads, dim)
    scale = scaling if scaling is not None else dim ** -0.5
    scores = torch.matmul(grouped, key.transpose(-1, -2)).float() * scale  # [B, Hkv, G, L]
    scores = scores.masked_fill(~attention_mask[:, :, :, :length].reshape(batch, 1, 1, length), float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # [B, Hkv, G, D]
    return out.reshape(batch, heads, 1, dim).transpose(1, 2).contiguous(), None


def register() -> None:
    with _REGISTERED:
        if _done:
            return
        from transformers import AttentionInterface  # optional: transformers (pdbgym[hf])
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # optional: transformers

        AttentionInterface.register(ATTENTION, grouped_decode_attention)
        AttentionMaskInterface.register(ATTENTION, sdpa_mask)
        _done.append(True)


_SWITCH = threading.Lock()
_blocks: dict[int, int] = {}  # id of a model config: the decode_attention blocks in force on it


@contextmanager
def decode_attention(model: Any) -> Iterator[bool]:
    """Inside, ``model`` (an sdpa model) attends through ``grouped_decode_attention``; yields whether it does.
    Blocks on one model may overlap, from several threads and ending in any order (two engines of one model,
    one finishing its session while the other starts): the model's attention is switched by the first and back
    to sdpa by the last. Switched back by the first to end, the other engine's compiled layers saw sdpa mid-
    session and compiled again (``tests/engine/test_compiled_step.py`` failed now and then on it)."""
    config = getattr(model, "config", None)
    with _SWITCH:
        key = id(config)
        if not _blocks.get(key) and getattr(config, "_attn_implementation", None) != "sdpa":
            switched = False
        else:
            switched = True
            register()
            config._attn_implementation = ATTENTION
            _blocks[key] = _blocks.get(key, 0) + 1
    if not switched:
        yield False
        return
    try:
        yield True
    finally:
        with _SWITCH:
            _blocks[key] -= 1
            if not _blocks[key]:
                del _blocks[key]
                config._attn_implementation = "sdpa"
