"""`pdbgym tasks ...` commands."""

import typer

app = typer.Typer(no_args_is_help=True)
