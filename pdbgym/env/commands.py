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
    policy: Annotated[str, typer.Option(help="scripted (reference patch), human (you, at the terminal), "
                                        "embedded, a model folder, or a server URL")] = "scripted",
    budget: Annotated[int, typer.Option(help="Turn budget")] = 30,
    transcript: Annotated[Path | None, typer.Option(help="Where to write the JSON transcript")] = None,
    sandbox: Annotated[str, typer.Option(help="auto, bwrap or plain")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON")] = False,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of a model policy")] = 0.7,
    max_new_tokens: Annotated[int, typer.Option(help="Token cap of one model turn")] = 512,
) -> None:
    """Run one episode and print its outcome."""
    from pdbgym.agent.play import play_episode
    from pdbgym.env.environment import EnvConfig
    from pdbgym.tasks.suites import resolve_task

    the_task = resolve_task(task)
    target = transcript or Path("runs") / "episodes" / f"{the_task.instance_id}-{int(time.time())}.json"
    result = play_episode(the_task, policy, EnvConfig(turn_budget=budget, sandbox=sandbox), target,
                          temperature=temperature, max_new_tokens=max_new_tokens)
    if as_json:
        print(json.dumps({**result.to_dict(), "transcript": str(target)}, indent=2))
        return
    console.print(outcome_table([result], f"{policy} on {the_task.instance_id}"))
    console.print(f"transcript: {target}")
    if result.grading.get("output") and not result.final_test_passed:
        console.print(result.grading["output"][-2000:], markup=False)
