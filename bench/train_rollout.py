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
    (also ``python bench/train_throughput.py --phase rollout ...``)
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

        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
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
    tasks = resolve_tasks(args.tasks)[:args.groups]
    agent = AgentConfig(tool_format="text", max_context_tokens=8192,
                        sampling=SamplingParams(1.0, 1.0, args.max_new_tokens, None), check_trajectory=True)
    env = EnvConfig(turn_budget=args.turn_budget, command_timeout_s=10.0)

    def make_env(task):  # noqa: ANN001, ANN202
        return DebugEnv(task, env)

    warm = BatchedGenerator(model, tokenizer)
    run_episodes([tasks[0]] * 2, warm, agent, make_env)  # CUDA context, kernels, the first sandbox
    arms = {}
    for arm, play in (("one_at_a_time", run_one_at_a_time), ("batched", run_episodes)):
        generator = BatchedGenerator(model, tokenizer)
        started = time.perf_counter()
        episodes = 0
        for task in tasks:
            outcomes = play([task] * args.group, generator, agent, make_env)
            episodes += len(outcomes)
        seconds = time.perf_counter() - started
        arms[arm] = {"episodes": episodes, "seconds": round(seconds, 2),
                     "episodes_per_hour": round(3600 * episodes / seconds, 1),
                     "generate_seconds": round(generator.stats.generate_seconds, 2),
                     "generate_calls": generator.stats.rounds, "turns": generator.stats.requests,
                     "mean_batch": round(sum(generator.stats.batch_sizes) / max(1, generator.stats.rounds), 2)}
    ratio = arms["batched"]["episodes_per_hour"] / arms["one_at_a_time"]["episodes_per_hour"]
    return {"phase": "rollout", "device": args.device, "group": args.group, "groups": len(tasks),
            "max_new_tokens": args.max_new_tokens, "turn_budget": args.turn_budget, "model": args.model or
            "SmolLM2-135M shape, random weights", "arms": arms, "speedup_batched_vs_one_at_a_time": round(ratio, 2)}


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
    p.add_argument("--json", type=Path, default=None)
    return p


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = parser().parse_args(argv)
    result = run(args)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
