"""`pdbgym eval ...`: campaigns, planning, checkpoint selection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

app = typer.Typer(no_args_is_help=False, invoke_without_command=True)
console = Console()


def _campaign(tasks_spec: str, split: str | None, splits: Path | None, arm_texts: list[str], runs: int,
              out: Path, budget: int, temperature: float, workers: int, force: bool, json_out: Path | None,
              title: str, *, max_new_tokens: int = 512, context_tokens: int = 8192,
              ray_address: str | None = None, ks: list[int] | None = None) -> Path:
    from pdbgym.evaluate.analysis import summarize
    from pdbgym.evaluate.campaign import Arm, CampaignConfig, run_campaign
    from pdbgym.evaluate.report import write_report
    from pdbgym.evaluate.selection import check_reportable
    from pdbgym.evaluate.splitsel import tasks_for_split

    too_big = [k for k in ks or [] if k > runs or k < 1]
    if too_big:
        raise typer.BadParameter(f"pass@{too_big[0]} needs at least {too_big[0]} runs per task; "
                                 f"raise --runs to {max(too_big)} or drop --k {too_big[0]}")
    arms = [Arm.parse(text) for text in arm_texts]
    if len({a.name for a in arms}) != len(arms):
        raise typer.BadParameter("arm names must be unique")
    tasks = tasks_for_split(tasks_spec, split, splits)
    warnings = check_reportable([a.model for a in arms], [t.instance_id for t in tasks], force=force)
    config = CampaignConfig(tasks=tasks_spec, arms=arms, runs=runs, split=split,
                            splits_file=str(splits) if splits else None, turn_budget=budget, temperature=temperature,
                            max_new_tokens=max_new_tokens, context_tokens=context_tokens)
    if ray_address is not None and workers == 0:
        workers = 64  # episodes in flight on the cluster; threads here only wait on them
    total = len(tasks) * runs * len(arms)
    solved: dict[str, int] = {a.name: 0 for a in arms}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True)) as progress:
        bar = progress.add_task("episodes", total=total)

        def tick(row) -> None:  # noqa: ANN001
            solved[row.arm] += int(row.final_test_passed)
            progress.update(bar, advance=1, description="solved " + ", ".join(f"{k}={v}" for k, v in solved.items()))

        rows = run_campaign(config, tasks, out, workers=workers or None, on_episode=tick, ray_address=ray_address)
        progress.update(bar, completed=len(rows))
    summary = summarize(rows, {a.name: a.model for a in arms}, [t.instance_id for t in tasks], runs)
    summary["selection_warnings"] = [w.text() for w in warnings]
    summary["expected_selection_inflation"] = {w.model: w.expected_inflation for w in warnings}
    page = write_report(summary, rows, out, title, json_out)
    for w in warnings:
        console.print(f"[bold yellow]warning:[/] {w.text()}")
    return page


@app.callback()
def eval_command(
    ctx: typer.Context,
    tasks: Annotated[str, typer.Option(help="A suite (builtin, regression) or a folder of tasks")] = "builtin",
    arm: Annotated[list[str] | None, typer.Option(help="NAME=MODEL; MODEL: scripted, embedded, a folder, a URL")] = None,
    runs: Annotated[int, typer.Option(help="Runs per task per arm")] = 2,
    split: Annotated[str | None, typer.Option(help="Only tasks of this split (needs --splits)")] = None,
    splits: Annotated[Path | None, typer.Option(help="Split file (pdbgym tasks split)")] = None,
    out: Annotated[Path, typer.Option(help="Campaign folder (resumable)")] = Path("runs/eval"),
    budget: Annotated[int, typer.Option(help="Turn budget per episode")] = 30,
    temperature: Annotated[float, typer.Option(help="Sampling temperature of model arms")] = 0.7,
    workers: Annotated[int, typer.Option(help="Episodes at once (0: one per core)")] = 0,
    force: Annotated[bool, typer.Option(help="Report even on a split that selected a checkpoint")] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write a machine summary here")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Token cap of one model turn")] = 512,
    context_tokens: Annotated[int, typer.Option(help="Trajectory cap in tokens (then ctx_overflow)")] = 8192,
    ray: Annotated[str | None, typer.Option("--ray", help="Ray cluster address ('local' starts one here)")] = None,
    k: Annotated[list[int] | None, typer.Option("--k", help="pass@k values that must be reportable (k <= runs)")] = None,
) -> None:
    """Run an evaluation campaign: every task x run x arm is an episode; resumable; ends in a report."""
    if ctx.invoked_subcommand is not None:
        return
    if not arm:
        raise typer.BadParameter("give at least one --arm NAME=MODEL")
    page = _campaign(tasks, split, splits, arm, runs, out, budget, temperature, workers, force, json_out,
                     f"pdbgym evaluation: {tasks}" + (f" ({split})" if split else ""),
                     max_new_tokens=max_new_tokens, context_tokens=context_tokens, ray_address=ray, ks=k)
    console.print(f"report: {page}")


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
    from pdbgym.evaluate.planning import plan

    result = plan(delta, runs=runs, base_rate=base_rate, sd_diff=sd_diff, pilot=pilot, alpha=alpha, power=power)
    console.print_json(json.dumps(result))


@app.command("select")
def select_command(
    checkpoints: Annotated[list[str], typer.Option("--checkpoint", help="NAME=MODEL, repeat for each candidate")],
    splits: Annotated[Path, typer.Option(help="Split file")],
    tasks: Annotated[str, typer.Option(help="Suite or folder holding the split's tasks")] = "builtin",
    select_on: Annotated[str, typer.Option(help="Split used to choose")] = "val",
    report_on: Annotated[str, typer.Option(help="Split the chosen checkpoint is measured on, once")] = "test",
    runs: Annotated[int, typer.Option(help="Runs per task")] = 2,
    out: Annotated[Path, typer.Option(help="Folder for both campaigns")] = Path("runs/select"),
    budget: Annotated[int, typer.Option(help="Turn budget per episode")] = 30,
    force: Annotated[bool, typer.Option(help="Allow --report-on equal to --select-on (biased!)")] = False,
) -> None:
    """Choose a checkpoint on one split, then measure the chosen one once on another."""
    from pdbgym.evaluate.analysis import summarize
    from pdbgym.evaluate.campaign import Arm
    from pdbgym.evaluate.results import ResultsStore
    from pdbgym.evaluate.selection import record_selection
    from pdbgym.evaluate.splitsel import tasks_for_split

    if select_on == report_on and not force:
        raise typer.BadParameter(f"--report-on {report_on} is the selection split; choose a held-out split "
                                 "(or --force to accept a biased number)")
    arms = [Arm.parse(c) for c in checkpoints]
    tasks_for_split(tasks, report_on, splits)  # an empty or unknown report split fails before any episode
    _campaign(tasks, select_on, splits, checkpoints, runs, out / f"select-{select_on}", budget, 0.7, 0, True, None,
              f"checkpoint selection on {select_on}")
    val_tasks = [t.instance_id for t in tasks_for_split(tasks, select_on, splits)]
    rows = ResultsStore(out / f"select-{select_on}").rows()
    summary = summarize(rows, [a.name for a in arms], val_tasks, runs)
    scores = {a.model: summary["arm_results"][a.name]["pass@1"]["mean"] for a in arms}
    ses = [summary["arm_results"][a.name]["pass@1"]["se"] for a in arms]
    selection = record_selection(select_on, val_tasks, scores, float(sum(ses) / len(ses)))
    chosen = next(a for a in arms if a.model == selection.chosen)
    console.print(f"chose {chosen.name} ({100 * scores[chosen.model]:.1f}% pass@1 on {select_on})")
    page = _campaign(tasks, report_on, splits, [f"{chosen.name}={chosen.model}"], runs, out / f"report-{report_on}",
                     budget, 0.7, 0, force, None, f"selected checkpoint {chosen.name} on {report_on}")
    console.print(f"report: {page}")


def demo_command(
    out: Annotated[Path, typer.Option(help="Campaign folder (a rerun resumes it)")] = Path("runs/demo"),
    runs: Annotated[int, typer.Option(help="Runs per task per arm")] = 2,
    tasks: Annotated[str, typer.Option(help="Suite or folder of tasks")] = "builtin",
    budget: Annotated[int, typer.Option(help="Turn budget per episode")] = 12,
    max_new_tokens: Annotated[int, typer.Option(help="Token cap of one model turn")] = 32,
) -> None:
    """The main job: the embedded SmolLM2-135M-Instruct and the scripted policy, evaluated on the built-in
    tasks (2 runs each, CPU), ending in a report."""
    import torch

    # The model shares two cores with sandboxed pytest runs; one torch thread avoids oversubscription.
    torch.set_num_threads(1)
    page = _campaign(tasks, None, None, ["embedded=embedded", "scripted=scripted"], runs, out, budget, 0.7,
                     3, False, out / "summary-machine.json", f"pdbgym demo: embedded vs scripted on {tasks}",
                     max_new_tokens=max_new_tokens, context_tokens=8192)
    console.print(f"report: {page}  (also {page.with_suffix('.md')})")


@app.command("report")
def report_command(
    out: Annotated[Path, typer.Argument(help="A campaign folder")],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write a machine summary here")] = None,
) -> None:
    """Rebuild the report of a campaign folder from its episodes (e.g. of one still running)."""
    from pdbgym.evaluate.analysis import summarize
    from pdbgym.evaluate.report import write_report
    from pdbgym.evaluate.results import ResultsStore

    store = ResultsStore(out)
    config = store.config()
    rows = store.rows()
    summary = summarize(rows, config["arms"], config["task_ids"], config["runs"])
    page = write_report(summary, rows, out, f"pdbgym evaluation: {config['tasks']}", json_out)
    console.print(f"report: {page}")
