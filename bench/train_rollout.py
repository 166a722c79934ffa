"""GRPO rollout phase: episodes per hour with a group's G episodes batched vs the same episodes one at a time.

Both arms play the same pdbgym episodes (real ``DebugEnv``: sandboxed workspace, live pdb, tool
steps) through ``pdbgym.agent.loop`` with the same ``BatchedGenerator``; the baseline plays them one
after another (batch size 1 on every turn), the batched arm plays the G episodes of the group
together (one left-padded ``generate`` per round over every live episode). Same model, same tasks,
same turn budget and tokens per turn, measured in the same run. The model is SmolLM2-135M-shaped
(its real tokenizer; random weights unless ``--model`` names a folder), so every turn runs to
``--max-new-tokens`` and each episode ends after ``--turn-budget`` malformed turns: a fixed, heavy
generation load per episode.

    python bench/train_rollout.py --device cuda --group 8 --groups 2
    python bench/train_rollout.py --device cuda --model MODEL --arms step --against 226d2f2
    (also ``python bench/train_throughput.py --phase rollout ...``)

``--dora`` wraps the model in a fresh DoRA delta (rank 16 on every linear layer, in train mode), as the
GRPO trainer's policy is while it plays; the arm ``step_merged`` plays the step from a plain copy with
that delta merged in (GRPO's default rollout weights, ``pdbgym.train.grpo.merged``) and, beside
``step``, prints its speedup over the live DoRA model (not with ``--against``: older trees lack it);
``--seeded`` gives every episode a fixed sampling seed, so both trees of ``--against`` draw the same
episodes.

    python bench/train_rollout.py --device cpu --model SFT_MODEL --tasks LADDER0 --groups 2 --group 4 \
        --turn-budget 10 --max-new-tokens 96 --arms step --dora --seeded --against f4c3042
    python bench/train_rollout.py --device cpu --model SFT_MODEL --tasks LADDER0 --groups 2 --group 4 \
        --turn-budget 10 --max-new-tokens 96 --arms step,step_merged --dora --seeded

``--against REV`` also plays the same arms with the code of ``REV`` (``git archive``, this script run in
that tree, one after the other on the same machine) and prints each arm's speedup of this tree over it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _model(args: argparse.Namespace):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from pdbgym.agent.backends.embedded import load_embedded_tokenizer

    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    if args.model:
        from transformers import AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, use_kernels=False)
        return model.to(args.device).eval(), AutoTokenizer.from_pretrained(args.model)
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tokenizer = load_embedded_tokenizer()
    torch.manual_seed(0)
    # SmolLM2-135M's shape: 30 layers, hidden 576, 9 heads (3 kv), MLP 1536, vocab 49,152, tied embeddings.
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id, rope_theta=100000.0)
    return LlamaForCausalLM(config).to(dtype).to(args.device).eval(), tokenizer


def run(args: argparse.Namespace) -> dict:
    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.env import DebugEnv, EnvConfig
    from pdbgym.tasks.suites import resolve_tasks
    from pdbgym.train.grpo.rollout import BatchedGenerator, run_episodes, run_one_at_a_time

    model, tokenizer = _model(args)
    if args.dora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, use_dora=True,
                                                 target_modules="all-linear", task_type="CAUSAL_LM")).train()
    tasks = resolve_tasks(args.tasks)[:args.groups]
    agent = AgentConfig(tool_format="text", max_context_tokens=8192,
                        sampling=SamplingParams(1.0, 1.0, args.max_new_tokens, None), check_trajectory=True)
    env = EnvConfig(turn_budget=args.turn_budget, command_timeout_s=10.0)

    def make_env(task):  # noqa: ANN001, ANN202
        return DebugEnv(task, env)

    def step(batch, generator, agent, make_env):  # noqa: ANN001, ANN202 - one GRPO step: every group at once
        seeds = list(range(len(batch))) if args.seeded else None
        return run_episodes(batch, generator, agent, make_env, seeds=seeds)

    plays = {"one_at_a_time": run_one_at_a_time, "batched": run_episodes, "step": step, "step_merged": step}
    generator = BatchedGenerator(model, tokenizer)  # one for the run, as the trainer keeps it
    run_episodes([tasks[0]] * 2, generator, agent, make_env)  # CUDA context, kernels, the first sandbox
    live = generator
    arms = {}
    for arm in args.arms.split(","):
        play = plays[arm]
        generator = live
        if arm == "step_merged":  # GRPO's default rollout weights: a plain copy with the delta merged in
            from pdbgym.train.grpo.merged import MergedPolicy

            policy, why = MergedPolicy.of(model)
            if policy is None:
                raise SystemExit(f"step_merged: no merged copy of the model ({why}); it needs --dora")
            generator = BatchedGenerator(policy.model, tokenizer)
            run_episodes([tasks[0]] * 2, generator, agent, make_env)  # the same warm-up as the live model's
        before, tokens_before = _generator_seconds(generator), _tokens(generator)
        started = time.perf_counter()
        episodes = 0
        batches = [[t for t in tasks for _ in range(args.group)]] if arm.startswith("step") else [[t] * args.group for t in tasks]
        for batch in batches:
            episodes += len(play(batch, generator, agent, make_env))
        seconds = time.perf_counter() - started
        model_seconds = _generator_seconds(generator) - before
        arms[arm] = {"episodes": episodes, "seconds": round(seconds, 2), "generated_tokens": _tokens(generator) - tokens_before,
                     "episodes_per_hour": round(3600 * episodes / seconds, 1),
                     "model_seconds": round(model_seconds, 2), "model_share": round(model_seconds / seconds, 3)}
    result = {"phase": "rollout", "device": args.device, "group": args.group, "groups": len(tasks),
              "max_new_tokens": args.max_new_tokens, "turn_budget": args.turn_budget, "model": args.model or
              "SmolLM2-135M shape, random weights", "arms": arms}
    if "batched" in arms and "one_at_a_time" in arms:
        ratio = arms["batched"]["episodes_per_hour"] / arms["one_at_a_time"]["episodes_per_hour"]
        result["speedup_batched_vs_one_at_a_time"] = round(ratio, 2)
    if "step" in arms and "step_merged" in arms:
        ratio = arms["step_merged"]["episodes_per_hour"] / arms["step"]["episodes_per_hour"]
        result["speedup_merged_vs_live_weights"] = round(ratio, 2)
    return result


def _tokens(generator) -> int:  # noqa: ANN001
    """Ids the generator sampled so far (the engine's count; 0 before the engine)."""
    return int(getattr(generator.stats, "tokens", 0))


def _generator_seconds(generator) -> float:  # noqa: ANN001
    """Seconds the model worked for the generator: the engine's busy time (or, before the engine, the
    time inside ``generate``), so the same script times code before and after the engine."""
    stats = generator.stats
    return float(getattr(stats, "busy_seconds", getattr(stats, "generate_seconds", 0.0)))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default=None, help="HF model folder (default: SmolLM2-135M shape, random weights)")
    p.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the embedded SmolLM2 one)")
    p.add_argument("--tasks", default="builtin")
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--groups", type=int, default=2, help="tasks, one group each")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--turn-budget", type=int, default=3)
    p.add_argument("--arms", default="one_at_a_time,batched",
                   help="one_at_a_time, batched (group by group), step (every group at once, as one GRPO step), "
                        "step_merged (step from the merged copy; needs --dora)")
    p.add_argument("--dora", action="store_true", help="a fresh DoRA delta over the model, in train mode (GRPO's policy)")
    p.add_argument("--seeded", action="store_true", help="fixed episode seeds in the step arm (same draws in both trees)")
    p.add_argument("--against", default=None, help="a git revision: the same arms with its code, and the ratios")
    p.add_argument("--json", type=Path, default=None)
    return p


