"""How exactly GRPO's rollout weights follow the policy: the merged copy in float32 and in the policy's
own bf16, against the live bf16 PEFT model (the baseline: what TRL trains and scores with).

The embedded SmolLM2-135M in bf16 with a rank-16 DoRA delta on every linear layer (as ``train grpo``
makes it), the delta randomised to a trained one's size (``lora_B`` of std ``--b-std``). The truth is
the same model computed in float32 (its bf16 base weights upcast exactly). On real text (pdbgym's own
source) it prints, per arm, the mean KL from the truth per position, and how well one optimizer step's
change to the delta (every delta parameter moved by ``--lr``, Adam's first-step size, in a random
direction) reaches the arm's log-probs of the text's own next ids: the error of the change relative
to the true change. Last, the
merged copy's own check against the live policy (``MergedPolicy.mismatch``) for each copy, and for a
copy with one layer's delta left out (below what a check against bf16 logits can see) and then also
its final norm's weight not copied (which the check must refuse).

    .venv/bin/python bench/rollout_precision.py [--b-std 0.01] [--lr 1e-4] [--ids 512]
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import torch


def build(b_std: float) -> object:
    from peft import LoraConfig, get_peft_model

    from pdbgym.modelload import EMBEDDED, load_model

    base = load_model(EMBEDDED, device="cpu", dtype=torch.bfloat16).model
    torch.manual_seed(0)  # the lora_A draw
    live = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, use_dora=True,
                                           target_modules="all-linear", task_type="CAUSAL_LM"))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in live.named_parameters():
            if "lora_B" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * b_std)
    return live.eval()


def text_ids(count: int) -> torch.Tensor:
    from pdbgym.modelload import EMBEDDED, load_model

    tokenizer = load_model(EMBEDDED, device="cpu").tokenizer
    source = (Path(__file__).resolve().parents[1] / "pdbgym" / "engine" / "core.py").read_text()
    return torch.tensor([tokenizer(source)["input_ids"][:count]])


def log_probs(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)


def taken(scores: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The log-probs of the text's own next ids (what a policy gradient weighs)."""
    return scores.gather(-1, ids[0, 1:, None])[:, 0]


def kl(truth: torch.Tensor, other: torch.Tensor) -> float:
    return float((truth.exp() * (truth - other)).sum(-1).mean())


def nudge(model, lr: float, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_" in name:
                parameter.add_(torch.sign(torch.randn(parameter.shape, generator=generator)).to(parameter.dtype) * lr)


def main() -> None:
    from pdbgym.train.grpo.merged import MergedPolicy

    parser = argparse.ArgumentParser()
    parser.add_argument("--b-std", type=float, default=0.01)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--ids", type=int, default=512)
    args = parser.parse_args()
    ids = text_ids(args.ids)
    live = build(args.b_std)
    truth = copy.deepcopy(live).float()
    copies = {dtype: MergedPolicy.of(live, dtype)[0] for dtype in ("float32", "policy")}
    arms = {"live PEFT model, bf16 (baseline)": lambda: live, "merged copy, float32": lambda: copies["float32"].model,
            "merged copy, bf16": lambda: copies["policy"].model}
    before = {name: log_probs(model(), ids) for name, model in arms.items()}
    true_before = log_probs(truth, ids)
    with live.disable_adapter():
        no_delta = log_probs(live, ids)
    print(f"{ids.shape[1]} ids of real text; lora_B std {args.b_std}; a step moves each delta parameter by {args.lr}")
    print(f"  the delta itself: mean KL of the policy without it from the truth {kl(true_before, no_delta):.5f} nats")
    nudge(live, args.lr, 1)
    nudge(truth, args.lr, 1)
    for merged in copies.values():
        merged.refresh(live)
    true_change = taken(log_probs(truth, ids) - true_before, ids)
    print(f"  one step's true change of the text's next-id log-probs: rms {float(true_change.pow(2).mean().sqrt()):.3g}")
    errors = {}
    for name, model in arms.items():
        change = taken(log_probs(model(), ids) - before[name], ids)
        errors[name] = float((change - true_change).norm() / true_change.norm())
        print(f"  {name:34s} KL from the truth {max(0.0, kl(true_before, before[name])):.5f} nats/position; "
              f"one step's change off by {errors[name]:.1%} of it")
    baseline = errors["live PEFT model, bf16 (baseline)"]
    for name in list(arms)[1:]:
        print(f"  {name}: a step's change error {errors[name] / baseline:.2f}x the live model's")
    for dtype, merged in copies.items():
        print(f"  check of the {dtype} copy against the live policy: {merged.mismatch(live) or 'accepted'} "
              f"({merged.distance(live)})")
    broken = copies["float32"]
    named = dict(broken.model.named_parameters())
    name, module = next((n, m) for n, m in live.get_base_model().named_modules() if n.endswith("layers.15.mlp.down_proj"))
    with torch.no_grad():
        named[f"{name}.weight"].copy_(module.base_layer.weight)
    print(f"  check of the float32 copy with {name}'s delta left out: {broken.mismatch(live) or 'accepted'} "
          f"({broken.distance(live)})")
    with torch.no_grad():
        named["model.norm.weight"].fill_(1.0)
    print(f"  ... and its final norm's weight not copied: {broken.mismatch(live) or 'accepted'} ({broken.distance(live)})")

if __name__ == "__main__":
    main()
