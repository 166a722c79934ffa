"""Libraries' ``FutureWarning`` s hidden while a training stage runs, and only then.

transformers, TRL, peft and torch warn about their own coming API changes on every run; in a stage's
log they bury the lines that matter. The filter is scoped with ``warnings.catch_warnings`` (never set
globally), so other code, and pdbgym's own warnings of other categories, still show.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_future_warnings() -> Iterator[None]:
    """Within the block, ``FutureWarning`` s are ignored; the warning filters before it come back after it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        yield
