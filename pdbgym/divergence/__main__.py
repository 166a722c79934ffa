"""``torchrun --nproc-per-node N -m pdbgym.divergence <pdbgym divergence flags>``: the same command in each
of the launcher's processes; the ranks split the scoring (``pdbgym.divergence.distributed``)."""

from __future__ import annotations

import typer

from pdbgym.divergence.commands import divergence_command


def main() -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(divergence_command)
    app()


if __name__ == "__main__":
    main()
