"""The GRPO update's scoring forward and backward over a step's rows, as TRL lays them out and as pdbgym groups them.

A step's rows are episodes of different lengths: a prompt of ``--prompt`` ids (+-10%) left-padded by TRL,
then a completion (the model's turns and the tools' outputs) right-padded, drawn uniform from
``--completions`` (the short experiment's real rows on an H100 ran about 900 to 4,096 ids). Each arm
scores every row's completion ids (TRL's fused LM head, log-probs and entropies, bf16 autocast on a GPU)
with gradient through a DoRA delta (rank 16 on every linear layer) and gradient checkpointing, as
``train grpo`` does by default, and runs the backward of their sum. Arms, in one run, same rows:

- ``trl_padded`` (the baseline): TRL's one padded batch with its padding mask;
- ``groups_before`` (with ``--against REV``): ``pdbgym/train/grpo/packing.py`` of that revision;
- ``groups_now``: this tree's ``grouped_scores`` (each row at its group's left edge, no mask);
- ``no_checkpointing`` (with ``--arms``): the same groups, no recompute, in groups of at most
  ``--budget-no-checkpointing`` padded ids (their activations held for the backward);
- ``lora`` (with ``--arms``): the same groups through a LoRA delta of the same rank instead of DoRA;
- ``fused_dora`` (with ``--arms``): the same groups and DoRA delta, its layers' forward fused
  (``pdbgym.train.dora.fuse_dora``, compiled by inductor on a GPU; the compile is in the warm-up);
- ``fused_no_checkpointing`` (with ``--arms``): that, with no recompute, at ``--budget-no-checkpointing``;
- ``fused_micro_no_checkpointing`` (with ``--arms``): the fused delta with no recompute, the rows in ``--micro``
  micro-batches each with its own backward (``train grpo --update-micro-batches N --no-gradient-checkpointing``:
  the length groups split a forward, but all groups' activations wait for the one backward).

``--profile ARM`` runs one more pass of that arm under ``torch.profiler`` and prints its top operators by
device time (where the update's time goes).

Each is the median of ``--repeats`` after a warm-up, with the card's peak memory, and each grouped arm's
log-probs are checked against the baseline's on the completion ids. Prints JSON with the ratios.

    python bench/grpo_scoring.py --device cuda --against 7aef45e
    python bench/grpo_scoring.py --device cpu --rows 4 --prompt 64 --completions 16,128 --layers 2   # a smoke run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXTRA_ARMS = ("no_checkpointing", "lora", "fused_dora", "fused_no_checkpointing", "fused_micro_no_checkpointing")
sys.path.insert(0, str(ROOT))


def packing_of(rev: str) -> types.ModuleType:
    """``pdbgym/train/grpo/packing.py`` as it was at ``rev`` (or the file ``rev`` names: a machine without the
    repository's history gets the old file copied over), as a module."""
    if Path(rev).is_file():
        source = Path(rev).read_text()
    else:
        source = subprocess.run(["git", "show", f"{rev}:pdbgym/train/grpo/packing.py"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
    module = types.ModuleType(f"packing_{rev}")
    exec(compile(source, f"packing@{rev}", "exec"), module.__dict__)  # noqa: S102 - our own file at a revision
    return module


def profile(run, completion_mask, models, cuda: bool) -> None:
    """One pass of ``run`` (forward and backward) under ``torch.profiler``: its top operators by device time."""
    import torch
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        logps = run()
        if logps.requires_grad:
            (logps.float() * completion_mask).sum().backward()
        if cuda:
            torch.cuda.synchronize()
    for m in models:
        m.zero_grad(set_to_none=True)
    key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=60), flush=True)


def main() -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from pdbgym.train.grpo.packing import grouped_scores

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--prompt", type=int, default=680)
    p.add_argument("--completions", default="220,3400", help="least,most ids of a completion")
    p.add_argument("--budget", type=int, default=65536, help="train grpo --update-tokens")
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--against", default=None, help="also time this revision's grouped scoring (or that of a "
                   "copy of packing.py)")
    p.add_argument("--arms", default="", help="more arms, comma-separated: " + ", ".join(EXTRA_ARMS))
    p.add_argument("--budget-no-checkpointing", type=int, default=12288,
                   help="padded ids a forward holds in the no_checkpointing arm")
    p.add_argument("--micro", type=int, default=4, help="micro-batches of fused_micro_no_checkpointing")
    p.add_argument("--profile", default=None, help="profile one pass of this arm and print its top operators")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    cuda = args.device.startswith("cuda")
    generator = torch.Generator().manual_seed(0)
    low, high = (int(x) for x in args.completions.split(","))
    prompts = [int(args.prompt * (0.9 + 0.2 * torch.rand(1, generator=generator).item())) for _ in range(args.rows)]
    completions = torch.randint(low, high + 1, (args.rows,), generator=generator).tolist()
    width_p, keep = max(prompts), max(completions)
    ids = torch.zeros(args.rows, width_p + keep, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (a, b) in enumerate(zip(prompts, completions, strict=True)):
        ids[row, width_p - a:width_p + b] = torch.randint(10, 49000, (a + b,), generator=generator)
        mask[row, width_p - a:width_p + b] = 1
    ids, mask = ids.to(args.device), mask.to(args.device)
    completion_mask = mask[:, -keep:].float()

    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=args.layers,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         tie_word_embeddings=True)
    extra = [a for a in args.arms.split(",") if a]
    unknown = set(extra) - set(EXTRA_ARMS)
    if unknown:
        p.error(f"unknown arm(s) {', '.join(sorted(unknown))}: --arms takes {', '.join(EXTRA_ARMS)}")

    def delta(dora: bool):
        """The same random base (seed 0) with a fresh delta on every linear layer."""
        torch.manual_seed(0)
        base = LlamaForCausalLM(config).to(args.device, torch.bfloat16 if cuda else torch.float32)
        base.config._attn_implementation = "sdpa"
        add_fused_lm_head(base, temperature=1.0, outputs=("log_probs", "entropy"))  # as TRL's GRPO does
        peft_model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                     use_dora=dora, lora_dropout=0.0))
        peft_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        peft_model.enable_input_require_grads()
        peft_model.train()
        return peft_model

    models = {"dora": delta(True)}
    if "lora" in extra:
        models["lora"] = delta(False)
    if {"fused_dora", "fused_no_checkpointing", "fused_micro_no_checkpointing"} & set(extra):
        from pdbgym.train.dora import fuse_dora

        models["fused"] = delta(True)
        out_layers = fuse_dora(models["fused"])
        print(f"fused {out_layers} DoRA layers", flush=True)

    def scorer(which: str):
        def score(ids_, mask_, keep_, compute_entropy=False):
            """TRL 1.16's ``_get_per_token_logps_and_entropies`` on one batch."""
            labels = ids_.masked_fill(mask_ == 0, -100)
            labels[:, :-keep_] = -100
            with torch.autocast(args.device.split(":")[0], dtype=torch.bfloat16, enabled=cuda):
                out = models[which](input_ids=ids_, attention_mask=mask_, labels=labels, fused_lm_head=True)
            return out.log_probs[:, -keep_:], out.entropy[:, -keep_:] if compute_entropy else None, None
        return score

    score = scorer("dora")

    @contextlib.contextmanager
    def no_recompute(which: str):
        """``models[which]`` without gradient checkpointing while the arm's forwards run."""
        models[which].activation_checkpointing_disable()
        try:
            yield
        finally:
            models[which].gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    def without_checkpointing(which: str):
        with no_recompute(which):
            return grouped_scores(scorer(which), ids, mask, keep, args.budget_no_checkpointing, True)[0]

    def micro_without_checkpointing():
        """Each micro-batch's rows scored and backed through on their own; the log-probs, detached, for the
        check (under no_grad nothing is backed through)."""
        parts = []
        with no_recompute("fused"):
            for rows in torch.arange(ids.shape[0]).chunk(args.micro):
                logps = grouped_scores(scorer("fused"), ids[rows], mask[rows], keep, args.budget, True)[0]
                if torch.is_grad_enabled():
                    (logps.float() * completion_mask[rows]).sum().backward()
                parts.append(logps.detach())
        return torch.cat(parts)

    arms = {"trl_padded": lambda: score(ids, mask, keep, True)[0]}
    if args.against:
        before = packing_of(args.against)
        arms["groups_before"] = lambda: before.grouped_scores(score, ids, mask, keep, args.budget, True)[0]
    arms["groups_now"] = lambda: grouped_scores(score, ids, mask, keep, args.budget, True)[0]
    if "no_checkpointing" in extra:
        arms["no_checkpointing"] = lambda: without_checkpointing("dora")
    if "lora" in extra:
        arms["lora"] = lambda: grouped_scores(scorer("lora"), ids, mask, keep, args.budget, True)[0]
    if "fused_dora" in extra:
        arms["fused_dora"] = lambda: grouped_scores(scorer("fused"), ids, mask, keep, args.budget, True)[0]
    if "fused_no_checkpointing" in extra:
        arms["fused_no_checkpointing"] = lambda: without_checkpointing("fused")
    if "fused_micro_no_checkpointing" in extra:
        arms["fused_micro_no_checkpointing"] = micro_without_checkpointing
    if args.profile is not None and args.profile not in arms:
        p.error(f"--profile {args.profile}: no such arm in this run ({', '.join(arms)})")
    out: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu", "rows": args.rows,
                 "ids": int(mask.sum()), "padded_ids": ids.numel(), "budget": args.budget, "layers": args.layers,
                 "against": args.against}
    reference = None
    for name, run in arms.items():
        seconds = []
        for k in range(args.repeats + 1):
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            started = time.perf_counter()
            logps = run()
            if logps.requires_grad:  # an arm that backs through its micro-batches itself returns them detached
                (logps.float() * completion_mask).sum().backward()
            for m in models.values():
                m.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            if k:
                seconds.append(time.perf_counter() - started)
        out[name] = {"seconds": round(statistics.median(seconds), 4)}
        if cuda:
            out[name]["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        with torch.no_grad():
            got = run().float() * completion_mask
        if reference is None:
            reference = got
        else:
            out[name]["largest_logprob_difference"] = round(float((got - reference).abs().max()), 5)
        print(name, json.dumps(out[name]), flush=True)
        if name == args.profile:
            profile(run, completion_mask, models.values(), cuda)
    base_s = out["trl_padded"]["seconds"]
    out["over_trl_padded"] = {name: round(base_s / out[name]["seconds"], 3) for name in arms if name != "trl_padded"}
    if "groups_before" in out:
        out["now_over_before"] = round(out["groups_before"]["seconds"] / out["groups_now"]["seconds"], 3)
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
