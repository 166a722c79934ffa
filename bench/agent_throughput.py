"""Agent throughput: episodes per minute, loop overhead per turn, embedded-model generation speed.

Figures (each with its baseline measured in the same run):
1. Scripted policy on the built-in tasks through ``pdbgym.agent.runner``: episodes/minute with one
   worker (baseline) and with all cores; ratio all-cores / one worker.
2. Loop overhead per turn: the agent loop (tokenizing actions, template deltas, the decode check)
   against the bare env stepping the same scripted actions (baseline); ratio and ms per turn.
3. Embedded SmolLM2-135M: generation tokens/s and the share of episode time in model vs environment,
   with KV-prefix reuse across turns against re-prefilling every turn (baseline).
4. Embedded start-up: loading the cached safetensors against de-quantizing the GGUF (baseline).

Usage: .venv/bin/python bench/agent_throughput.py [--runs 2] [--skip-embedded | --only-embedded]
       [--torch-threads N] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def episodes_per_minute(tasks, runs: int, workers: int) -> dict:
    from pdbgym.agent.executor import ExecutorConfig
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.policies import parse_policy
    from pdbgym.agent.runner import plan_jobs, run_all
    from pdbgym.env import EnvConfig

    jobs = plan_jobs(tasks, runs, parse_policy("scripted"), AgentConfig(dataset="bench"), EnvConfig(), set())
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        results = run_all(jobs, Path(out), ExecutorConfig(workers))
        seconds = time.perf_counter() - started
    solved = sum(r.record["metadata"]["_termination_reason"] == "solved" for r in results)
    return {"workers": workers, "episodes": len(results), "solved": solved, "seconds": round(seconds, 2),
            "episodes_per_minute": round(60 * len(results) / seconds, 2)}


def bare_env_seconds(task) -> tuple[float, int]:
    from pdbgym.agent.scripted import ScriptedPolicy
    from pdbgym.env import DebugEnv, EnvConfig

    started = time.perf_counter()
    with DebugEnv(task, EnvConfig()) as env:
        observation = env.reset()
        policy = ScriptedPolicy()
        policy.reset(task, observation)
        done = False
        while not done:
            observation, done, info = env.step(policy.next_action(observation))
    return time.perf_counter() - started, info["actions_used"]


def loop_seconds(task, tokenizer) -> tuple[float, int]:
    from pdbgym.agent.loop import AgentConfig, run_episode
    from pdbgym.agent.scripted import ScriptedPolicy
    from pdbgym.agent.turns import ActionPolicyTurns
    from pdbgym.env import DebugEnv, EnvConfig

    turns = ActionPolicyTurns(ScriptedPolicy(), tokenizer, "text", "scripted")
    started = time.perf_counter()
    outcome = asyncio.run(run_episode(task, turns, DebugEnv(task, EnvConfig()), AgentConfig()))
    return time.perf_counter() - started, outcome.record.metadata["actions_used"]


def loop_overhead(tasks, tokenizer, repeats: int) -> dict:
    bare = loop = 0.0
    turns = 0
    for _ in range(repeats):
        for task in tasks:  # interleaved so load drifts hit both arms alike
            seconds, actions = bare_env_seconds(task)
            bare += seconds
            seconds, loop_actions = loop_seconds(task, tokenizer)
            loop += seconds
            assert actions == loop_actions, "both arms must play the same actions"
            turns += actions
    return {"turns": turns, "bare_env_ms_per_turn": round(1000 * bare / turns, 2),
            "loop_ms_per_turn": round(1000 * loop / turns, 2),
            "overhead_ms_per_turn": round(1000 * (loop - bare) / turns, 2), "ratio_loop_over_bare": round(loop / bare, 3)}


def embedded_episodes(task, reuse_prefix: bool, max_new_tokens: int) -> dict:
    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.backends.embedded import load_embedded_backend
    from pdbgym.agent.backends.hf import HFBackend, pad_id
    from pdbgym.agent.loop import AgentConfig, run_episode
    from pdbgym.agent.turns import ModelTurns
    from pdbgym.engine import EngineSettings, LocalEngine
    from pdbgym.env import DebugEnv, EnvConfig

    loaded = load_embedded_backend()
    engine = LocalEngine(loaded.model, loaded.stops, pad_id(loaded.tokenizer), EngineSettings(reuse_prefix=reuse_prefix))
    backend = HFBackend(loaded.model, loaded.tokenizer, loaded.name, engine=engine)
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=max_new_tokens, seed=0)
    outcome = asyncio.run(run_episode(task, ModelTurns(backend, params), DebugEnv(task, EnvConfig(turn_budget=6)),
                                      AgentConfig(sampling=params)))
    generated = sum(outcome.record.loss_mask)
    return {"reuse_prefix": reuse_prefix, "generated_tokens": generated,
            "termination": outcome.record.termination_reason, "prompt_tokens": outcome.record.prompt_len,
            "model_seconds": round(outcome.model_seconds, 2), "env_seconds": round(outcome.env_seconds, 2),
            "tokens_per_second": round(generated / outcome.model_seconds, 2),
            "model_share_of_episode": round(outcome.model_seconds / outcome.wall_seconds, 3)}


def startup_seconds() -> dict:
    """Fresh processes: load from the safetensors cache, then de-quantize the GGUF into an empty home."""
    code = ("import time,os; t=time.perf_counter(); from pdbgym.agent.backends.embedded import load_embedded_backend; "
            "load_embedded_backend(); print(time.perf_counter()-t)")

    def run(home: str | None) -> float:
        env = dict(os.environ, **({"PDBGYM_HOME": home} if home else {}))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return float(out.stdout.strip().splitlines()[-1])

    cached = run(None)
    with tempfile.TemporaryDirectory() as empty_home:
        dequantize = run(empty_home)
    return {"cached_safetensors_s": round(cached, 2), "gguf_dequantize_s": round(dequantize, 2),
            "speedup": round(dequantize / cached, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs per built-in task for episodes/minute")
    parser.add_argument("--skip-embedded", action="store_true")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--torch-threads", type=int, default=0, help="0 keeps torch's default")
    parser.add_argument("--only-embedded", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    from pdbgym.agent.backends.embedded import load_embedded_tokenizer
    from pdbgym.tasks.suites import resolve_tasks

    tasks = resolve_tasks("builtin")
    cores = os.cpu_count() or 1
    figures: dict = {"machine": f"{cores} cores", "tasks": [t.instance_id for t in tasks]}
    if not args.only_embedded:
        one = episodes_per_minute(tasks, args.runs, 1)
        many = episodes_per_minute(tasks, args.runs, cores)
        figures["episodes_per_minute"] = {"one_worker": one, "all_cores": many,
                                          "ratio_all_cores_over_one": round(many["episodes_per_minute"]
                                                                            / one["episodes_per_minute"], 2)}
        figures["loop_overhead"] = loop_overhead(tasks, load_embedded_tokenizer(), repeats=1)
    if not args.skip_embedded:
        figures["torch_threads"] = __import__("torch").get_num_threads()
        figures["startup"] = startup_seconds()
        reuse = embedded_episodes(tasks[0], True, args.max_new_tokens)
        fresh = embedded_episodes(tasks[0], False, args.max_new_tokens)
        figures["embedded"] = {"reuse_prefix": reuse, "reprefill_every_turn": fresh,
                               "ratio_tokens_per_s_reuse_over_reprefill": round(
                                   reuse["tokens_per_second"] / fresh["tokens_per_second"], 2)}
    print(json.dumps(figures, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
