"""Training throughput: ``--phase sft`` (this file) and ``--phase rollout`` (bench/train_rollout.py).

SFT phase: tokens/s and model FLOPs utilisation of one long sequence through ``pdbgym train sft``'s
code path (``pdbgym.train.sft.trainer.build_trainer``: TRL ``SFTTrainer``, its fused chunked lm_head loss,
PEFT DoRA) against the named baseline, plain HF + PEFT (``model(ids, labels=...).loss``, full logits,
``torch.optim.AdamW``), in the same run, on the same random-weight model shape, sequence and adapter.

MFU = tokens/s x FLOPs per token / peak, FLOPs per token = 6 N + 6 L d T (N parameters, L layers,
d = heads x head_dim, T the sequence length: causal attention's forward and backward), peak 790 TFLOP/s
(bf16 dense, H200). Both arms checkpoint activations (without it 16k tokens do not fit the baseline).

``--checkpointing`` runs the pdbgym arm once per listed variant, each a switch of the libraries:
``full`` (every decoder layer recomputed), ``selective`` (TRL's selective activation checkpointing: the
attention output is kept, the rest recomputed), ``everyN`` (transformers' ``every_n_layers``: one layer in
N recomputed, the rest keep their activations), ``selective-everyN`` (both), ``off``. A variant that runs
out of GPU memory is reported as such, with the memory it had reached.

``--devices N`` adds a third arm: the same trainer under ``accelerate launch`` with the shipped DDP config
on N processes (one sequence per process per step), and prints the scaling against the one-process
pdbgym arm of the same run (tokens/s ratio, and efficiency = ratio / N).

    GPU: python bench/train_throughput.py --phase sft --shape qwen3-4b --length 16384 --steps 3
    GPU, 2 ranks: python bench/train_throughput.py --phase sft --shape qwen3-4b --length 16384 --devices 2
    CPU: python bench/train_throughput.py --phase sft --shape tiny --length 256 --steps 2 --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {
    # Qwen3-4B(-Instruct-2507): 4.02 B parameters.
    "qwen3-4b": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=9728, vocab_size=151936, head_dim=128, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=1000, head_dim=16, tie_word_embeddings=True),
}
PEAK_FLOPS = 790e12
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def make_model(shape: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(max_position_embeddings=40960, **SHAPES[shape])
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype)
    return model


def flops_per_token(model, length: int) -> float:
    config = model.config
    params = sum(p.numel() for p in model.parameters())
    attention = 6 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * length
    return 6 * params + attention


def example(shape: str, length: int, loss_share: float) -> tuple[list[int], list[int]]:
    """Random ids; the loss mask marks alternating stretches (assistant turns) covering ``loss_share``."""
    import random

    rng = random.Random(0)
    ids = [rng.randrange(SHAPES[shape]["vocab_size"]) for _ in range(length)]
    period = 512
    mask = [1 if (i % period) < loss_share * period else 0 for i in range(length)]
    mask[0] = 0
    return ids, mask


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _memory(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda") else None


def _reset(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def baseline(args: argparse.Namespace, ids: list[int], mask: list[int]) -> dict:
    """Plain HF + PEFT: full-logit loss from the model, AdamW, activation checkpointing."""
    import torch
    from peft import LoraConfig, get_peft_model

    _reset(args.device)
    model = make_model(args.shape, args.device)
    flops = flops_per_token(model, len(ids))
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, use_dora=not args.lora,
                                             target_modules=list(TARGETS), task_type="CAUSAL_LM"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    input_ids = torch.tensor([ids], device=args.device)
    labels = torch.tensor([[t if m else -100 for t, m in zip(ids, mask, strict=True)]], device=args.device)
    times = []
    for _ in range(args.warmup + args.steps):
        _sync(args.device)
        started = time.perf_counter()
        with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=args.device.startswith("cuda")):
            loss = model(input_ids=input_ids, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(args.device)
        times.append(time.perf_counter() - started)
    result = _figures("hf+peft (baseline)", times[args.warmup:], len(ids), flops, args.device)
    del model, optimizer
    return result


def checkpointing_switches(variant: str) -> dict:
    """``SFTTrainConfig`` fields of a ``--checkpointing`` variant."""
    if variant == "off":
        return {"gradient_checkpointing": False}
    fields: dict = {"gradient_checkpointing": True}
    rest = variant
    if rest.startswith("selective"):
        fields["selective_recompute"] = True
        rest = rest.removeprefix("selective").removeprefix("-")
    if rest.startswith("every"):
        fields["recompute_every"] = int(rest.removeprefix("every"))
    elif rest not in ("", "full"):
        raise SystemExit(f"unknown --checkpointing variant {variant!r}: full, selective, everyN, selective-everyN, off")
    return fields


def pdbgym_sft(args: argparse.Namespace, ids: list[int], mask: list[int], variant: str = "full") -> dict:
    """``pdbgym train sft``'s trainer (TRL SFTTrainer over a pre-tokenized row) on the same model and sequence."""
    from transformers import TrainerCallback

    from pdbgym.train.sft.base import BaseModel
    from pdbgym.train.sft.config import SFTTrainConfig
    from pdbgym.train.sft.trainer import build_trainer

    world = int(os.environ.get("WORLD_SIZE", "1"))  # > 1 under accelerate launch (--devices)
    device = f"cuda:{os.environ['LOCAL_RANK']}" if world > 1 and args.device.startswith("cuda") else args.device
    _reset(device)
    model = make_model(args.shape, device)
    flops = flops_per_token(model, len(ids))
    times: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_begin(self, *a, **k) -> None:
            _sync(device)
            self.started = time.perf_counter()

        def on_step_end(self, *a, **k) -> None:
            _sync(device)
            times.append(time.perf_counter() - self.started)

    switches = checkpointing_switches(variant)
    name = f"pdbgym train sft (TRL SFTTrainer), checkpointing {variant}" + (f", DDP x{world}" if world > 1 else "")
    trainer = None
    try:
        with tempfile.TemporaryDirectory() as out:
            config = SFTTrainConfig(base="bench", data=Path(out), out=Path(out), rank=args.rank,
                                    use_dora=not args.lora, effective_batch=world,
                                    max_steps=args.warmup + args.steps, max_length=len(ids), val_fraction=0.0,
                                    register=False, lr=1e-4, extra={"save_strategy": "no", "logging_steps": 1000}, **switches)
            base = BaseModel(model, _tokenizer(), "bench", "bench", None)
            trainer = build_trainer(config, base, [{"input_ids": ids, "assistant_masks": mask}] * world, [],
                                    device, [StepClock()])
            trainer.train()
    except Exception as error:  # torch.OutOfMemoryError: the variant does not fit; the others still run
        if "out of memory" not in str(error).lower():
            raise
        result = {"arm": name, "out_of_memory": True, "peak_gpu_gib": _memory(device)}
    else:
        result = _figures(name, times[args.warmup:], len(ids) * world, flops, device, world)
    del trainer, model
    return result


