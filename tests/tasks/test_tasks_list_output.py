"""`pdbgym tasks list` piped into a file or another program prints whole task ids."""

import os
import subprocess
import sys

from pdbgym.tasks.suites import resolve_tasks


def test_piped_list_at_80_columns_keeps_every_id_whole():
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    code = "from pdbgym.cli import main; main()"
    done = subprocess.run([sys.executable, "-c", code, "tasks", "list", "builtin"], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    ids = [t.instance_id for t in resolve_tasks("builtin")]
    assert ids and "…" not in done.stdout
    rows = [line.split("│")[1].strip() for line in done.stdout.splitlines() if line.startswith("│")]
    assert rows == ids
