"""A local model's campaign in one process against the same campaign spread over several (`--local-processes`).

The same jobs (tasks x runs, each episode seeded by itself) are played once per arm, in the same run:
the baseline in this process with ``--local`` episodes at once, then in N spawned processes with
``--local`` episodes at once in each, each process with its own copy of the model. Printed per arm:
wall seconds, episodes a minute, the mean episode's wall time, outcomes; and the ratio against the
baseline. Episodes are seeded one by one, so with ``--local 1`` both arms must play the same ids (checked);
with batched turns a row's draws depend only on its seed and step, but batched arithmetic can round
differently, so there the outcomes are compared and the differing count printed.

    .venv/bin/python bench/local_processes.py [--policy embedded] [--tasks builtin] [--runs 2]
        [--tiny] [--local 1] [--processes 1,2] [--device cpu] [--turn-budget 4] [--max-new-tokens 32] [--json FILE]

On a GPU: ``--device cuda --local 48 --processes 1,2,4 --runs 8``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def play(jobs: list, processes: int, local: int) -> dict:
    from pdbgym.agent.executor import ExecutorConfig, run_jobs
    from pdbgym.agent.runner import run_job

    started = time.perf_counter()
    done = list(run_jobs(jobs, ExecutorConfig(workers=1, local_episodes=local, local_processes=processes), run_job))
    seconds = time.perf_counter() - started
    failed = [f"{d.job.instance_id}#{d.job.sample_idx}: {d.error!r}" for d in done if d.result is None]
    results = {(d.job.instance_id, d.job.sample_idx): d.result for d in done if d.result is not None}
    return {"processes": processes, "local": local, "episodes": len(results), "failed": failed,
            "seconds": round(seconds, 2), "episodes_per_minute": round(60 * len(results) / seconds, 2),
            "mean_episode_s": round(sum(r.wall_seconds for r in results.values()) / max(1, len(results)), 2),
            "solved": sum(bool(r.transcript["final_test_passed"]) for r in results.values()),
            "_results": results}


def tiny_model(folder: Path) -> str:
    """A random 1-layer Llama over the embedded tokenizer: each turn costs the host's work, not arithmetic."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pdbgym.agent.backends.embedded import load_embedded_tokenizer

    tokenizer = load_embedded_tokenizer()
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                                 tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default="embedded")
    parser.add_argument("--tiny", action="store_true", help="a random 1-layer model instead of --policy: host work only")
    parser.add_argument("--tasks", default="builtin")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--local", type=int, default=1)
    parser.add_argument("--processes", default="1,2", help="arms, comma-separated; the first is the baseline")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--turn-budget", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.policies import parse_policy
    from pdbgym.agent.runner import plan_jobs
    from pdbgym.env import EnvConfig
    from pdbgym.tasks.suites import resolve_tasks

    scratch = tempfile.TemporaryDirectory(prefix="pdbgym-bench-")
    policy = tiny_model(Path(scratch.name)) if args.tiny else args.policy
    sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    agent = AgentConfig(dataset="bench", max_context_tokens=4096, sampling=sampling)
    jobs = plan_jobs(resolve_tasks(args.tasks), args.runs, parse_policy(policy, device=args.device), agent,
                     EnvConfig(turn_budget=args.turn_budget), set(), seed=0)
    arms = [play(jobs, int(n), args.local) for n in args.processes.split(",")]
    base = arms[0]
    print(f"{len(jobs)} episodes of {'a random 1-layer model' if args.tiny else args.policy} on {args.device}, {args.local} at once a process, "
          f"os.cpu_count() {os.cpu_count()}")
    print("| processes | seconds | episodes a minute | mean episode s | solved | ratio | outcomes unlike the baseline |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for arm in arms:
        unlike = sum(arm["_results"][key].record.tokens != result.record.tokens
                     for key, result in base["_results"].items() if key in arm["_results"])
        arm["ids_unlike_baseline"] = unlike
        arm["ratio"] = round(arm["episodes_per_minute"] / base["episodes_per_minute"], 3)
        print(f"| {arm['processes']} | {arm['seconds']} | {arm['episodes_per_minute']} | {arm['mean_episode_s']} | "
              f"{arm['solved']}/{arm['episodes']} | {arm['ratio']}x | {unlike} |")
        if arm["failed"]:
            print("failed:", *arm["failed"][:5], sep="\n  ")
    if args.local == 1:
        assert all(arm["ids_unlike_baseline"] == 0 for arm in arms), "one episode at a time must draw the same ids"
    if args.json:
        args.json.write_text(json.dumps([{k: v for k, v in arm.items() if k != "_results"} for arm in arms], indent=1))


if __name__ == "__main__":
    main()