def data_parallel_arm(args: argparse.Namespace) -> dict:
    """The pdbgym arm under ``accelerate launch`` (shipped ddp.yaml) on ``args.devices`` processes."""
    config = Path(__file__).resolve().parents[1] / "pdbgym" / "train" / "configs" / "ddp.yaml"
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "arm.json"
        launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
                  "--num_processes", str(args.devices)]
        if not args.device.startswith("cuda"):
            launch += ["--mixed_precision", "no"]
        child = [__file__, "--phase", "sft", "--dp-child", str(out), "--device", args.device, "--shape", args.shape,
                 "--length", str(args.length), "--rank", str(args.rank), "--loss-share", str(args.loss_share),
                 "--warmup", str(args.warmup), "--steps", str(args.steps),
                 "--checkpointing", args.checkpointing.split(",")[0]] + (["--lora"] if args.lora else [])
        subprocess.run(launch + child, check=True)
        return json.loads(out.read_text())


def _tokenizer():
    """A small word-level tokenizer: the trainer needs one for its pad id; the ids are random anyway."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(WordLevel({"[UNK]": 0, "[EOS]": 1}, unk_token="[UNK]"))
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="[EOS]", pad_token="[EOS]")


def _figures(name: str, times: list[float], tokens: int, flops: float, device: str, gpus: int = 1) -> dict:
    """``tokens`` per step over all ``gpus``; MFU is per GPU."""
    seconds = sum(times) / len(times)
    tokens_per_s = tokens / seconds
    return {"arm": name, "seconds_per_step": round(seconds, 3), "tokens_per_s": round(tokens_per_s, 1),
            "mfu": round(tokens_per_s / gpus * flops / PEAK_FLOPS, 4) if device.startswith("cuda") else None,
            "flops_per_token": flops, "peak_gpu_gib": _memory(device), "steps_timed": len(times)}


def run_sft(args: argparse.Namespace) -> dict:
    ids, mask = example(args.shape, args.length, args.loss_share)
    arms = [baseline(args, ids, mask)]
    print(json.dumps(arms[-1]), flush=True)  # each arm as it finishes: a later failure keeps it
    for variant in args.checkpointing.split(","):
        arms.append(pdbgym_sft(args, ids, mask, variant))
        print(json.dumps(arms[-1]), flush=True)
    ran = [arm for arm in arms[1:] if "tokens_per_s" in arm]
    best = max(ran, key=lambda arm: arm["tokens_per_s"]) if ran else None
    result = {"phase": "sft", "shape": args.shape, "length": args.length, "adapter": "LoRA" if args.lora else "DoRA",
              "rank": args.rank, "loss_share": args.loss_share, "arms": arms, "best_pdbgym_arm": best and best["arm"],
              "speedup_vs_baseline": best and round(best["tokens_per_s"] / arms[0]["tokens_per_s"], 3)}
    if args.devices > 1:
        arms.append(data_parallel_arm(args))
        print(json.dumps(arms[-1]), flush=True)
        scaling = arms[-1]["tokens_per_s"] / arms[1]["tokens_per_s"]
        result.update(devices=args.devices, scaling_vs_one_process=round(scaling, 3),
                      scaling_efficiency=round(scaling / args.devices, 3))
    return result


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phase", choices=("sft", "rollout"), required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    p.add_argument("--length", type=int, default=16384)
    p.add_argument("--rank", type=int, default=24)
    p.add_argument("--lora", action="store_true", help="plain LoRA instead of DoRA")
    p.add_argument("--loss-share", type=float, default=0.3, help="share of ids with loss (assistant turns)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--checkpointing", default="full",
                   help="comma list of the pdbgym arm's variants: full, selective, everyN, selective-everyN, off")
    p.add_argument("--devices", type=int, default=1, help="also the pdbgym arm on N DDP processes vs 1")
    p.add_argument("--dp-child", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, default=None)
    return p


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--phase" in argv and argv[argv.index("--phase") + 1] == "rollout":
        from train_rollout import main as rollout_main

        rest = argv[:argv.index("--phase")] + argv[argv.index("--phase") + 2:]
        rollout_main(rest)
        return
    args = parser().parse_args(argv)
    if args.dp_child is not None:  # one rank of data_parallel_arm; rank 0 reports
        row = pdbgym_sft(args, *example(args.shape, args.length, args.loss_share), args.checkpointing.split(",")[0])
        if os.environ.get("RANK", "0") == "0":
            args.dp_child.write_text(json.dumps(row))
        return
    result = run_sft(args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
