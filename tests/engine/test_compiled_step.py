"""The compiled decode step and prefill passes (``EngineSettings(graphs="compiled")``): inductor's kernels for
the model's forward sample the ids the model's own kernels sample, with the same log-probs, and one compile of
the decoder layers' code serves every layer, static caches of other slot counts and lengths, the nucleus's step
(the draw is not compiled), and prefill passes of every width, later turns' continuing kept caches among them. On the CPU (inductor's C++ kernels); the GPU file runs the
same step recorded in a CUDA graph."""

from __future__ import annotations

import pytest
import torch
from test_engine import REQUESTS, STOP, next_turns

from pdbgym.engine import EngineRequest, EngineSettings, LocalEngine

SHORTER = [EngineRequest(list(range(1, 4 + 9 * i)), 12, temperature=0.8, seed=i) for i in range(5)]
LONGER = [EngineRequest(list(range(1, 150 + 7 * i)), 40, temperature=0.9, seed=20 + i) for i in range(11)]


def layered(family: str, layers: int):
    """A tiny model of ``family`` (Llama: SmolLM2's; Qwen3: per-head norms of queries and keys) of ``layers`` layers."""
    import transformers

    torch.manual_seed(0)
    config, model = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}[family]
    config = getattr(transformers, config)(vocab_size=300, hidden_size=64, intermediate_size=128, head_dim=16,
                                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                           max_position_embeddings=4096)
    return getattr(transformers, model)(config).eval()


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_compiled_step_samples_what_the_models_own_step_samples_and_one_compile_serves_every_layer_and_shape(
        family):
    import torch._dynamo.utils

    # dynamo's memory of earlier processes' dynamic dimensions (local PGO) would hide a first compile that
    # specialized on the first shape's sizes
    with torch._dynamo.config.patch(automatic_dynamic_local_pgo=False):
        compiles_alike(family)


def compiles_alike(family: str) -> None:
    import torch._dynamo.utils

    graphs = {}
    for layers in (2, 5):  # one compile of the layers' code serves every layer: as many graphs for 5 as for 2
        model = layered(family, layers)
        plain = LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64))
        compiled = LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64, graphs="compiled"))
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        counts = []
        # top-p 1 at 8 slots x 512 positions, then at 16 x 1,024, then rows with top-p < 1
        for requests in (SHORTER, LONGER, REQUESTS):
            expected, got = plain.generate(requests), compiled.generate(requests)
            assert [r.ids for r in got] == [r.ids for r in expected]
            for a, b in zip(got, expected, strict=True):
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
            counts.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        # compiled with their dimensions dynamic from the first shape: no shape after it compiles again
        assert counts[0] == counts[1] == counts[2]
        graphs[layers] = counts
        assert {(c["slots"], c["length"]) for c in compiled.stats.compiles} == {(8, 512), (16, 1024)}
        # the layers' own forwards and indices are back after every compiled step
        assert all("forward" not in vars(layer) for layer in model.model.layers)
        assert [layer.self_attn.layer_idx for layer in model.model.layers] == list(range(layers))
        plain.close()
        compiled.close()
    assert graphs[5] == graphs[2]


def test_an_unknown_graphs_setting_is_refused_by_name():
    with pytest.raises(ValueError, match="graphs must be one of"):
        EngineSettings(graphs="inductor")


def test_the_layers_compiled_once_for_all_are_the_decoder_layers_not_a_longer_list_of_experts():
    from pdbgym.engine.regional import repeated_layers

    model = layered("llama", 3)
    assert repeated_layers(model) == list(model.model.layers)
    model.experts = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(8))  # longer, of one class, no index
    assert repeated_layers(model) == list(model.model.layers)
    assert repeated_layers(torch.nn.Sequential(torch.nn.Linear(2, 2))) == []


