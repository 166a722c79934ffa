"""``pdbgym cache build``: play tasks x runs with a policy and write a teacher cache (resumable)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


def cache_build_command(
    policy: str = typer.Option(..., help="scripted | embedded | a model folder | a server URL"),
    tasks: str = typer.Option("builtin", help="A suite name (builtin, regression) or a task folder"),
    runs: int = typer.Option(1, min=1, help="Samples per task (their _sample_idx is 0..runs-1)"),
    temperature: float = typer.Option(0.7, min=0.0, help="Sampling temperature (0 = greedy)"),
    top_p: float = typer.Option(1.0, min=0.0, max=1.0, help="Top-p nucleus mass"),
    out: Path = typer.Option(..., help="Cache folder to write (a rerun resumes it)"),
    dataset: str = typer.Option("pdbgym_builtin", help="Dataset name stored in every record"),
    workers: int = typer.Option(0, min=0, help="Parallel episodes (0: all cores; 1 for local models)"),
    max_new_tokens: int = typer.Option(512, min=1, help="Token cap of one model turn"),
    max_context_tokens: int = typer.Option(32768, min=64, help="Trajectory cap (tokens): ctx_overflow"),
    turn_budget: int = typer.Option(30, min=1, help="Tool calls per episode before 'budget'"),
    command_timeout_s: float = typer.Option(10.0, help="Seconds before a pdb command is interrupted"),
    seed: int | None = typer.Option(None, help="Base seed (each episode gets its own derived seed)"),
    tokenizer: str = typer.Option("embedded", help="Tokenizer for scripted policies and server URLs"),
    api: str = typer.Option("auto", help="Server protocol: auto | chat | sglang"),
    logprob_mode: str = typer.Option("raw", help="What a chat server's log-probs are: raw | tempered | processed"),
    tool_format: str | None = typer.Option(None, help="qwen3_xml | hermes | text (default: from the template)"),
    device: str = typer.Option("cpu", help="Device for local models (cpu, cuda)"),
    ray: bool = typer.Option(False, "--ray", help="Fan episodes over a Ray cluster"),
    ray_address: str | None = typer.Option(None, help="Ray cluster address (default: local)"),
    json_output: bool = typer.Option(False, "--json", help="Print a JSON summary"),
) -> None:
    """Build a teacher cache: manifest.json + one .pt per task, plus transcripts/."""
    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.policies import build_backend, load_tokenizer, parse_policy
    from pdbgym.agent.runner import completed_samples, default_workers, plan_jobs, run_all
    from pdbgym.env import EnvConfig
    from pdbgym.tasks.suites import resolve_tasks

    task_list = resolve_tasks(tasks)
    spec = parse_policy(policy, tokenizer=tokenizer, api=api, logprob_mode=logprob_mode, device=device,
                        tool_format=tool_format)
    # Build (and so check) the backend or tokenizer here, before any episode starts.
    vocab_source = build_backend(spec).tokenizer if spec.generates_tokens else load_tokenizer(spec.tokenizer)
    done = completed_samples(out, vocab_source)
    agent = AgentConfig(max_context_tokens=max_context_tokens, dataset=dataset,
                        sampling=SamplingParams(temperature, top_p, max_new_tokens, None))
    env = EnvConfig(turn_budget=turn_budget, command_timeout_s=command_timeout_s)
    jobs = plan_jobs(task_list, runs, spec, agent, env, done, seed)
    if workers == 0:
        workers = 1 if spec.kind in ("embedded", "path") else default_workers()
    started = time.perf_counter()
    reasons: Counter[str] = Counter()
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, disable=json_output) as progress:
        bar = progress.add_task("", total=len(jobs))

        def advance(result: Any) -> None:
            reasons[result.record["metadata"]["_termination_reason"]] += 1
            progress.update(bar, advance=1, description=f"{result.instance_id}#{result.sample_idx}")

        results = run_all(jobs, out, workers, use_ray=ray, ray_address=ray_address, on_result=advance)
    _report(out, len(done), results, reasons, time.perf_counter() - started, json_output)


def _report(out: Path, skipped: int, results: list[Any], reasons: Counter[str], seconds: float,
            json_output: bool) -> None:
    summary = {
        "out": str(out), "episodes_run": len(results), "episodes_skipped_already_done": skipped,
        "termination_reasons": dict(reasons), "solved": reasons.get("solved", 0), "wall_seconds": round(seconds, 2),
        "episodes_per_minute": round(60 * len(results) / seconds, 2) if results and seconds > 0 else None,
    }
    if json_output:
        print(json.dumps(summary))
        return
    table = Table(title=f"cache build -> {out}")
    table.add_column("field")
    table.add_column("value")
    for key, value in summary.items():
        table.add_row(key, str(value))
    Console().print(table)
