"""GRPO's rollout weights (``pdbgym.train.grpo.merged``): a plain copy of a tiny PEFT policy with its LoRA or
DoRA delta merged in gives the live policy's logits, follows its weights after an update without moving
its own tensors or touching the live ones, samples through the engine what the live policy scores, and is
refused, with the reason, where it cannot be exact."""

from __future__ import annotations

import pytest
import torch

from pdbgym.engine import EngineRequest, EngineSettings, LocalEngine
from pdbgym.train.grpo.merged import MergedPolicy


def policy(use_dora: bool, tied: bool = True, targets="all-linear"):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=tied)
    base = LlamaForCausalLM(config)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, use_dora=use_dora, init_lora_weights=False,
                      target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(base, lora).train()  # as TRL hands it over: training mode


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits[0].float()


def step(live, scale: float) -> None:
    """An optimizer step's worth of change to the delta (and only the delta)."""
    with torch.no_grad():
        for p in live.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn_like(p))


@pytest.mark.parametrize("use_dora", [True, False])
def test_the_merged_copy_gives_the_live_logits_and_follows_each_update_in_place(use_dora):
    live = policy(use_dora)
    frozen = {n: p.detach().clone() for n, p in live.named_parameters() if not p.requires_grad}
    merged, why = MergedPolicy.of(live)
    assert merged is not None, why
    assert live.training  # its check ran the live policy in eval mode and gave it back in training mode
    assert not any(".lora_" in n for n, _ in merged.model.named_parameters())  # a plain model
    ids = [5, 17, 2, 99, 41, 7, 250, 3]
    live.eval()
    assert torch.allclose(logits(merged.model, ids), logits(live, ids), atol=1e-4)
    pointers = [p.data_ptr() for p in merged.model.parameters()]
    step(live, 0.05)
    before = logits(merged.model, ids)
    merged.refresh(live)
    after = logits(merged.model, ids)
    assert not torch.allclose(before, after, atol=1e-3)  # the update reached the copy
    assert torch.allclose(after, logits(live, ids), atol=1e-4)
    assert [p.data_ptr() for p in merged.model.parameters()] == pointers  # a captured graph stays valid
    for name, p in live.named_parameters():  # the live policy's frozen weights were only read
        if name in frozen:
            assert torch.equal(p, frozen[name]), name
    assert merged.refreshes == 2


@pytest.mark.parametrize("static", [False, True])  # CPU rounds, and the static session a GPU decodes in
def test_the_engine_samples_from_the_copy_what_the_live_policy_scores(static):
    live = policy(True)
    live.get_base_model().generation_config.eos_token_id = [299, 298]  # as a checkpoint's generation_config.json
    merged, _ = MergedPolicy.of(live)
    assert merged.model.generation_config.eos_token_id == [299, 298]  # the engine's stop ids come from it
    step(live, 0.05)
    merged.refresh(live)
    engine = LocalEngine(merged.model, {299}, 0, EngineSettings(static=static, min_length=64))
    request = EngineRequest([1, 2, 3, 4, 5, 6], 10, temperature=1.0, seed=4)
    result = engine.generate([request])[0]
    engine.close()
    scores = torch.log_softmax(logits(live.eval(), list(request.prompt_ids) + result.ids)[5:-1], -1)
    expected = scores.gather(-1, torch.tensor(result.ids)[:, None])[:, 0]
    assert result.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


def test_a_policy_the_copy_cannot_reproduce_is_refused_with_the_reason():
    embedded = policy(False, targets=["embed_tokens", "q_proj"])
    merged, why = MergedPolicy.of(embedded)
    assert merged is None and "embed_tokens" in why and "Embedding" in why
    from transformers import LlamaConfig, LlamaForCausalLM

    plain = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                         num_attention_heads=4, num_key_value_heads=2))
    assert MergedPolicy.of(plain) == (None, "the policy is not a PEFT model")


def test_adapters_the_copy_would_merge_wrongly_are_refused_before_any_update():
    # at first use a fresh delta changes nothing (B = 0), so the logits check alone cannot see these
    tied_head = policy(True, tied=True, targets=["lm_head", "q_proj"])
    merged, why = MergedPolicy.of(tied_head)
    assert merged is None and "lm_head" in why and "tied" in why
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    base = LlamaForCausalLM(LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                        num_attention_heads=4, num_key_value_heads=2))
    biased = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj"], lora_bias=True))
    merged, why = MergedPolicy.of(biased)
    assert merged is None and "lora_bias" in why


