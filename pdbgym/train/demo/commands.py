"""``pdbgym demo``: parses its flags into a ``DemoConfig`` and runs ``pdbgym.train.demo.config.run_demo``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pdbgym.defaults import defaults_of
from pdbgym.episode_defaults import check_setting
from pdbgym.train.demo.config import DemoConfig
from pdbgym.train.experiment.config import Overrides

D = defaults_of(DemoConfig)
FILE = "(default: demo.toml's)"
# flag -> (table, key) of demo.toml it replaces for one run
OVERRIDES = {"sft_steps": ("sft", "steps"), "sft_tokens": ("sft", "max_tokens"), "eval_runs": ("eval", "runs"),
             "turn_budget": ("episodes", "turn_budget"), "temperature": ("eval", "temperature")}
RULES = {"eval_runs": "runs", "sft_steps": "max_new_tokens", "sft_tokens": "max_new_tokens"}  # whole, >= 1


def demo_command(
    out: Annotated[Path, typer.Option(help="Demo folder, an experiment folder (a rerun resumes the stages left)")] = D.out,
    teacher: Annotated[str, typer.Option(help="scripted only: the oracle that replays each task's reference fix")] = D.teacher,
    tasks: Annotated[str | None, typer.Option(help=f"Suite or task folder instead of the file's tasks {FILE}")] = None,
    sft_steps: Annotated[int | None, typer.Option(help=f"SFT optimizer steps, one example each {FILE}")] = None,
    sft_tokens: Annotated[int | None, typer.Option(help=f"Longest oracle episode kept for SFT, in ids {FILE}")] = None,
    eval_runs: Annotated[int | None, typer.Option(help=f"Episodes per held-out task per arm {FILE}")] = None,
    turn_budget: Annotated[int | None, typer.Option(help=f"Tool calls per episode {FILE}")] = None,
    temperature: Annotated[float | None, typer.Option(help=f"Held-out sampling temperature, 0 greedy {FILE}")] = None,
    constrained: Annotated[bool, typer.Option(hidden=True, help="Removed: refused")] = D.constrained,
) -> None:
    """The research loop in miniature on CPU: oracle caches -> LoRA SFT of SmolLM2-135M -> base vs SFT on
    held-out tasks -> one report. It runs the experiment file demo.toml, shipped with pdbgym, through the
    stages of pdbgym experiment run."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.progress import progress
    from pdbgym.train.demo.config import run_demo

    given = {"sft_steps": sft_steps, "sft_tokens": sft_tokens, "eval_runs": eval_runs, "turn_budget": turn_budget,
             "temperature": temperature}
    overrides: Overrides = {"tasks": {"families": {}, "suites": [tasks]}} if tasks else {}
    for flag, value in given.items():
        if value is not None:
            check_setting(flag, value, rule=RULES.get(flag))
            table, key = OVERRIDES[flag]
            overrides.setdefault(table, {})[key] = value
    config = DemoConfig(out=out, teacher=teacher, constrained=constrained, overrides=overrides)
    console = Console(stderr=True)
    with progress(console) as bars:
        report = run_demo(config, lambda text: console.print(text, markup=False, highlight=False), bars)
    typer.echo(f"report: {report.with_suffix('.html')}  (also {report})")
