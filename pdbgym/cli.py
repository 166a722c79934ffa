"""The pdbgym command line: parses arguments, calls the library, prints. No logic lives here.

Each command family lives beside the code it drives (``pdbgym/<package>/commands.py``) and is
mounted here, so adding a family is one line.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape

from pdbgym.commandapp import command_app
from pdbgym.errors import PdbgymError
from pdbgym.interrupts import Interrupted, exit_interrupted
from pdbgym.versions import DependencyVersionError

app = command_app(
    name="pdbgym",
    help="Build, evaluate and train LLM agents that debug Python in a live pdb session.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)


def _mount() -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.adapters.commands import app as adapters_app
    from pdbgym.adapters.stacked import register_store_refs

    # the command's code loads when it runs: every other command starts without it
    from pdbgym.agent.commands import cache_build_command, run_command
    from pdbgym.divergence.commands import divergence_command

    # the command's code loads when it runs: every other command starts without it
    from pdbgym.evaluate.commands import app as eval_app
    from pdbgym.home import app as store_app
    from pdbgym.rollouts.commands import app as cache_app

    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.commands import app as tasks_app
    from pdbgym.tasks.envs.commands import app as envs_app
    from pdbgym.train.commands import app as train_app

    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.demo.commands import demo_command
    from pdbgym.train.experiment.commands import app as experiment_app

    register_store_refs()  # --policy, --arm and --student take adapter-store names
    app.add_typer(tasks_app, name="tasks", help="List, validate, synthesize and split debugging tasks.")
    app.add_typer(envs_app, name="envs", help="Task environments (pinned requirements): list, build, prune.")
    cache_app.command("build", help="Play tasks x runs with a policy and write a teacher cache (resumable).")(
        cache_build_command
    )
    app.add_typer(cache_app, name="cache", help="Teacher caches: validate, summarize, convert, build.")
    app.add_typer(adapters_app, name="adapters", help="Adapter stacks with lineage: register, merge, verify.")
    app.add_typer(eval_app, name="eval", help="Evaluation campaigns, planning and checkpoint selection.")
    app.add_typer(store_app, name="store", help="What $PDBGYM_HOME (~/.pdbgym) holds: show it, prune what is rebuilt on demand.")
    app.command("run", help="Run one episode on a task with a policy.")(run_command)
    app.command("demo", help="The research loop in miniature on CPU: the experiment file demo.toml, shipped with pdbgym "
                "(oracle caches, SFT, held-out eval, one report).")(demo_command)
    app.command("divergence", help="KL/JSD of students against a teacher cache.")(divergence_command)
    app.add_typer(train_app, name="train", help="Train students: SFT corpora and adapters, online DAgger, GRPO.")
    app.add_typer(experiment_app, name="experiment", help="One experiment end to end from a TOML file: SFT -> GRPO -> held-out report.")


_mount()


def main() -> None:
    try:
        app()
    except (PdbgymError, DependencyVersionError) as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)  # one line, however narrow
        sys.exit(2)
    except Interrupted as exc:  # Ctrl-C: the command stopped cleanly and says what it kept
        err_console.print(f"[bold yellow]{escape(str(exc))}[/]", soft_wrap=True)  # paths stay whole
        exit_interrupted()
    except KeyboardInterrupt:
        err_console.print("[bold yellow]interrupted[/]")
        exit_interrupted()


if __name__ == "__main__":
    main()
