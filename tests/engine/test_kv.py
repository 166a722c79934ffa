"""The engine's hand-filled KV caches: a row cut out, rows joined right-aligned and rows moved to end at
given columns hold exactly the keys and values they should, every layer at once, and a row cut out is
joined from its one stack without a copy of its own."""

from __future__ import annotations

import torch

from pdbgym.engine.kv import _stacked, cut_row, join_rows, new_dynamic_cache, right_align


class Model:
    def __init__(self):
        from transformers import LlamaConfig

        self.config = LlamaConfig(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                                  num_attention_heads=4, num_key_value_heads=2)


def cache_of(model, rows: int, length: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    cache = new_dynamic_cache(model)
    for index in range(3):
        cache.update(torch.randn(rows, 2, length, 4, generator=generator),
                     torch.randn(rows, 2, length, 4, generator=generator), index)
    return cache


def test_cut_join_and_align_hold_the_right_positions_in_every_layer():
    model = Model()
    source = cache_of(model, rows=3, length=10, seed=1)
    cut = cut_row(source, model, 1, 2, 9)
    for layer, original in zip(cut.layers, source.layers, strict=True):
        assert torch.equal(layer.keys, original.keys[1:2, :, 2:9])
        assert torch.equal(layer.values, original.values[1:2, :, 2:9])
    assert _stacked(cut, "keys").data_ptr() == cut.layers[0].keys.data_ptr()  # a view of the stack, no copy
    other = cut_row(source, model, 0, 0, 4)
    joined = join_rows([cut, other], model, width=8)
    for layer, original in zip(joined.layers, source.layers, strict=True):
        assert torch.equal(layer.keys[0, :, 1:], original.keys[1, :, 2:9])
        assert torch.equal(layer.keys[1, :, 4:], original.keys[0, :, 0:4])
        assert (layer.keys[0, :, :1] == 0).all() and (layer.values[1, :, :4] == 0).all()
    aligned = right_align(source, model, torch.tensor([10, 6, 8]), width=5)
    for layer, original in zip(aligned.layers, source.layers, strict=True):
        for row, end in enumerate((10, 6, 8)):
            assert torch.equal(layer.keys[row], original.keys[row, :, end - 5:end])
            assert torch.equal(layer.values[row], original.values[row, :, end - 5:end])
    grown = cut.layers[0].keys.shape[-2]
    cut.update(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 3, 4), 0)  # a filled cache grows as transformers' does
    assert cut.layers[0].keys.shape[-2] == grown + 3
