"""DoRA's fused training forward (pdbgym.train.dora) against PEFT's own: outputs, every gradient, the merge,
the paths it leaves to PEFT, and GRPO's trainer built with it."""

import copy
import sys
from pathlib import Path

import pytest
from homefixtures import fresh_home

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402


def _pair(dropout: float = 0.0, dtype=None):
    """A tiny Llama with a DoRA delta moved off its initial point, and a deep copy of it fused."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from pdbgym.train.dora import fuse_dora

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    base = LlamaForCausalLM(config)
    if dtype is not None:
        base = base.to(dtype)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", use_dora=True,
                                                 lora_dropout=dropout))
    with torch.no_grad():  # the norms and magnitudes no longer equal, B no longer zero
        for parameter in peft_model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn_like(parameter) * 0.05)
    fused = copy.deepcopy(peft_model)
    assert fuse_dora(fused) == 14  # 7 linear layers a block, 2 blocks
    assert fuse_dora(fused) == 0  # once
    peft_model.train()
    fused.train()
    return peft_model, fused


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _run(model, ids, autocast=False):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        logits = model(input_ids=ids).logits
    logits.float().square().mean().backward()
    return logits.detach().float()


def test_the_fused_forward_gives_peft_s_outputs_and_every_gradient():
    peft_model, fused = _pair()
    ids = torch.randint(0, 300, (3, 17), generator=torch.Generator().manual_seed(1))
    expected, got = _run(peft_model, ids), _run(fused, ids)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    want, have = _grads(peft_model), _grads(fused)
    assert want.keys() == have.keys() and any("lora_magnitude_vector" in n for n in want)
    for name in want:  # lora_A, lora_B and the magnitudes of all 14 layers
        torch.testing.assert_close(have[name], want[name], rtol=1e-4, atol=1e-6, msg=name)


def test_the_compiled_function_equals_the_eager_one_in_value_and_gradient():
    from pdbgym.train.dora import dora_combine

    generator = torch.Generator().manual_seed(2)
    tensors = [torch.randn(5, 7, generator=generator).to(torch.bfloat16) for _ in range(2)]
    scale = torch.rand(1, 7, generator=generator) + 0.5
    results = []
    for compiled in (False, True):
        base, lora = (t.clone().requires_grad_(True) for t in tensors)
        magnitude = scale.clone().requires_grad_(True)
        out = dora_combine(base, lora, magnitude, 2.0, compiled=compiled)
        assert out.dtype == torch.bfloat16
        out.float().pow(2).sum().backward()
        results.append((out.detach().float(), base.grad.float(), lora.grad.float(), magnitude.grad))
    for eager, compiled in zip(*results, strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-2, atol=1e-2)



def test_one_compile_serves_every_shape_a_layer_and_a_batch_bring():
    """Each compile of the function costs the first update seconds on a GPU: layers of other widths, batches
    of one row or of several, other lengths, and passes with gradients or without all take the one compiled
    forward, and every backward the one compiled backward."""
    from torch._dynamo.utils import counters

    from pdbgym.train.dora import dora_combine

    torch._dynamo.reset()  # no compiled entries of the tests before
    counters.clear()
    for rows, length, features in ((1, 9, 11), (3, 5, 11), (2, 7, 4), (1, 13, 6), (4, 3, 11)):
        base = torch.ones(rows, length, features, requires_grad=True)
        scale = torch.full((1, features), 2.0, requires_grad=True)
        out = dora_combine(base, torch.ones(rows, length, features), scale, 0.5, compiled=True)
        torch.testing.assert_close(out, torch.full((rows, length, features), 3.0))
        out.sum().backward()
        torch.testing.assert_close(scale.grad, torch.full((1, features), 1.5 * rows * length))
        with torch.no_grad():  # the old log-probs' pass: no gradient, the same forward graph
            torch.testing.assert_close(dora_combine(base, torch.ones_like(base), scale, 0.5, compiled=True),
                                       torch.full((rows, length, features), 3.0))
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])  # the forward and the backward
    # one compiled entry each: a pass without gradients compiled the forward again when autograd traced it
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    from pdbgym.train import dora

    assert [len(_debug_get_cache_entry_list(f.__code__)) for f in (dora._combine, dora._combine_backward)] == [1, 1]


def test_under_bf16_autocast_the_layer_input_is_not_copied_to_float32_and_the_output_matches_peft():
    peft_model, fused = _pair(dtype=torch.bfloat16)
    layer = fused.base_model.model.model.layers[0].self_attn.q_proj
    assert layer.cast_input_dtype_enabled is False and layer.lora_A["default"].weight.dtype == torch.float32
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(3))
    expected, got = _run(peft_model, ids, autocast=True), _run(fused, ids, autocast=True)
    assert (got - expected).abs().max() < 0.05 * expected.abs().max()
    # without autocast a bf16 base with float32 adapter weights still runs: the fused path casts the input itself
    peft_model.zero_grad()
    fused.zero_grad()
    torch.testing.assert_close(_run(fused, ids), _run(peft_model, ids), rtol=0.02, atol=0.02)


def test_eval_mode_and_dropout_run_peft_s_own_forward():
    from pdbgym.train.dora import covered

    peft_model, fused = _pair(dropout=0.1)
    layer = fused.base_model.model.model.layers[0].mlp.down_proj
    assert not covered(layer, "default")  # dropout on the adapter's input: PEFT's path
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(4))
    torch.manual_seed(5)
    expected = _run(peft_model, ids)
    torch.manual_seed(5)  # the same dropout masks, drawn in the same order
    torch.testing.assert_close(_run(fused, ids), expected)
    peft_model.eval()
    fused.eval()
    assert not covered(layer, "default")
    with torch.no_grad():
        torch.testing.assert_close(fused(input_ids=ids).logits, peft_model(input_ids=ids).logits)


def test_a_fused_model_merges_to_peft_s_weights():
    peft_model, fused = _pair()
    merged = fused.merge_and_unload().state_dict()
    for name, tensor in peft_model.merge_and_unload().state_dict().items():
        torch.testing.assert_close(merged[name], tensor, msg=name)


def test_grpo_s_trainer_fuses_its_dora_delta_unless_told_not_to(tmp_path, monkeypatch):
    from pdbgym.train.dora import fused_variant
    from pdbgym.train.grpo.build import build

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    for fused, expected in ((True, True), (False, False)):
        config = toy_config(tmp_path / f"run-{fused}", model, tasks, steps=1, fused_dora=fused)
        trainer, _, _ = build(config, play=toy_play)
        variants = [v for m in trainer.model.modules() for v in getattr(m, "lora_variant", {}).values()]
        assert variants and all(isinstance(v, fused_variant()) == expected for v in variants)
