"""``pdbgym run`` (one episode) and ``pdbgym cache build`` (tasks x runs into a teacher cache).

Each command's flags are its config's fields (``RunConfig``, ``CacheBuildConfig``), with the help and default
declared there (``pdbgym.commandapp.config_command``), then ``--json``, which is no setting of the work; each
calls one library function and prints what it returned.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pdbgym.agent.build import CacheBuildConfig, CacheBuildSummary
from pdbgym.agent.executor import LOCAL_RAY
from pdbgym.agent.play import RunConfig
from pdbgym.commandapp import config_command
from pdbgym.env.environment import EpisodeResult
from pdbgym.progress import progress


@config_command(RunConfig)
def run_command(config: RunConfig,
                as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON")] = False) -> None:
    """Run one episode and print its outcome."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.agent.play import run_one

    result, target = run_one(config)
    if as_json:
        print(json.dumps({**result.to_dict(), "transcript": str(target)}, indent=2))
        return
    console = Console()
    console.print(outcome_table([result], f"{config.policy} on {result.instance_id}"))
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


@config_command(CacheBuildConfig)
def cache_build_command(
    config: CacheBuildConfig,
    json_output: Annotated[bool, typer.Option("--json", help="Print a JSON summary")] = False,
    ray: Annotated[bool, typer.Option("--ray", hidden=True)] = False,  # the old spelling of --ray-address local
) -> None:
    """Build a teacher cache: manifest.json + one .pt per task, plus transcripts/."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.agent.build import build_cache

    if ray and config.ray_address is None:
        config = replace(config, ray_address=LOCAL_RAY)
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
