"""`pdbgym eval ...`: campaigns, planning, checkpoint selection (`pdbgym demo` lives in ``train.demo.commands``).

``eval``'s and ``eval select``'s flags are their configs' fields (``EvalConfig``, ``SelectConfig``), with the help
and default declared there (``pdbgym.commandapp.config_command``); each command calls one library function
(``pdbgym.evaluate.procedures``) and prints.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import TaskID

from pdbgym.commandapp import command_app, config_command
from pdbgym.evaluate.procedures import EvalConfig, SelectConfig
from pdbgym.evaluate.results import EpisodeRow
from pdbgym.progress import TaskSet, progress

app = command_app(no_args_is_help=False, invoke_without_command=True)
console = Console()


class EpisodeProgress:
    """Episodes done of the campaign's total, and solves per arm: a bar on a terminal, timed lines when piped."""

    def __init__(self, bars: TaskSet, where: Path | None = None, console: Console | None = None) -> None:
        self.bars = bars
        self.bar: TaskID | None = None
        self.solved: dict[str, int] = {}
        self.where, self.console = where, console or Console(stderr=True)

    def plan(self, already_done: int, to_play: int) -> None:
        """A campaign starts (``eval select`` runs two): its own line, counting from what it already holds.

        A resumed campaign says so first, and its bar starts at the episodes already done.
        """
        total = already_done + to_play
        if already_done:
            place = f" in {self.where}" if self.where is not None else ""
            self.console.print(f"resuming: {already_done} of {total} episodes already{place}",
                               markup=False, highlight=False, soft_wrap=True)
        self.bar = self.bars.add_task("episodes", total=total, completed=already_done)

    def tick(self, row: EpisodeRow) -> None:
        self.solved[row.arm] = self.solved.get(row.arm, 0) + int(row.final_test_passed)
        if self.bar is None:
            self.plan(0, 0)
        self.bars.update(self.bar, advance=1,
                         description="episodes, solved " + ", ".join(f"{k}={v}" for k, v in self.solved.items()))


@contextmanager
def episode_progress(where: Path | None = None) -> Iterator[EpisodeProgress]:
    """Progress of a command's campaigns on stderr (``pdbgym.progress``: a line at least every 30 s when piped).

    ``where``: the campaign folder a resumed campaign names in its "resuming" line.
    """
    progress_console = Console(stderr=True)
    with progress(progress_console) as bars:
        yield EpisodeProgress(bars, where, progress_console)


@app.callback()
@config_command(EvalConfig)
def eval_command(config: EvalConfig, ctx: typer.Context) -> None:
    """Run an evaluation campaign: every task x run x arm is an episode; resumable; ends in a report."""
    # ``ctx`` tells config_command this is the group's callback: it runs only when no subcommand does
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.evaluate.procedures import run_evaluation

    with episode_progress(config.out) as shown:
        outcome = run_evaluation(config, shown.tick, shown.plan)
    for warning in outcome.warnings:
        console.print(f"[bold yellow]warning:[/] {warning.text()}")
    console.print(f"report: {outcome.page}")


@app.command("plan")
def plan_command(
    delta: Annotated[float, typer.Option(help="Difference in solve rate to detect (0..1)")],
    runs: Annotated[int, typer.Option(help="Runs per task per arm")] = 8,
    base_rate: Annotated[float, typer.Option(help="Expected solve rate of the weaker arm")] = 0.5,
    sd_diff: Annotated[float | None, typer.Option(help="sd of per-task differences, if known (e.g. from a pilot)")] = None,
    pilot: Annotated[Path | None, typer.Option(help="A finished campaign folder to estimate sd from")] = None,
    alpha: Annotated[float, typer.Option(help="Two-sided significance level")] = 0.05,
    power: Annotated[float, typer.Option(help="Power")] = 0.8,
) -> None:
    """Size a campaign: tasks needed to detect a difference of --delta between two arms."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.evaluate.planning import plan

    result = plan(delta, runs=runs, base_rate=base_rate, sd_diff=sd_diff, pilot=pilot, alpha=alpha, power=power)
    console.print_json(json.dumps(result))


@app.command("select")
@config_command(SelectConfig)
def select_command(config: SelectConfig) -> None:
    """Choose a checkpoint on one split, then measure the chosen one once on another."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.evaluate.procedures import select_checkpoint

    with episode_progress(config.out) as shown:
        outcome = select_checkpoint(config, shown.tick, shown.plan)
    select_on = config.select_on
    console.print(f"chose {outcome.chosen.name} ({100 * outcome.score:.1f}% pass@1 on {select_on})")
    if outcome.tied_with:
        console.print(f"[bold yellow]tie:[/] {', '.join(outcome.tied_with)} scored the same on {select_on}; "
                      f"{outcome.chosen.name} was chosen as the first --checkpoint given, not as better")
    console.print(f"report: {outcome.page}")


@app.command("report")
def report_command(
    out: Annotated[Path, typer.Argument(help="A campaign folder")],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write a machine summary here")] = None,
) -> None:
    """Rebuild the report of a campaign folder from its episodes (e.g. of one still running)."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.evaluate.procedures import rebuild_report

    console.print(f"report: {rebuild_report(out, json_out)}")
