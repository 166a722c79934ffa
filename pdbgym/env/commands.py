"""`pdbgym run` (one episode) and `pdbgym demo` (the main job on the embedded default)."""

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


def demo_command(
    out: Annotated[Path, typer.Option(help="Folder for transcripts")] = Path("runs/demo"),
) -> None:
    """Validate the built-in tasks, then run the scripted policy on each, printing a table of outcomes."""
    from pdbgym.agent.scripted import ScriptedPolicy
    from pdbgym.env.runner import run_episode
    from pdbgym.sandbox import get_sandbox
    from pdbgym.tasks.suites import resolve_tasks
    from pdbgym.tasks.validate import validate_tasks

    tasks = resolve_tasks("builtin")
    box = get_sandbox()
    with console.status(f"validating {len(tasks)} built-in tasks ({box.name} sandbox)"):
        reports = validate_tasks(tasks, sandbox=box)
    bad = [r for r in reports if not r.ok]
    console.print(f"validated {len(reports) - len(bad)}/{len(reports)} built-in tasks")
    for r in bad:
        console.print(f"[red]{r.instance_id}[/]: {'; '.join(r.problems)}")
    results = []
    with console.status("running the scripted policy") as status:
        for task in tasks:
            status.update(f"scripted policy on {task.instance_id}")
            results.append(run_episode(task, ScriptedPolicy(task), sandbox=box,
                                       transcript_path=out / f"{task.instance_id}.json"))
    console.print(outcome_table(results, "scripted policy on the built-in tasks"))
    solved = sum(r.final_test_passed for r in results)
    console.print(f"solved {solved}/{len(results)}; transcripts in {out}/")
    if bad or solved < len(results):
        raise typer.Exit(1)
