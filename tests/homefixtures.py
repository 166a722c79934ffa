"""A fresh ``$PDBGYM_HOME`` per test that still finds the embedded model's derived caches.

A new empty home would make the first ``scripted``/``embedded`` policy in it re-derive the embedded
tokenizer from the GGUF file (7-13 s) or de-quantize the whole model (17 s), in every test and in every
subprocess it starts. ``fresh_home`` makes the home's ``models/`` and ``tokenizers/`` links to the
user's cache (built there once, atomically, as pdbgym does anyway), while the state a test checks (the
adapter store, ``merged/``, the selection ledger) starts empty in the test's own folder.
"""

from __future__ import annotations

import os
from pathlib import Path

# The derived, content-addressed caches under a pdbgym home: safe to share (written by atomic rename).
SHARED = ("models", "tokenizers")
# Where they live: the home pdbgym would use without the tests (read when this module is first imported,
# before tests/conftest.py points PDBGYM_HOME at the session's own folder).
USER_HOME = Path(os.environ.get("PDBGYM_HOME") or Path.home() / ".pdbgym")


def fresh_home(path: Path) -> Path:
    """``path`` made an empty pdbgym home whose model caches are the user's; returns ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    for name in SHARED:
        (USER_HOME / name).mkdir(parents=True, exist_ok=True)
        link = path / name
        if not link.exists():
            link.symlink_to(USER_HOME / name, target_is_directory=True)
    return path
