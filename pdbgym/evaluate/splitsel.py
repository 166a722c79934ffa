"""Choosing a campaign's tasks by split, after proving the splits do not overlap."""

from __future__ import annotations

from pathlib import Path

from pdbgym.errors import PdbgymError
from pdbgym.tasks.model import Task
from pdbgym.tasks.splits import SplitItem, check_splits, empty_split_hint, load_splits, split_item
from pdbgym.tasks.suites import resolve_tasks


def tasks_for_split(spec: str, split: str | None, splits_file: Path | None) -> list[Task]:
    """The tasks of ``spec``, restricted to ``split`` of ``splits_file`` when one is given.

    Before any campaign the split file is checked: no instance id and no buggy content may sit in two
    splits, and every id a split names must exist among the tasks.
    """
    tasks = resolve_tasks(spec)
    if split is None:
        if splits_file is not None:
            raise PdbgymError("--splits was given without --split; name the split to evaluate (e.g. --split test)")
        return tasks
    if splits_file is None:
        raise PdbgymError(f"--split {split} needs --splits FILE (make one with: pdbgym tasks split DIR --out FILE)")

    splits = load_splits(splits_file)
    if split not in splits:
        raise PdbgymError(f"{splits_file} has no split '{split}'; it has {sorted(splits)}")
    by_id = {t.instance_id: t for t in tasks}
    listed = {item["instance_id"] for items in splits.values() for item in items}
    unknown = sorted(listed - set(by_id))
    if unknown:
        raise PdbgymError(f"{splits_file} names {len(unknown)} task(s) not found in {spec}: {unknown[:5]}")
    # The file's recorded hashes, and hashes recomputed from the tasks as they are now: both must be disjoint.
    current = {name: [split_item(by_id[item["instance_id"]], "task") for item in items]
               for name, items in splits.items()}
    overlaps = check_splits(splits) + check_splits(current)
    if overlaps:
        listing = "\n  ".join(sorted({o.describe() for o in overlaps})[:10])
        raise PdbgymError(f"{splits_file} has overlapping splits ({len(overlaps)} overlaps):\n  {listing}")
    require_tasks_in_split(splits, split, splits_file)
    return [by_id[item["instance_id"]] for item in splits[split]]


def require_tasks_in_split(splits: dict[str, list[SplitItem]], split: str, splits_file: Path) -> None:
    """Refuse to evaluate an empty split: it would run 0 episodes and report nothing, silently."""
    if not splits.get(split):
        sizes = ", ".join(f"{name}: {len(items)}" for name, items in splits.items())
        raise PdbgymError(empty_split_hint(split, f"split '{split}' of {splits_file} holds no task ({sizes})"))
