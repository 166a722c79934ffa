"""`pdbgym run` and `pdbgym demo`."""


def run_command() -> None:
    raise SystemExit("not built yet")


def demo_command() -> None:
    raise SystemExit("not built yet")