def test_a_copy_that_cannot_be_made_falls_back_with_the_reason(monkeypatch):
    from transformers import AutoModelForCausalLM

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(AutoModelForCausalLM, "from_config", no_memory)
    merged, why = MergedPolicy.of(policy(True))
    assert merged is None and "OutOfMemoryError" in why and "8.00 GiB" in why


def test_a_copy_that_drifts_from_the_live_policy_is_caught_at_the_next_refresh():
    live = policy(True)
    merged, _ = MergedPolicy.of(live)
    step(live, 0.05)
    merged.refresh(live)
    assert merged.mismatch(live) == ""
    with torch.no_grad():  # a weight the refresh does not write (as an adapter it cannot map would leave)
        next(merged.model.parameters()).add_(1.0)
    assert "away from the live policy's" in merged.mismatch(live)


def test_a_bad_rollout_weights_value_is_refused_by_name(tmp_path):
    from pdbgym.errors import PdbgymError
    from pdbgym.train.grpo.config import GRPORunConfig
    from pdbgym.train.grpo.inputs import recipe_parts

    with pytest.raises(PdbgymError, match="--rollout-weights 'fast': choose merged"):
        recipe_parts(GRPORunConfig(policy="x", tasks="y", out=tmp_path, rollout_weights="fast"), None, "x")


def test_a_float32_copy_of_a_bf16_policy_keeps_an_update_smaller_than_the_weights_rounding_step():
    live = policy(True).to(torch.bfloat16)
    for name, p in live.named_parameters():  # as PEFT keeps a bf16 model's adapter: float32
        if ".lora_" in name:
            p.data = p.data.float()
    exact, _ = MergedPolicy.of(live, "float32")
    rounded, _ = MergedPolicy.of(live)  # the policy's own dtype
    assert next(exact.model.parameters()).dtype == torch.float32
    assert next(rounded.model.parameters()).dtype == torch.bfloat16
    name = "model.layers.0.mlp.down_proj.weight"
    before = {copy: dict(copy.model.named_parameters())[name].detach().float().clone() for copy in (exact, rounded)}
    step(live, 1e-4)  # an optimizer step of lr 1e-4: far below bf16's rounding step of weights near 0.02
    for copy in (exact, rounded):
        copy.refresh(live)
    module = dict(live.get_base_model().named_modules())["model.layers.0.mlp.down_proj"]
    from pdbgym.adapters.merge_math import merge_module

    truth = merge_module(module.base_layer.weight, module.lora_A["default"].weight, module.lora_B["default"].weight,
                         module.lora_magnitude_vector["default"].weight, float(module.scaling["default"]), False,
                         torch.float32).detach()
    change = truth - before[exact]
    assert change.abs().max() > 0
    kept = dict(exact.model.named_parameters())[name].detach() - before[exact]
    assert torch.allclose(kept, change, atol=1e-7)  # the float32 copy holds the whole step
    lost = dict(rounded.model.named_parameters())[name].detach().float() - before[rounded]
    assert float((lost - change).norm() / change.norm()) > 0.5  # the bf16 copy rounds most of it away


def test_against_a_bf16_policy_the_check_bounds_the_divergence_not_each_rounded_logit():
    torch.manual_seed(1)
    live = policy(True).to(torch.bfloat16)
    step(live, 0.05)
    merged, why = MergedPolicy.of(live, "float32")
    assert merged is not None, why
    difference, divergence = merged.check(live)
    assert difference > 1e-3 and divergence < 0.01  # bf16 logits: rounded, yet the same distributions
    assert merged.mismatch(live) == ""
    assert MergedPolicy.of(live)[0] is not None  # and a copy in the policy's own bf16
    with torch.no_grad():  # a weight the refresh does not write, as in the float32 case
        dict(merged.model.named_parameters())["model.norm.weight"].mul_(4.0)
    assert "nats a position away from the live policy's" in merged.mismatch(live)
    with pytest.raises(ValueError, match="'float16'"):
        MergedPolicy.of(live, "float16")


def test_the_engine_decodes_a_live_peft_policy_with_the_cache_keyword_its_model_takes():
    import warnings

    live = policy(True).eval()
    engine = LocalEngine(live, {299}, 0, EngineSettings(static=False))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*")  # deprecated in transformers 5.2x
        result = engine.generate([EngineRequest([1, 2, 3, 4], 6, temperature=1.0, seed=3)])[0]
    engine.close()
    scores = torch.log_softmax(logits(live, [1, 2, 3, 4] + result.ids)[3:-1], -1)
    assert result.logprobs == pytest.approx(scores.gather(-1, torch.tensor(result.ids)[:, None])[:, 0].tolist(), abs=1e-4)
