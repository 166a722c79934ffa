"""``pdbgym experiment run CONFIG``: parses its flags and runs ``pdbgym.train.experiment.run.run_experiment``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pdbgym.commandapp import command_app

app = command_app(no_args_is_help=True)


@app.command("run")
def run_command(
    config: Annotated[Path, typer.Argument(help="Experiment file (TOML), e.g. experiments/smollm2-ladder.toml")],
    out: Annotated[Path, typer.Option(help="Experiment folder (a rerun resumes the stages left)")],
    quick: Annotated[bool, typer.Option(help="Lay the file's [quick] tables over it: the same stages, tiny counts")] = False,
    device: Annotated[str, typer.Option(help="Device of training, local-model episodes and KL scoring (cpu, cuda)")] = "cpu",
    workers: Annotated[int, typer.Option(min=1, help="Scripted episodes at once (worker processes)")] = 2,
    local_episodes: Annotated[int, typer.Option(min=0, help="Local-model episodes at once, their turns batched (0: 48 on a GPU, 1 on CPU); episodes are seeded one by one, so results do not change")] = 0,
    local_processes: Annotated[int, typer.Option(min=1, help="Processes sharing a local model's episodes, each with its own copy of the model and engine (one process's interpreter bounds its episodes a minute); 1: this process")] = 1,
    until: Annotated[str | None, typer.Option(help="Stop after this stage (tasks, split, oracle, sft, grpo, matched, eval, temperatures); the report shows what is there")] = None,
    minutes: Annotated[float, typer.Option(min=0, help="This invocation's wall-clock budget (a job's time limit; 0: none): once spent, no stage starts and GRPO pauses at a gated checkpoint; a rerun goes on")] = 0.0,
    seeds: Annotated[str | None, typer.Option(help="Training seeds, e.g. 0,1,2: one folder each (OUT/seed-N, the same tasks) and one pooled report (OUT/pooled.md); default: the file's seeds, else its one seed")] = None,
) -> None:
    """Run an experiment end to end (tasks, split, oracle caches, SFT, GRPO, held-out eval, report); resumable."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.progress import progress
    from pdbgym.train.experiment.config import load_experiment
    from pdbgym.train.experiment.run import run_experiment
    from pdbgym.train.experiment.seeds import parse_seeds, run_seeds

    console = Console(stderr=True)
    experiment = load_experiment(config, quick=quick)
    chosen = parse_seeds(seeds) if seeds is not None else experiment.seeds

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    with progress(console) as bars:
        if chosen:
            pooled = run_seeds(experiment, out, chosen, run_experiment, say=say, device=device, workers=workers,
                               until=until, minutes=minutes, progress=bars, local_episodes=local_episodes,
                               local_processes=local_processes)
        else:
            report = run_experiment(experiment, out, device=device, workers=workers, say=say, until=until,
                                    minutes=minutes, progress=bars, local_episodes=local_episodes,
                                    local_processes=local_processes)
    if chosen:
        typer.echo(f"pooled report: {pooled}  (each seed's: {out}/seed-N/report.md)")
        return
    typer.echo(f"report: {report}  (also {report.with_suffix('.html')})")
