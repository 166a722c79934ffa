"""The one model loader on each kind of reference it takes without a store: a folder, a .gguf path that
is not one, a folder without config.json, a missing path, a server URL, ``embedded`` (adapter-store
references: tests/train/test_model_refs.py)."""

from __future__ import annotations

import pytest

from pdbgym.modelload import ModelLoadError, load_causal_lm, load_model, model_path


def test_a_folder_loads_model_and_tokenizer_without_a_parent(tiny_model_dir):
    import torch

    loaded = load_model(str(tiny_model_dir), "cpu")
    assert loaded.path == tiny_model_dir.resolve() and loaded.parent_id is None  # no lineage, no parent
    assert not loaded.model.training and loaded.model.dtype == torch.float32
    assert len(loaded.tokenizer) == loaded.model.config.vocab_size == 49152
    half = load_model(tiny_model_dir, "cpu", dtype="bfloat16").model
    assert half.dtype == torch.bfloat16
    assert torch.equal(half.lm_head.weight, loaded.model.lm_head.weight.to(torch.bfloat16))
    assert load_causal_lm(tiny_model_dir, "cpu").config.vocab_size == 49152


def test_references_that_cannot_load_say_what_to_pass(tmp_path):
    with pytest.raises(ModelLoadError, match="model path '.*nope' does not exist; give a local model folder .*"
                                             "'embedded', or an adapter-store name"):
        load_model(str(tmp_path / "nope"), "cpu")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path), "cpu")
    stray = tmp_path / "weights.bin"
    stray.write_bytes(b"0")
    with pytest.raises(ModelLoadError, match="not a .gguf"):
        load_model(str(stray), "cpu")
    for url in ("http://127.0.0.1:30000", "https://models.example/v1"):
        with pytest.raises(ModelLoadError, match="server's URL"):
            load_model(url, "cpu")
    with pytest.raises(ModelLoadError, match="not one of auto"):
        load_causal_lm(tmp_path, "cpu", device_map="everywhere")


def test_embedded_is_the_de_quantized_folder_the_agent_plays(smol_tokenizer):
    from pdbgym.modelload import embedded_model_dir

    assert model_path("embedded") == embedded_model_dir()
    loaded = load_model("embedded", "cpu")
    assert loaded.path == embedded_model_dir().resolve() and loaded.label == "embedded"
    assert loaded.tokenizer.get_vocab() == smol_tokenizer.get_vocab()


def test_models_load_without_hub_kernels(tmp_path, tiny_model_dir):
    """transformers turns Hub kernels on by default; on a GPU they would fetch layer code from the Hub
    (offline: a failed SFT step). Every model pdbgym loads has them off."""
    from pdbgym.modelload import load_model

    loaded = load_model(str(tiny_model_dir), device="cpu")
    assert loaded.model.use_kernels is False
    loaded.model.train()  # a mode change is where transformers would kernelize again
    assert loaded.model.use_kernels is False
