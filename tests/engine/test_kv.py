"""The engine's hand-filled KV caches: a row cut out, rows joined right-aligned and rows moved to end at
given columns hold exactly the keys and values they should, every layer at once, and a row cut out is
joined from its one stack without a copy of its own; the engine's static cache holds every layer in one
tensor, and its cuts, placements and head moves hold what the per-layer cache's do."""

from __future__ import annotations

import torch

from pdbgym.engine.kv import (
    STACKED,
    _stacked,
    cut_row,
    join_rows,
    new_dynamic_cache,
    new_static_cache,
    place_rows,
    right_align,
    set_head,
)


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


class Weighted(torch.nn.Module):
    """A model as ``new_static_cache`` reads one: its config and a parameter's dtype and device."""

    def __init__(self):
        super().__init__()
        self.config = Model().config
        self.weight = torch.nn.Parameter(torch.zeros(1))


def test_the_static_caches_layers_live_in_one_tensor_and_cut_place_and_move_as_one_a_layer():
    model = Weighted()
    stacked, plain = new_static_cache(model, 3, 12), new_static_cache(model, 3, 12, stacked=False)
    keys, values, heads = getattr(stacked, STACKED)
    assert keys.shape == (3, 3, 2, 12, 4) and not hasattr(plain, STACKED)
    for i, layer in enumerate(stacked.layers):
        assert layer.keys.data_ptr() == keys[i].data_ptr() and layer.values.data_ptr() == values[i].data_ptr()
    generator = torch.Generator().manual_seed(3)
    written = [(torch.randn(3, 2, 2, 4, generator=generator), torch.randn(3, 2, 2, 4, generator=generator))
               for _ in range(3)]
    for cache in (stacked, plain):
        set_head(cache, 5)
        for index, (k, v) in enumerate(written):  # transformers' own write, through each layer
            cache.update(k, v, index)
    assert heads.tolist() == [7, 7, 7]  # each layer's write head is its element of one tensor
    assert torch.equal(keys[1, :, :, 5:7], written[1][0]) and torch.equal(values[2, :, :, 5:7], written[2][1])
    prefill = cache_of(model, rows=2, length=4, seed=5)
    for cache in (stacked, plain):
        place_rows(cache, prefill, torch.tensor([2, 0]), 10)
        place_rows(cache, join_rows([cut_row(prefill, model, 1, 1, 4)], model, 3), torch.tensor([1]), 12)
    for ours, theirs in zip(stacked.layers, plain.layers, strict=True):
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)
    assert torch.equal(keys[0, 0, :, 6:10], prefill.layers[0].keys[1]) and torch.equal(keys[2, 1, :, 9:], prefill.layers[2].keys[1, :, 1:])
    ours, theirs = cut_row(stacked, model, 0, 4, 11), cut_row(plain, model, 0, 4, 11)
    for a, b in zip(ours.layers, theirs.layers, strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    assert _stacked(ours, "keys").data_ptr() == ours.layers[0].keys.data_ptr()  # one copy, its layers views of it
    keys[0, 0, :, 4:11] = 0
    assert ours.layers[0].keys.abs().sum() > 0  # the cut is a copy: the cache's slot may be reused
    set_head(stacked, 2)
    assert [layer.cumulative_length.item() for layer in stacked.layers] == [2, 2, 2]


def test_a_model_with_sliding_window_layers_gets_its_own_layers_and_no_static_session():
    """Layers that keep only their window are not one tensor of positions: such a cache is left as transformers
    makes it, and the engine says why it decodes without a static cache."""
    from transformers import Qwen3Config

    from pdbgym.engine.kv import static_cache_problem

    model = Weighted()
    model.config = Qwen3Config(vocab_size=50, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=4, sliding_window=4,
                               layer_types=["sliding_attention", "full_attention"], use_sliding_window=True)
    cache = new_static_cache(model, 2, 12)
    assert not hasattr(cache, STACKED) and cache.layers[0].keys.shape[-2] != cache.layers[1].keys.shape[-2]
    assert "sliding" in static_cache_problem(model)
