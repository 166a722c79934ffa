"""Train/val/test splits that keep related bugs together, and the overlap check run before evaluation.

A split file is JSON: ``{"group_by": ..., "seed": ..., "splits": {"train": [item, ...], "val": [...],
"test": [...]}}`` where each item records ``instance_id``, ``path``, ``group``, ``content_hash``
(``Task.content_hash()``: the whole buggy repo), ``buggy_file_hash`` (sha256 of the mutated file's
path and bytes, when known) and ``mutated_function`` (``"source:file:function"``, when known).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic
from pdbgym.tasks.difficulty import demands, rung
from pdbgym.tasks.model import SPLITS, Task
from pdbgym.tasks.suites import resolve_tasks

GROUP_BY = ("source-module", "function", "source", "task")


class SplitItem(TypedDict):
    """What a split file holds for one task (module docstring); ``rung`` when the splits were stratified by it."""

    instance_id: str
    path: str
    group: str
    content_hash: str
    buggy_file_hash: str | None
    mutated_function: str | None
    rung: NotRequired[int]


class SplitFile(TypedDict):
    """A split file: how it was made (``make_splits``' arguments) and its items by split name."""

    group_by: str
    seed: int
    val_fraction: float
    test_fraction: float
    stratify: str | None
    test_only: list[str]
    splits: dict[str, list[SplitItem]]


class SplitError(PdbgymError):
    """A split request or split file is invalid."""


def group_key(task: Task, group_by: str) -> str:
    """The unit that must not straddle splits: a module, a function, a whole source, or the task itself.

    Tasks without synthesis fields (``source_module``, ``mutated_function``) fall back to their own id.
    """
    source = task.source or "unknown"
    if group_by == "source-module" and task.extra.get("source_module"):
        return f"{source}:{task.extra['source_module']}"
    if group_by == "function" and task.extra.get("mutated_function"):
        return f"{source}:{task.extra.get('mutated_file', '')}:{task.extra['mutated_function']}"
    if group_by == "source":
        return source
    if group_by not in GROUP_BY:
        raise SplitError(f"unknown --group-by {group_by!r}; choose one of {', '.join(GROUP_BY)}")
    return f"task:{task.instance_id}"


def split_item(task: Task, group_by: str) -> SplitItem:
    """The record a split file holds for one task."""
    mutated_file = task.extra.get("mutated_file")
    buggy_file = task.repo / str(mutated_file) if mutated_file else None
    function = task.extra.get("mutated_function")
    return {
        "instance_id": task.instance_id,
        "path": str(task.path),
        "group": group_key(task, group_by),
        "content_hash": task.content_hash(),
        "buggy_file_hash": hashlib.sha256(f"{mutated_file}\0".encode() + buggy_file.read_bytes()).hexdigest()
        if buggy_file is not None and buggy_file.is_file() else None,
        "mutated_function": f"{task.source or 'unknown'}:{mutated_file}:{function}" if function else None,
    }


def assign_groups(group_sizes: Mapping[str, int], val_fraction: float, test_fraction: float,
                  seed: int) -> dict[str, str]:
    """Pure: map each group to a split so val and test hold about their fraction of tasks (by count).

    Groups are shuffled with ``seed`` and dealt whole, in that order: a group goes to val when val is
    short of ``round(val_fraction * total)`` tasks and taking the group brings val closer to that
    target (its overshoot is smaller than the shortfall it closes), else to test by the same rule,
    else to train. So one large group cannot swallow a split far beyond its fraction.
    """
    if not 0 <= val_fraction < 1 or not 0 <= test_fraction < 1 or val_fraction + test_fraction >= 1:
        raise SplitError(f"--val {val_fraction} and --test {test_fraction} must be in [0, 1) and sum below 1")
    total = sum(group_sizes.values())
    targets = {"val": round(val_fraction * total), "test": round(test_fraction * total)}
    order = sorted(group_sizes)
    random.Random(seed).shuffle(order)
    filled = {"val": 0, "test": 0}
    assignment: dict[str, str] = {}
    for group in order:
        size = group_sizes[group]
        # |filled + size - target| < target - filled  <=>  size < 2 * shortfall
        split = next((s for s in ("val", "test") if size < 2 * (targets[s] - filled[s])), "train")
        if split != "train":
            filled[split] += size
        assignment[group] = split
    return assignment


def empty_split_hint(split: str, what: str) -> str:
    """``what`` followed by how to make a non-empty ``split`` (the fix an empty split needs)."""
    return (f"{what}; evaluating on it runs nothing. To hold tasks out for it, rerun "
            f"`pdbgym tasks split DIR --val 0.3 --test 0.2 --out FILE` (each of --val/--test is a fraction of "
            f"the tasks) and pass that FILE to --splits")


def split_warnings(data: SplitFile) -> list[str]:
    """Pure: what a split file from ``make_splits`` fails to give that was asked for (empty when fine).

    Whole groups cannot always hit a fraction; a split that was asked for but got no task, or a train
    split left empty, is worth telling the user (a finer ``--group-by`` usually helps). A val or test
    split left empty because its fraction was 0 is warned too, with how to make one: ``eval --split`` and
    ``eval select`` refuse an empty split.
    """
    splits = data["splits"]
    total = sum(len(items) for items in splits.values())
    groups = len({item["group"] for items in splits.values() for item in items})
    hint = f"({groups} group(s) by {data.get('group_by')}; a finer --group-by such as function or task helps)"
    warnings = []
    fractions = {"val": data.get("val_fraction", 0.0), "test": data.get("test_fraction", 0.0)}
    for name in ("val", "test"):
        wanted = round(float(fractions[name]) * total)
        if wanted and not splits.get(name):
            warnings.append(f"{name} is empty though {wanted} of {total} task(s) were asked for {hint}")
        elif total and not splits.get(name):
            warnings.append(empty_split_hint(name, f"{name} is empty (--{name} was "
                                                  f"{float(fractions[name]):g})"))
    if total and not splits.get("train"):
        warnings.append(f"train is empty: every task went to val/test {hint}")
    return warnings


def make_splits(task_root: str | Path, val_fraction: float, test_fraction: float = 0.0,
                group_by: str = "source-module", seed: int = 0, stratify: str | None = None,
                test_only: Collection[str] = ()) -> SplitFile:
    """Build a split file's content for every task under ``task_root``.

    ``stratify="rung"`` deals the groups of each rung of the task ladder (``pdbgym.tasks.difficulty``)
    on their own, so every split holds about its fraction of each rung; a group whose tasks sit on
    several rungs counts as its highest. Groups stay whole either way (no leakage by source module).
    ``test_only`` (instance ids) are held out: each group holding one goes to test whole, and the
    fractions are dealt over the other groups, as if the held-out ones were not there.
    """
    if stratify not in (None, "rung"):
        raise SplitError(f"--stratify {stratify!r}: the one stratum is 'rung' (the task ladder's)")
    tasks = resolve_tasks(task_root)
    items = [split_item(t, group_by) for t in tasks]
    unknown = sorted(set(test_only) - {item["instance_id"] for item in items})
    if unknown:
        raise SplitError(f"test_only names {len(unknown)} task(s) not under {task_root}: {', '.join(unknown[:5])}")
    held = {item["group"] for item in items if item["instance_id"] in set(test_only)}
    sizes: dict[str, int] = {}
    for item in items:
        if item["group"] not in held:
            sizes[item["group"]] = sizes.get(item["group"], 0) + 1
    if stratify is None:
        assignment = assign_groups(sizes, val_fraction, test_fraction, seed)
    else:
        strata: dict[str, int] = {}
        for task, item in zip(tasks, items, strict=True):
            item["rung"] = rung(demands(task))
            if item["group"] not in held:
                strata[item["group"]] = max(strata.get(item["group"], 0), item["rung"])
        assignment = {}
        for level in sorted(set(strata.values())):
            within = {group: size for group, size in sizes.items() if strata[group] == level}
            assignment.update(assign_groups(within, val_fraction, test_fraction, seed))
    assignment.update(dict.fromkeys(held, "test"))
    splits: dict[str, list[SplitItem]] = {name: [] for name in SPLITS}
    for item in sorted(items, key=lambda i: i["instance_id"]):
        splits[assignment[item["group"]]].append(item)
    return {"group_by": group_by, "seed": seed, "val_fraction": val_fraction, "test_fraction": test_fraction,
            "stratify": stratify, "test_only": sorted(test_only), "splits": splits}


@dataclass(frozen=True)
class Overlap:
    """Two items in different splits that share ``kind`` (instance_id, content_hash, ...) of ``value``."""

    kind: str
    value: str
    first: tuple[str, str]   # (split, instance_id)
    second: tuple[str, str]

    def describe(self) -> str:
        return (f"{self.kind} {self.value[:80]!r}: {self.first[1]} ({self.first[0]}) and "
                f"{self.second[1]} ({self.second[0]})")


_OVERLAP_KEYS = ("instance_id", "content_hash", "buggy_file_hash", "mutated_function")


def check_splits(splits: Mapping[str, Sequence[SplitItem]]) -> list[Overlap]:
    """Pure: every pair of items in *different* splits sharing an id, repo content, buggy file or function.

    An empty list means the splits are disjoint. Call it before any evaluation campaign.
    """
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    overlaps: list[Overlap] = []
    for split in sorted(splits):
        for item in splits[split]:
            shared = {"instance_id": item.get("instance_id"), "content_hash": item.get("content_hash"),
                      "buggy_file_hash": item.get("buggy_file_hash"), "mutated_function": item.get("mutated_function")}
            for kind in _OVERLAP_KEYS:
                value = shared[kind]
                if not value:
                    continue
                owner = seen.setdefault((kind, value), (split, item["instance_id"]))
                if owner[0] != split:
                    overlaps.append(Overlap(kind, value, owner, (split, item["instance_id"])))
    return overlaps


def load_splits(path: str | Path) -> dict[str, list[SplitItem]]:
    """Read a split file and return its ``splits`` mapping, naming what is wrong if malformed."""
    file = Path(path)
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError as exc:
        raise SplitError(f"{file}: no such split file; make one with `pdbgym tasks split`") from exc
    except json.JSONDecodeError as exc:
        raise SplitError(f"{file}: not valid JSON ({exc})") from exc
    splits = data.get("splits") if isinstance(data, dict) else None
    if not isinstance(splits, dict):
        raise SplitError(f"{file}: expected an object with a 'splits' mapping of split name -> items")
    for name, items in splits.items():
        if name not in SPLITS or not isinstance(items, list):
            raise SplitError(f"{file}: split {name!r} must be one of {SPLITS} holding a list of items")
        for item in items:
            if not isinstance(item, dict) or not isinstance(item.get("instance_id"), str):
                raise SplitError(f"{file}: every item of split {name!r} needs an 'instance_id' string")
    return cast(dict[str, list[SplitItem]], splits)  # a split file's items, as make_splits writes them


def write_splits(data: SplitFile, path: str | Path) -> None:
    """Write a split file atomically; one whose splits overlap (``check_splits``) is refused, not written."""
    overlaps = check_splits(data["splits"])
    if overlaps:
        listed = "; ".join(overlap.describe() for overlap in overlaps[:5])
        raise SplitError(f"refusing to write {path}: {len(overlaps)} overlap(s) between splits ({listed}); "
                         "group by a coarser unit (--group-by source-module) so related tasks share a split")
    write_json_atomic(Path(path), data, indent=2)
