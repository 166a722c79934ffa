"""pdbgym's per-tensor LoRA/DoRA merge against PEFT's merge_and_unload, tensor by tensor."""

from __future__ import annotations

import pytest
import torch
from adapters_testkit import add_adapter, state_dict_of, tiny_llama

from pdbgym.adapters.fingerprint import weights_hash
from pdbgym.adapters.merge import StackLayer, merge_stack
from pdbgym.adapters.peft_format import load_adapter, module_scaling


def _merge_with_pdbgym(base_dir, adapter_dir, out_dir):
    adapter = load_adapter(adapter_dir)
    merge_stack(base_dir, [StackLayer("x" * 64, "adapter", adapter)], out_dir, weights_hash(base_dir), {})
    return state_dict_of(out_dir)


def _assert_same_weights(ours: dict, peft_model) -> None:
    reference = {k: v for k, v in peft_model.state_dict().items()}
    assert set(ours) == set(reference)
    for name, tensor in ours.items():
        torch.testing.assert_close(tensor, reference[name], rtol=0, atol=2e-6, msg=name)


@pytest.mark.parametrize("use_dora", [False, True])
@pytest.mark.parametrize("use_rslora", [False, True])
def test_llama_merge_matches_peft(tmp_path, use_dora, use_rslora):
    tiny_llama(0).save_pretrained(tmp_path / "base")
    adapter = add_adapter(tiny_llama(0), 5, use_dora=use_dora, magnitude_drift=0.2, use_rslora=use_rslora,
                          rank_pattern={"v_proj": 2}, alpha_pattern={"o_proj": 3})
    adapter.save_pretrained(tmp_path / "adapter")
    ours = _merge_with_pdbgym(tmp_path / "base", tmp_path / "adapter", tmp_path / "out")
    _assert_same_weights(ours, adapter.merge_and_unload())


@pytest.mark.parametrize("use_dora", [False, True])
def test_fan_in_fan_out_gpt2_merge_matches_peft(tmp_path, use_dora):
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64, n_positions=32)).eval()
    model.save_pretrained(tmp_path / "base")
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["c_attn", "c_proj"],
                                                  fan_in_fan_out=True, use_dora=use_dora, init_lora_weights=False))
    peft_model.save_pretrained(tmp_path / "adapter")
    ours = _merge_with_pdbgym(tmp_path / "base", tmp_path / "adapter", tmp_path / "out")
    merged = peft_model.merge_and_unload()
    reference = merged.state_dict()
    for name, tensor in ours.items():
        torch.testing.assert_close(tensor, reference[name], rtol=0, atol=2e-6, msg=name)
    assert any(not torch.equal(ours[n], state_dict_of(tmp_path / "base")[n]) for n in ours)


def test_bf16_merge_close_to_peft(tmp_path):
    tiny_llama(0).to(torch.bfloat16).save_pretrained(tmp_path / "base")
    adapter = add_adapter(tiny_llama(0).to(torch.bfloat16), 6, use_dora=True, magnitude_drift=0.1)
    adapter.save_pretrained(tmp_path / "adapter")
    ours = _merge_with_pdbgym(tmp_path / "base", tmp_path / "adapter", tmp_path / "out")
    reference = adapter.merge_and_unload().state_dict()
    for name, tensor in ours.items():
        assert tensor.dtype == torch.bfloat16
        # We round once from float32; PEFT rounds the delta and the sum separately: one bf16 ulp apart at most.
        torch.testing.assert_close(tensor.float(), reference[name].float(), rtol=2 ** -7, atol=1e-6, msg=name)


def test_scaling_follows_rslora_and_patterns():
    config = {"r": 16, "lora_alpha": 32, "use_rslora": False, "rank_pattern": {"v_proj": 4},
              "alpha_pattern": {"layers.1.self_attn.q_proj": 8}}
    assert module_scaling(config, "model.layers.0.self_attn.q_proj") == 2.0
    assert module_scaling(config, "model.layers.0.self_attn.v_proj") == 8.0
    assert module_scaling(config, "model.layers.1.self_attn.q_proj") == 0.5
    assert module_scaling({**config, "use_rslora": True}, "model.layers.0.self_attn.q_proj") == 32 / 4
