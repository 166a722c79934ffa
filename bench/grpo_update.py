"""Where a GRPO update's seconds go, piece by piece, at a step's shape (``--rows`` sequences of ``--length`` ids).

One model of SmolLM2-135M's shape (random weights, bf16 on a GPU), the same ids through each variant, each
timed as the median of ``--repeats`` after a warm-up, in one run:

- ``forward``: a plain forward pass (the baseline: what the arithmetic costs without scoring);
- ``fused_scoring``: the forward as TRL's GRPO scores (``labels`` and ``fused_lm_head=True``: per-token
  log-probs and entropies, ``trl.trainer.utils.add_fused_lm_head``), no gradient (the reference forward);
- ``dora_scoring``: the same with a fresh DoRA delta (rank 16 on every linear layer) under gradient (the
  policy forward), and ``dora_backward``: its backward;
- ``lora_scoring`` / ``lora_backward``: the same with a plain LoRA delta;
- ``dora_forward_and_backward_checkpointed``: the DoRA forward and backward with gradient checkpointing
  (TRL's default: each layer recomputed in the backward), against the same without (``checkpointed_over_not``),
  and on a GPU what each holds at its peak, in bytes an id (``*_activation_bytes_per_id``);

and each piece's ratio to the plain forward (``ratio_vs_forward``). Every piece above repeats one shape. A
GRPO step's shape changes every step (its longest episode sets it), so on a GPU the DoRA forward and
backward is timed again at a new length each repeat (``--length`` less 8, 16, ...), once with
``scaled_dot_product_attention`` free to pick cuDNN's kernels (torch's default, the baseline:
``new_shape_cudnn_allowed``) and once without them (``new_shape_cudnn_off``, what ``train grpo``
sets by default), with the ratio of the two (``cudnn_allowed_over_off``). cuDNN builds a graph
for each new shape, on the host.

    python bench/grpo_update.py --device cuda --rows 32 --length 1024
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(run, device: str, repeats: int) -> float:
    import torch

    run()
    seconds = []
    for _ in range(repeats):
        torch.cuda.synchronize() if device.startswith("cuda") else None
        started = time.perf_counter()
        run()
        torch.cuda.synchronize() if device.startswith("cuda") else None
        seconds.append(time.perf_counter() - started)
    return round(statistics.median(seconds), 4)


def new_shapes(model, ids, mask, labels, repeats: int) -> float:
    """Median seconds of a forward and backward whose length is new each time (a warm-up at the full one)."""
    import torch

    seconds = []
    for k in range(repeats + 1):
        cut = ids.shape[1] - 8 * k  # k = 0: the warm-up; then a length no earlier call had
        torch.cuda.synchronize()
        started = time.perf_counter()
        result = model(input_ids=ids[:, :cut], attention_mask=mask[:, :cut], labels=labels[:, :cut],
                       fused_lm_head=True)
        result.log_probs.float().sum().backward()
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if k:
            seconds.append(time.perf_counter() - started)
    return round(statistics.median(seconds), 4)


def main() -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--length", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    ids = torch.randint(10, 49000, (args.rows, args.length), device=args.device)
    mask = torch.ones_like(ids)
    mask[: args.rows // 2, : args.length // 4] = 0  # half the rows left-padded, as TRL's prompts are
    labels = ids.masked_fill(mask == 0, -100)
    out: dict = {"rows": args.rows, "length": args.length, "device": args.device}

    def model_of(kind: str | None):
        torch.manual_seed(0)
        base = LlamaForCausalLM(config).to(args.device, dtype)
        add_fused_lm_head(base, temperature=1.0, outputs=("log_probs", "entropy"))  # as TRL's GRPO does
        if kind is None:
            return base
        return get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                               use_dora=kind == "dora", lora_dropout=0.0))

    plain = model_of(None).eval()
    with torch.no_grad():
        out["forward"] = timed(lambda m=plain: m(input_ids=ids, attention_mask=mask), args.device, args.repeats)
        out["fused_scoring"] = timed(lambda m=plain: m(input_ids=ids, attention_mask=mask, labels=labels,
                                                       fused_lm_head=True), args.device, args.repeats)
    del plain
    for kind in ("dora", "lora"):
        model = model_of(kind).train()
        with torch.no_grad():
            out[f"{kind}_scoring_no_grad"] = timed(lambda m=model: m(input_ids=ids, attention_mask=mask, labels=labels,
                                                                     fused_lm_head=True), args.device, args.repeats)
        holder = {}

        def forward(m=model, holder=holder):
            holder.clear()  # the last call's graph freed first
            holder["out"] = m(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)

        def both(m=model):
            result = m(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
            result.log_probs.float().sum().backward()
            m.zero_grad(set_to_none=True)

        out[f"{kind}_scoring"] = timed(forward, args.device, args.repeats)
        holder.clear()
        out[f"{kind}_forward_and_backward"] = timed(both, args.device, args.repeats)
        out[f"{kind}_backward"] = round(out[f"{kind}_forward_and_backward"] - out[f"{kind}_scoring"], 4)
        if args.device.startswith("cuda"):  # what one forward and backward holds: the activations a micro-batch needs
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            both()
            out[f"{kind}_activation_bytes_per_id"] = round((torch.cuda.max_memory_allocated() - before) / ids.numel())
        if kind == "dora":  # TRL's default: every layer's activations recomputed in the backward
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
            out["dora_forward_and_backward_checkpointed"] = timed(both, args.device, args.repeats)
            out["checkpointed_over_not"] = round(out["dora_forward_and_backward_checkpointed"]
                                                 / out["dora_forward_and_backward"], 2)
            if args.device.startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
                both()
                out["dora_checkpointed_activation_bytes_per_id"] = round(
                    (torch.cuda.max_memory_allocated() - before) / ids.numel())
        del model
    if args.device.startswith("cuda"):
        model = model_of("dora").train()
        for name, cudnn in (("cudnn_allowed", True), ("cudnn_off", False)):
            torch.backends.cuda.enable_cudnn_sdp(cudnn)
            out[f"new_shape_{name}"] = new_shapes(model, ids, mask, labels, args.repeats)
        torch.backends.cuda.enable_cudnn_sdp(True)
        out["cudnn_allowed_over_off"] = round(out["new_shape_cudnn_allowed"] / out["new_shape_cudnn_off"], 2)
        del model
    out["ids"] = args.rows * args.length
    out["ratio_vs_forward"] = {key: round(value / out["forward"], 2) for key, value in out.items()
                               if key not in ("rows", "length", "device", "ids", "forward", "cudnn_allowed_over_off",
                                              "checkpointed_over_not")
                               and isinstance(value, float)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
