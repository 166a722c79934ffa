"""Tokenizers built in-process for tests that must not need the embedded model's package."""

from __future__ import annotations

from typing import Any

SPECIALS = ("[UNK]", "[EOS]")


def word_tokenizer(size: int, order: list[int] | None = None) -> Any:
    """A word-level fast tokenizer of ``size`` entries: ``[UNK]``, ``[EOS]``, then ``w2``, ``w3``, ...

    ``order[i]`` is the id of the i-th entry (default: i), so two tokenizers can hold the same tokens
    and size under different ids."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    order = order or list(range(size))
    names = [*SPECIALS, *(f"w{i}" for i in range(len(SPECIALS), size))]
    core = Tokenizer(WordLevel({name: order[i] for i, name in enumerate(names)}, unk_token="[UNK]"))
    core.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="[EOS]")
