"""``pdbgym run`` (one episode) and ``pdbgym cache build`` (tasks x runs into a teacher cache).

Each command parses its flags into a config (``RunConfig``, ``CacheBuildConfig``, whose defaults
the flags read), calls one library function and prints what it returned.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.build import CacheBuildConfig, CacheBuildSummary
from pdbgym.agent.play import RunConfig
from pdbgym.defaults import defaults_of, pick
from pdbgym.env.environment import EnvConfig, EpisodeResult
from pdbgym.episode_defaults import EpisodeSettings
from pdbgym.progress import progress

B, E, S, R = defaults_of(CacheBuildConfig), defaults_of(EnvConfig), defaults_of(SamplingParams), defaults_of(RunConfig)
POLICY_HELP = "scripted | embedded | a model folder | a server URL"


def run_command(
    task: Annotated[str, typer.Option("--task", help="A built-in task id or a task folder")],
    policy: Annotated[str, typer.Option(help="scripted (reference patch), human (you, at the terminal), "
                                        "embedded, a model folder, or a server URL")] = R.policy,
    turn_budget: Annotated[int, typer.Option(help="Tool calls per episode before 'budget'")] = E.turn_budget,
    transcript: Annotated[Path | None, typer.Option(help="Where to write the JSON transcript")] = None,
    sandbox: Annotated[str, typer.Option(help="auto, bwrap or plain")] = E.sandbox,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON")] = False,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of a model policy")] = S.temperature,
    max_new_tokens: Annotated[int, typer.Option(help="Token cap of one model turn")] = S.max_new_tokens,
    seed: Annotated[int | None, typer.Option(help="Base seed (the episode samples with its derived seed)")] = R.seed,
    budget: Annotated[int | None, typer.Option("--budget", hidden=True)] = None,
) -> None:
    """Run one episode and print its outcome."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.agent.play import run_one

    env = EnvConfig(turn_budget=pick(turn_budget, budget), sandbox=sandbox)
    sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    result, target = run_one(RunConfig(task, policy, env, sampling, transcript, seed))
    if as_json:
        print(json.dumps({**result.to_dict(), "transcript": str(target)}, indent=2))
        return
    console = Console()
    console.print(outcome_table([result], f"{policy} on {result.instance_id}"))
    console.print(f"transcript: {target}")
    if result.grading.get("output") and not result.final_test_passed:
        console.print(result.grading["output"][-2000:], markup=False)


def outcome_table(results: list[EpisodeResult], title: str) -> Table:
    table = Table(title=title)
    for column in ("task", "outcome", "final_test_passed", "actions", "seconds"):
        table.add_column(column)
    for r in results:
        style = "green" if r.final_test_passed else "red"
        table.add_row(r.instance_id, r.termination_reason, f"[{style}]{r.final_test_passed}[/]",
                      str(r.actions_used), f"{r.duration_s:.2f}")
    return table


def cache_build_command(
    policy: Annotated[str, typer.Option(help=POLICY_HELP)],
    out: Annotated[Path, typer.Option(help="Cache folder to write (a rerun resumes it)")],
    tasks: Annotated[str, typer.Option(help="A suite name (builtin, regression) or a task folder")] = B.tasks,
    runs: Annotated[int, typer.Option(help="Samples per task (their _sample_idx is 0..runs-1)")] = B.runs,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0 = greedy)")] = B.temperature,
    top_p: Annotated[float, typer.Option(help="Top-p nucleus mass, in (0, 1]")] = B.top_p,
    dataset: Annotated[str, typer.Option(help="Dataset name stored in every record")] = B.dataset,
    workers: Annotated[int, typer.Option(min=0, help="Parallel episodes (0: all cores; local models: --local-episodes)")] = B.workers,
    local_episodes: Annotated[int, typer.Option(min=0, help="Local-model episodes at once, turns batched (0: 48 on a GPU, 1 on CPU)")] = B.local_episodes,
    max_new_tokens: Annotated[int, typer.Option(help="Token cap of one model turn")] = B.max_new_tokens,
    max_context_tokens: Annotated[int, typer.Option(help="Trajectory cap (tokens): ctx_overflow")] = B.max_context_tokens,
    turn_budget: Annotated[int, typer.Option(help="Tool calls per episode before 'budget'")] = B.turn_budget,
    command_timeout_s: Annotated[float, typer.Option(help="Seconds before a pdb command is interrupted")] = B.command_timeout_s,
    seed: Annotated[int | None, typer.Option(help="Base seed (each episode gets its own derived seed)")] = B.seed,
    tokenizer: Annotated[str, typer.Option(help="Tokenizer for scripted policies and server URLs")] = B.tokenizer,
    api: Annotated[str, typer.Option(help="Server protocol: auto | chat | sglang")] = B.api,
    logprob_mode: Annotated[str, typer.Option(help="What a chat server's log-probs are: raw | tempered | processed")] = B.logprob_mode,
    tool_format: Annotated[str | None, typer.Option(help="qwen3_xml | hermes | text (default: from the template)")] = B.tool_format,
    device: Annotated[str, typer.Option(help="Device for local models (cpu, cuda)")] = B.device,
    ray_address: Annotated[str | None, typer.Option(help="Fan episodes over Ray at this address ('local' starts one here)")] = B.ray_address,
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON summary")] = False,
    ray: Annotated[bool, typer.Option("--ray", hidden=True)] = False,
) -> None:
    """Build a teacher cache: manifest.json + one .pt per task, plus transcripts/."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.agent.build import build_cache

    episode = EpisodeSettings(max_context_tokens=max_context_tokens, turn_budget=turn_budget, temperature=temperature,
                              top_p=top_p, max_new_tokens=max_new_tokens)
    config = CacheBuildConfig(
        policy=policy, out=out, tasks=tasks, runs=runs, episode=episode, dataset=dataset,
        workers=workers, local_episodes=local_episodes,
        command_timeout_s=command_timeout_s, seed=seed, tokenizer=tokenizer, api=api, logprob_mode=logprob_mode,
        tool_format=tool_format, device=device, ray_address=ray_address or ("local" if ray else None))
    with progress(Console(stderr=True), disable=json_output) as bars:
        bar = bars.add_task("episodes", total=None)
        summary = build_cache(
            config, on_result=lambda r, _total: bars.update(bar, advance=1, description=f"episodes, last {r.instance_id}#{r.sample_idx}"),
            on_plan=lambda done, todo: bars.update(bar, total=done + todo, completed=done))
    _report(summary, json_output)


def _report(summary: CacheBuildSummary, json_output: bool) -> None:
    if json_output:
        print(json.dumps(summary))
        return
    table = Table(title=f"cache build -> {summary['out']}")
    table.add_column("field")
    table.add_column("value")
    for key, value in summary.items():
        table.add_row(key, str(value))
    Console().print(table)
