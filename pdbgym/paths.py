"""Where pdbgym keeps its own state: ``$PDBGYM_HOME``, default ``~/.pdbgym``.

Under it: ``adapters/`` (the lineage store), ``models/`` (de-quantized embedded model),
``selection-ledger.jsonl`` (which task sets selected which checkpoints), ``envs/`` (task environments,
``pdbgym.sandbox.pyenv``), ``merged/`` (merged adapter stacks as model folders), ``tokenizers/``,
``repos/`` (bare clones for imported SWE-bench rows, ``pdbgym.tasks.mirrors``).
``pdbgym store`` (``pdbgym.home``) shows them and prunes what is rebuilt on demand.
"""

from __future__ import annotations

import os
from pathlib import Path


def pdbgym_home() -> Path:
    return Path(os.environ.get("PDBGYM_HOME") or Path.home() / ".pdbgym")
