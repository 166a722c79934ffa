"""``torchrun --nproc-per-node N -m pdbgym.divergence <pdbgym divergence flags>``: the same command in each
of the launcher's processes; the ranks split the scoring (``pdbgym.divergence.distributed``)."""

from __future__ import annotations

from pdbgym.commandapp import command_app
from pdbgym.divergence.commands import divergence_command


def main() -> None:
    app = command_app(add_completion=False, pretty_exceptions_enable=False)
    app.command()(divergence_command)
    app()


if __name__ == "__main__":
    main()