def against(rev: str, argv: list[str]) -> dict:
    """The same arms played by ``rev``'s code: this script run in a ``git archive`` of that revision."""
    import shutil
    import subprocess
    import tempfile

    from engine_cpu import tree_of  # bench/ is this script's folder

    scratch = Path(tempfile.mkdtemp(prefix="pdbgym-rollout-against-"))
    try:
        tree = tree_of(rev, scratch)
        (tree / "bench").mkdir()
        shutil.copy2(__file__, tree / "bench" / "train_rollout.py")
        out = scratch / "result.json"
        rest = [a for i, a in enumerate(argv) if a != "--against" and (i == 0 or argv[i - 1] != "--against")]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([sys.executable, str(tree / "bench" / "train_rollout.py"), *rest, "--json", str(out)],
                       env=env, cwd=tree, check=True)
        return json.loads(out.read_text())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    result = run(args)
    if args.against:
        before = against(args.against, [a for a in argv if not a.startswith("--json")] if "--json" not in argv
                         else argv[:argv.index("--json")] + argv[argv.index("--json") + 2:])
        result["against"] = {"rev": args.against, "arms": before["arms"], "speedup": {
            arm: round(before["arms"][arm]["seconds"] / row["seconds"], 2)
            for arm, row in result["arms"].items() if arm in before["arms"]}}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
