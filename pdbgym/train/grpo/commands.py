"""`pdbgym train grpo` and `pdbgym train report`: command functions mounted by ``pdbgym.train.commands``.

``grpo``'s flags are ``GRPORunConfig``'s fields, each with the help and default declared there
(``config_command``), then ``--keep-episodes`` and ``--json``, which are no settings of the run. It shows
every phase as progress (``grpo.progress``), keeps each episode's transcript under ``OUT/episodes/`` and
writes the training report (``grpo.report``) when the run ends, also when it fails.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pdbgym.commandapp import config_command
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.grpo.records import GRPORunRecord, PausedRun
from pdbgym.train.records import LogRow

console = Console(stderr=True)


@config_command(GRPORunConfig)
def grpo(
    config: GRPORunConfig,
    keep_episodes: Annotated[bool, typer.Option(help="write every episode's transcript under OUT/episodes/")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="print the run record as JSON")] = False,
) -> None:
    """GRPO over a frozen SFT adapter with a fresh DoRA delta, on pdbgym episodes (see docs/training.md)."""
    if config.kl_mode == "adaptive" and _main_process():
        # the command's code loads when it runs: every other command starts without it
        from pdbgym.train.grpo.schedules import AdaptiveKLController

        # bad settings: refused before any work
        leash = AdaptiveKLController(config.beta, config.target_kl, config.kl_horizon_steps)
        console.print(f"adaptive KL leash: beta {config.beta:g} toward KL {config.target_kl:g} nats/token, moving "
                      f"at most {leash.max_step_change:.1%} a step (--kl-horizon-steps {config.kl_horizon_steps})")

    def show(row: LogRow) -> None:
        console.print(f"step {row['step']}: reward {row.get('reward', 0):.3f}  kl {row.get('kl', 0):.4f}  "
                      f"beta {row.get('beta', 0):.4f}  turn budget {int(row.get('turn_budget', 0))}")

    record = _train_with_progress(config, show, keep_episodes)
    if not _main_process():
        return  # every process returns the same record: one prints it
    if record.get("warning"):
        console.print(f"[yellow]warning[/]: {record['warning']}")
    if json_out:
        typer.echo(json.dumps(record, indent=2, sort_keys=True))
    elif record.get("paused"):
        console.print(f"[bold yellow]paused[/]: step {record['steps']} of {record['max_steps']} saved and gated "
                      "(--pause-after-minutes); run again with --resume to go on")
    elif record["store_id"] is None:
        console.print(f"[bold yellow]done[/]: {record['steps']} steps; chosen {record['chosen']}; adapter "
                      f"{record['adapter']} (not registered)")
    else:
        console.print(f"[bold green]done[/]: {record['steps']} steps; chosen {record['chosen']}; adapter "
                      f"{record['adapter']} registered as {record['name']} ({str(record['store_id'])[:12]}) over "
                      f"{record['parent_id'][:12]}")


def _main_process() -> bool:
    """True unless this is a non-zero rank of a multi-process launch (only rank 0 shows and reports)."""
    return int(os.environ.get("RANK", "0")) == 0


def _train_with_progress(config: GRPORunConfig, show: Callable[[LogRow], None],
                         keep_episodes: bool) -> GRPORunRecord | PausedRun:
    """``train_grpo`` with its phases shown; the report is written at the end, also after a failure."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.progress import progress
    from pdbgym.train.grpo.progress import EPISODES_DIR, GRPOProgress
    from pdbgym.train.grpo.run import train_grpo

    main = _main_process()
    out = Path(config.out)
    with progress(console, disable=not main) as bars:
        hooks = GRPOProgress(bars, out / EPISODES_DIR if keep_episodes and main else None)
        try:
            record = train_grpo(config, on_log=show, progress=hooks)
        except BaseException:
            _report(out, quiet_failure=True)
            raise
    _report(out)
    return record


def _report(out: Path, quiet_failure: bool = False) -> None:
    """Write the run's report; after a failed run, a report that cannot be written must not hide the cause."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.grpo.report import write_grpo_report

    if not _main_process() or (quiet_failure and not (out / "steps.jsonl").is_file()):
        return  # a run refused before its first step has nothing to report
    try:
        page = write_grpo_report(out)
    except Exception as exc:
        if not quiet_failure:
            raise
        console.print(f"[yellow]no training report[/]: {exc}")
        return
    console.print(f"report: {page}")


def report(
    run_dir: Annotated[Path, typer.Argument(help="the --out folder of a pdbgym train grpo run (finished or not)")],
    ledger: Annotated[Path | None, typer.Option(help="selection ledger the run wrote to (default $PDBGYM_HOME's)")] = None,
) -> None:
    """(Re)write a GRPO run's training report (HTML, Markdown, JSON, plots) from its folder alone."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.grpo.report import write_grpo_report

    typer.echo(str(write_grpo_report(run_dir, ledger)))
