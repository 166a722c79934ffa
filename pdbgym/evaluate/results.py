"""A campaign's results folder: its configuration and one JSON line per finished episode.

Layout::

    OUT/campaign.json          the configuration (arms, tasks, runs, ...), its fingerprint and where OUT was
    OUT/episodes.jsonl         one line per finished episode (appended whole, fsync'd)
    OUT/transcripts/ARM/TASK/run-N.json

A killed campaign loses at most the episodes in flight: a line is written only after its transcript,
and a partial last line (a kill mid-write) is ignored on reading. Restarting skips every
(arm, task, run) already in the file, so nothing is counted twice. A folder moved or copied together with the
task folders, split file and checkpoints its configuration names resumes where it now is.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pdbgym.errors import PdbgymError
from pdbgym.fileio import append_jsonl, read_jsonl, write_json_atomic

CONFIG_FILE = "campaign.json"
EPISODES_FILE = "episodes.jsonl"


@dataclass(frozen=True)
class EpisodeRow:
    arm: str
    instance_id: str
    run: int
    final_test_passed: bool
    termination_reason: str
    actions_used: int
    duration_s: float
    transcript: str  # path relative to the campaign folder
    wrong_site_touched: bool | None = None  # final edits touched the task's wrong site; None: no such site
    grade_refused: bool = False  # grading refused the run's verdict (an abnormal end), not tampered
    commands_cut: int | None = None  # pdb commands cut by their time limit; None: a row written before they were counted

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.arm, self.instance_id, self.run)


def fingerprint(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def same_model(old: str, new: str) -> bool:
    """Whether two arm models are one: the same string, or the same merged adapter stack under two homes
    (``HOME/merged/<artifact id>``: the folder is named by the store's content-addressed id of the stack)."""
    if old == new:
        return True
    a, b = Path(old), Path(new)
    return (a.parent.name == b.parent.name == "merged" and a.name == b.name and len(a.name) == 64
            and all(c in "0123456789abcdef" for c in a.name))


def _moved(old: Any, new: Any, was: str | None, now: str) -> bool:
    """Whether two stored settings are absolute paths that stand to the campaign folder where it ``was`` and
    where it is ``now`` in the same relation, as when an experiment's folder was moved or copied whole with the
    task folders, split file and checkpoints its campaigns name. Never so for a folder written before it
    recorded where it was (no ``was``), nor where it has not moved."""
    if not was or was == now or not isinstance(old, str) or not isinstance(new, str) \
            or not (os.path.isabs(old) and os.path.isabs(new)):
        return False
    return os.path.relpath(old, was) == os.path.relpath(new, now)


class ResultsStore:
    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)

    def transcript_path(self, arm: str, instance_id: str, run: int) -> Path:
        return self.out_dir / "transcripts" / arm / instance_id / f"run-{run}.json"

    def open(self, config: dict[str, Any], *, check_only: bool = False) -> None:
        """Create the folder, or check that an existing one holds this campaign's settings (``check_only``:
        check, and write nothing).

        Arms may differ from the stored ones: a new arm joins the campaign (``campaign.json`` lists every
        arm ever played, so ``pdbgym eval report`` shows them all) and an arm left out is simply not played
        now, its episodes kept. An arm whose name is stored with another model, or any other setting that
        differs, is refused: the episodes already there would not be the ones this run would play.
        """
        config_file = self.out_dir / CONFIG_FILE
        if not config_file.is_file():
            if not check_only:
                self._write(config)
            return
        stored = json.loads(config_file.read_text())
        old, was, now = stored.get("config", {}), stored.get("folder"), str(self.out_dir.resolve())

        def same(a: Any, b: Any) -> bool:
            return a == b or _moved(a, b, was, now)

        differing = sorted(k for k in (set(old) | set(config)) - {"arms"} if not same(old.get(k), config.get(k)))
        old_arms, arms = old.get("arms", {}), config.get("arms", {})
        differing += [f"arm {name} ({old_arms[name]} there, {model} now)" for name, model in arms.items()
                      if name in old_arms and not (same_model(old_arms[name], model) or _moved(old_arms[name], model, was, now))]
        if differing:
            raise PdbgymError(
                f"{self.out_dir} holds a different campaign (differs in: {', '.join(differing)}). "
                "Use a new --out folder, or rerun with the original settings to resume it (arms may be added "
                "or left out; a changed model needs a new arm name)."
            )
        if check_only:
            return
        if set(arms) - set(old_arms) or old != {**config, "arms": old_arms} or stored.get("folder") is None:
            self._write({**config, "arms": {**old_arms, **arms}})  # moved: its paths now the new ones
        self._drop_cut_line()

    def _write(self, config: dict[str, Any]) -> None:
        """``campaign.json``: the configuration, its fingerprint and the folder it was written in (a folder moved
        with the files its paths name resumes where they now are, ``_moved``)."""
        write_json_atomic(self.out_dir / CONFIG_FILE, {"config": config, "fingerprint": fingerprint(config),
                                                        "folder": str(self.out_dir.resolve())})

    def _drop_cut_line(self) -> None:
        """Remove a last line a kill cut short, so the next append starts on a line of its own."""
        path = self.out_dir / EPISODES_FILE
        if not path.is_file():
            return
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)

    def config(self) -> dict[str, Any]:
        config_file = self.out_dir / CONFIG_FILE
        if not config_file.is_file():
            raise PdbgymError(f"{self.out_dir} is not a campaign folder (no {CONFIG_FILE})")
        return json.loads(config_file.read_text())["config"]

    def rows(self) -> list[EpisodeRow]:
        rows: dict[tuple[str, str, int], EpisodeRow] = {}
        # A line cut short by a kill is skipped by read_jsonl: that episode simply reruns.
        for fields in read_jsonl(self.out_dir / EPISODES_FILE).rows:
            try:
                row = EpisodeRow(**fields)
            except TypeError:  # a row of another shape
                continue
            rows.setdefault(row.key, row)
        return list(rows.values())

    def done_keys(self) -> set[tuple[str, str, int]]:
        return {r.key for r in self.rows()}

    def append(self, rows: Iterable[EpisodeRow]) -> None:
        append_jsonl(self.out_dir / EPISODES_FILE, [asdict(r) for r in rows])
