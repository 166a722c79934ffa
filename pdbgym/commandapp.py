"""The one way pdbgym makes a command group, so every ``--help`` reads the same.

Help is click's plain text, not typer's rich panels: in rich mode a help text's square brackets are
markup (``[quick]`` vanished from ``experiment run --help``) and every flag showed a ``<bool>``
placeholder as if it took a value.
"""

from __future__ import annotations

from typing import Any

import typer


def command_app(**options: Any) -> typer.Typer:
    """A ``typer.Typer`` with plain help text; ``options`` as ``typer.Typer`` takes them."""
    return typer.Typer(rich_markup_mode=None, **options)
