"""`pdbgym divergence` command."""


def divergence_command() -> None:
    """Not built yet."""
    raise SystemExit("pdbgym divergence is not built yet")
