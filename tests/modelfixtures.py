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


def save_tiny_llama(folder: Any, tokenizer: Any, seed: int = 0, hidden: int = 16) -> Any:
    """A random-weight 1-layer Llama over ``tokenizer``'s vocabulary saved as a HF folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=16384, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
