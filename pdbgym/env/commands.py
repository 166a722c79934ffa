"""`pdbgym run`: one episode of a policy on a task."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def _policy(name: str, task):  # noqa: ANN001, ANN202 - small factory
    from pdbgym.agent.human import HumanPolicy
    from pdbgym.agent.scripted import ScriptedPolicy
    from pdbgym.errors import PdbgymError

    if name == "scripted":
        return ScriptedPolicy(task)
    if name == "human":
        return HumanPolicy()
    raise PdbgymError(f"unknown policy '{name}': use 'scripted' or 'human' (model policies: pdbgym eval / cache build)")


def outcome_table(results: list, title: str) -> Table:
    table = Table(title=title)
    for column in ("task", "outcome", "final_test_passed", "actions", "seconds"):
        table.add_column(column)
    for r in results:
        style = "green" if r.final_test_passed else "red"
        table.add_row(r.instance_id, r.termination_reason, f"[{style}]{r.final_test_passed}[/]",
                      str(r.actions_used), f"{r.duration_s:.2f}")
    return table


def run_command(
    task: Annotated[str, typer.Option("--task", help="A built-in task id or a task folder")],
    policy: Annotated[str, typer.Option(help="scripted (reference patch) or human (you, at the terminal)")] = "scripted",
    budget: Annotated[int, typer.Option(help="Turn budget")] = 30,
    transcript: Annotated[Path | None, typer.Option(help="Where to write the JSON transcript")] = None,
    sandbox: Annotated[str, typer.Option(help="auto, bwrap or plain")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON")] = False,
) -> None:
    """Run one episode and print its outcome."""
    from pdbgym.env.environment import EnvConfig
    from pdbgym.env.runner import run_episode
    from pdbgym.tasks.suites import resolve_task

    the_task = resolve_task(task)
    target = transcript or Path("runs") / "episodes" / f"{the_task.instance_id}-{int(time.time())}.json"
    result = run_episode(the_task, _policy(policy, the_task), EnvConfig(turn_budget=budget, sandbox=sandbox),
                         transcript_path=target)
    if as_json:
        print(json.dumps({**result.to_dict(), "transcript": str(target)}, indent=2))
        return
    console.print(outcome_table([result], f"{policy} on {the_task.instance_id}"))
    console.print(f"transcript: {target}")
    if result.grading.get("output") and not result.final_test_passed:
        console.print(result.grading["output"][-2000:], markup=False)
