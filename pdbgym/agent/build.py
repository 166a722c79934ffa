"""Building a teacher cache: tasks x runs played by a policy, written as the teacher-cache format.

Every check that can fail (the policy, the model or server, the cache's vocabulary) runs before the
first episode. Finished episodes are appended as they land, so a rerun resumes where a run stopped.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class CacheBuildConfig:
    """What ``pdbgym cache build`` takes. ``workers`` 0: one for local models, else all cores."""

    policy: str
    out: Path
    tasks: str = "builtin"
    runs: int = 1
    temperature: float = 0.7
    top_p: float = 1.0
    dataset: str = "pdbgym_builtin"
    workers: int = 0
    max_new_tokens: int = 512
    max_context_tokens: int = 32768
    turn_budget: int = 30
    command_timeout_s: float = 10.0
    seed: int | None = None
    tokenizer: str = "embedded"
    api: str = "auto"
    logprob_mode: str = "raw"
    tool_format: str | None = None
    device: str = "cpu"
    ray: bool = False
    ray_address: str | None = None


def build_cache(config: CacheBuildConfig, on_result: Callable[[Any, int], None] | None = None) -> dict[str, Any]:
    """Play every missing (task, sample) and append it to ``config.out``; return a summary dict."""
    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.policies import build_backend, load_tokenizer, parse_policy
    from pdbgym.agent.runner import completed_samples, default_workers, plan_jobs, run_all
    from pdbgym.env import EnvConfig
    from pdbgym.sandbox.workspace import reap_stale_workspaces
    from pdbgym.tasks.suites import resolve_tasks

    reap_stale_workspaces()  # workspaces a killed earlier build left in the temp folder
    task_list = resolve_tasks(config.tasks)
    spec = parse_policy(config.policy, tokenizer=config.tokenizer, api=config.api,
                        logprob_mode=config.logprob_mode, device=config.device, tool_format=config.tool_format)
    # Build (and so check) the backend or tokenizer here, before any episode starts.
    vocab_source = build_backend(spec).tokenizer if spec.generates_tokens else load_tokenizer(spec.tokenizer)
    done = completed_samples(config.out, vocab_source)
    agent = AgentConfig(max_context_tokens=config.max_context_tokens, dataset=config.dataset,
                        sampling=SamplingParams(config.temperature, config.top_p, config.max_new_tokens, None))
    env = EnvConfig(turn_budget=config.turn_budget, command_timeout_s=config.command_timeout_s)
    jobs = plan_jobs(task_list, config.runs, spec, agent, env, done, config.seed)
    workers = config.workers or (1 if spec.kind in ("embedded", "path") else default_workers())
    started = time.perf_counter()
    reasons: Counter[str] = Counter()

    def advance(result: Any) -> None:
        reasons[result.record["metadata"]["_termination_reason"]] += 1
        if on_result is not None:
            on_result(result, len(jobs))

    results = run_all(jobs, config.out, workers, use_ray=config.ray, ray_address=config.ray_address,
                      on_result=advance)
    seconds = time.perf_counter() - started
    return {
        "out": str(config.out), "episodes_run": len(results), "episodes_skipped_already_done": len(done),
        "termination_reasons": dict(reasons), "solved": reasons.get("solved", 0), "wall_seconds": round(seconds, 2),
        "episodes_per_minute": round(60 * len(results) / seconds, 2) if results and seconds > 0 else None,
    }
