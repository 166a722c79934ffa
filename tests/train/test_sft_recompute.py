"""`train sft`'s activation-checkpointing switches: which decoder layers recompute, whether attention
outputs are kept, and that none of it changes the numbers (same losses and gradient norms as no recompute)."""

from __future__ import annotations

import pytest

from pdbgym.train.sft.config import SFTTrainConfig

from modelfixtures import word_tokenizer

LAYERS = 4


def _model():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config)


def _train(tmp_path, **switches) -> tuple[dict, list[dict]]:
    """Two DoRA steps on a 4-layer Llama; (what the layers were set to at the first step, logged rows)."""
    import random

    from transformers import TrainerCallback
    from transformers.modeling_layers import GradientCheckpointingLayer

    from pdbgym.train.sft.base import BaseModel
    from pdbgym.train.sft.trainer import build_trainer

    seen: dict = {}

    class Probe(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
            seen["recompute"] = [bool(layer.gradient_checkpointing) for layer in layers]
            function = getattr(layers[0], "_gradient_checkpointing_func", None)
            seen["keeps_attention"] = "context_fn" in (getattr(function, "keywords", None) or {})

    generator = random.Random(0)
    rows = [{"input_ids": [generator.randrange(2, 64) for _ in range(48)],
             "assistant_masks": [0] * 16 + [1] * 32} for _ in range(2)]
    config = SFTTrainConfig(base="t", data=tmp_path, out=tmp_path / "out", rank=4, use_dora=True, effective_batch=1,
                            max_steps=2, max_length=48, val_fraction=0.0, register=False, lr=1e-2, device="cpu",
                            extra={"save_strategy": "no"}, **switches)
    trainer = build_trainer(config, BaseModel(_model(), word_tokenizer(64), "t", "t", None), rows, [], "cpu", [Probe()])
    trainer.train()
    return seen, [row for row in trainer.state.log_history if "loss" in row]


@pytest.mark.parametrize(("switches", "recompute", "keeps_attention"), [
    ({"gradient_checkpointing": True}, [True] * LAYERS, False),
    ({"gradient_checkpointing": True, "recompute_every": 2}, [True, False, True, False], False),
    ({"gradient_checkpointing": True, "selective_recompute": True}, [True] * LAYERS, True),
    ({"gradient_checkpointing": True, "recompute_every": 3, "selective_recompute": True},
     [True, False, False, True], True),
])
def test_switches_choose_what_recomputes_and_change_no_number(tmp_path, switches, recompute, keeps_attention):
    _, plain = _train(tmp_path / "plain")
    seen, rows = _train(tmp_path / "switched", **switches)
    assert seen == {"recompute": recompute, "keeps_attention": keeps_attention}
    assert len(rows) == len(plain) == 2
    for got, want in zip(rows, plain, strict=True):
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
        assert got["grad_norm"] == pytest.approx(want["grad_norm"], rel=1e-4)


def test_no_checkpointing_recomputes_nothing(tmp_path):
    seen, _ = _train(tmp_path)
    assert seen == {"recompute": [False] * LAYERS, "keeps_attention": False}


@pytest.mark.parametrize("switches", [{"recompute_every": 2}, {"selective_recompute": True},
                                      {"gradient_checkpointing": True, "recompute_every": 0}])
def test_switches_without_checkpointing_or_out_of_range_are_refused(tmp_path, switches):
    from pdbgym.train.errors import TrainError
    from pdbgym.train.sft.trainer import sft_arguments

    config = SFTTrainConfig(base="t", data=tmp_path, out=tmp_path, val_fraction=0.0, effective_batch=1, **switches)
    with pytest.raises(TrainError, match="recompute"):
        sft_arguments(config, tmp_path, "cpu", has_val=False)
