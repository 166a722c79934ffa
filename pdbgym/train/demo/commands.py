"""``pdbgym demo``: parses its flags into a ``DemoConfig`` and runs ``pdbgym.train.demo.phases.run_demo``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pdbgym.defaults import defaults_of
from pdbgym.train.demo.config import DemoConfig

D = defaults_of(DemoConfig)


def demo_command(
    out: Annotated[Path, typer.Option(help="Demo folder (a rerun reuses finished phases)")] = D.out,
    teacher: Annotated[str, typer.Option(help="scripted (oracle: applies the reference fix), a model or URL")] = D.teacher,
    tasks: Annotated[str, typer.Option(help="Suite or folder split into train and held-out")] = D.tasks,
    sft_steps: Annotated[int, typer.Option(help="SFT optimizer steps (one example each)")] = D.sft_steps,
    sft_tokens: Annotated[int, typer.Option(help="Each SFT example cut to its first N ids")] = D.sft_tokens,
    eval_runs: Annotated[int, typer.Option(help="Episodes per held-out task per arm")] = D.eval_runs,
    turn_budget: Annotated[int, typer.Option(help="Tool calls per held-out episode")] = D.turn_budget,
    constrained: Annotated[bool, typer.Option(help="Add the grammar-constrained base as an arm")] = D.constrained,
) -> None:
    """The research loop in miniature on CPU: teacher cache -> LoRA SFT of SmolLM2-135M -> base vs SFT on
    held-out tasks -> one report."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.progress import progress
    from pdbgym.train.demo.phases import run_demo

    console = Console(stderr=True)
    config = DemoConfig(out=out, teacher=teacher, tasks=tasks, sft_steps=sft_steps, sft_tokens=sft_tokens,
                        eval_runs=eval_runs, episode=replace(D.episode, turn_budget=turn_budget),
                        constrained=constrained)
    with progress(console) as bars:
        outcome = run_demo(config, lambda text: console.print(text, markup=False, highlight=False), bars)
    console.print(", ".join(f"{k} {v['seconds']:.0f} s" for k, v in outcome.phases.items()))
    typer.echo(f"report: {outcome.page}  (also {outcome.markdown})")
