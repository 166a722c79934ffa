"""``pdbgym cache build``: play tasks x runs with a policy and write a teacher cache (resumable)."""

from __future__ import annotations

import json
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
    from pdbgym.agent.build import CacheBuildConfig, build_cache

    config = CacheBuildConfig(policy=policy, tasks=tasks, runs=runs, temperature=temperature, top_p=top_p,
                              out=out, dataset=dataset, workers=workers, max_new_tokens=max_new_tokens,
                              max_context_tokens=max_context_tokens, turn_budget=turn_budget,
                              command_timeout_s=command_timeout_s, seed=seed, tokenizer=tokenizer, api=api,
                              logprob_mode=logprob_mode, tool_format=tool_format, device=device, ray=ray,
                              ray_address=ray_address)
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]episodes"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, disable=json_output) as progress:
        bar = progress.add_task("", total=None)

        def advance(result: Any, total: int) -> None:
            progress.update(bar, advance=1, total=total, description=f"{result.instance_id}#{result.sample_idx}")

        summary = build_cache(config, on_result=advance)
    _report(summary, json_output)


def _report(summary: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print(json.dumps(summary))
        return
    table = Table(title=f"cache build -> {summary['out']}")
    table.add_column("field")
    table.add_column("value")
    for key, value in summary.items():
        table.add_row(key, str(value))
    Console().print(table)