def test_compiled_prefill_passes_continue_kept_caches_and_sample_what_the_models_own_passes_sample():
    """Later turns prefill only their new parts after kept caches, some rows continuing and some fresh in one
    admission: through the compiled layers (a cache that counts its layers' writes), the same ids and log-probs
    as the model's own forward, and each pass's shapes served by the first passes' compile."""
    import torch._dynamo.utils

    from pdbgym.engine.kv import counts_writes
    from pdbgym.engine.regional import compiled_forward

    model = layered("llama", 3)
    engines = [LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64, graphs=graphs))
               for graphs in ("capture", "compiled")]
    layers_compiled, passes = compiled_forward(model), []

    def seen(**kwargs):  # the compiled forward as it is, each call's ids a row and cache noted
        passes.append((kwargs["input_ids"].shape[1], counts_writes(kwargs.get("cache", kwargs.get("past_key_values")))))
        return layers_compiled(**kwargs)

    object.__setattr__(model, "_pdbgym_compiled_forward", seen)
    first = [EngineRequest(list(range(1, 6 + 9 * i)), 10, temperature=0.9, seed=i) for i in range(4)]
    with torch._dynamo.config.patch(automatic_dynamic_local_pgo=False):
        torch._dynamo.reset()
        torch._dynamo.utils.counters.clear()
        turns, counts = [first], []
        for tool in ([40, 41, 42], [43, 44], [45]):
            plain, compiled = (engine.generate(turns[-1]) for engine in engines)
            assert [r.ids for r in compiled] == [r.ids for r in plain]
            for a, b in zip(compiled, plain, strict=True):
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
            counts.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
            turns.append(next_turns(turns[-1], compiled, tool))
        # two rows continue their episodes and two new ones join them in one pass
        mixed = turns[-1][:2] + [EngineRequest([9, 8, 7, 6], 6, seed=7), EngineRequest([3] * 11, 5, seed=8)]
        plain, compiled = (engine.generate(mixed) for engine in engines)
        assert [r.ids for r in compiled] == [r.ids for r in plain]
        counts.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    assert engines[1].stats.reused_tokens > 0 and engines[1].stats.reused_tokens == engines[0].stats.reused_tokens
    assert counts[1] == counts[2] == counts[3], counts  # the later turns' passes compiled nothing new
    assert all("forward" not in vars(layer) for layer in model.model.layers)
    # the compiled engine's prefill passes (several ids a row) ran through the compiled layers, each with a cache
    # that counts its layers' writes, and none fell back to the model's own forward
    assert [width for width, counts in passes if width > 1] and all(counts for _, counts in passes)
    assert not engines[1]._eager_passes
    for engine in engines:
        engine.close()


def test_a_compiled_prefill_pass_that_fails_runs_again_on_the_models_own_forward_from_the_cache_as_it_was(caplog):
    """A pass inductor cannot take (here: a pass of one row, failing after every layer wrote its keys and values)
    is said once and played again through the model's own forward, from the kept cache as it was: the compiled
    pass wrote into a copy. Every later pass runs the model's own forward; the decode step stays compiled."""
    from pdbgym.engine.regional import compiled_forward

    model = layered("llama", 2)
    engines = [LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64, graphs=graphs))
               for graphs in ("capture", "compiled")]
    layers_compiled = compiled_forward(model)

    def failing(**kwargs):
        out = layers_compiled(**kwargs)
        if kwargs["input_ids"].shape[0] == 1 and kwargs["input_ids"].shape[1] > 1:  # one row's pass
            raise RuntimeError("inductor cannot take this pass")
        return out

    object.__setattr__(model, "_pdbgym_compiled_forward", failing)
    turns = [[EngineRequest(list(range(1, 9 + 5 * i)), 8, temperature=0.9, seed=i) for i in range(3)]]
    def same(requests):
        plain, compiled = (engine.generate(requests) for engine in engines)
        assert [r.ids for r in compiled] == [r.ids for r in plain]
        for a, b in zip(compiled, plain, strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        return compiled

    for tool in ([40, 41], [42]):  # passes of three rows: compiled
        turns.append(next_turns(turns[-1], same(turns[-1]), tool))
    assert not engines[1]._eager_passes
    same(turns[-1][:1])  # one row alone, continuing its kept cache as it is: fails compiled, runs again eagerly
    same(next_turns(turns[-1], same(turns[-1]), [43]))
    assert engines[1]._eager_passes and engines[1].stats.reused_tokens == engines[0].stats.reused_tokens
    said = [r for r in caplog.records if "prefill passes run the model's own forward" in r.getMessage()]
    assert len(said) == 1 and "inductor cannot take this pass" in said[0].getMessage()
    for engine in engines:
        engine.close()
