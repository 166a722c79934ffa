"""Checkpoint selection without fooling yourself: a ledger of which task sets chose which checkpoints.

Choosing the best of N checkpoints on a task set and reporting that same score inflates it by about
``sd * E[max of N standard normals]`` (the winner's curse). pdbgym records every selection in a ledger
(``$PDBGYM_HOME/selection-ledger.jsonl``) keyed by the content of the task set, and refuses to report a
selected checkpoint on a set that selected it, unless forced; a forced report carries the warning and
the expected inflation.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pdbgym.errors import PdbgymError
from pdbgym.evaluate.stats import winners_curse_inflation
from pdbgym.fileio import append_jsonl, read_jsonl
from pdbgym.paths import pdbgym_home


def task_set_id(task_ids: list[str]) -> str:
    """A content id of a task set: the same ids give the same id, whatever the split is called."""
    return hashlib.sha256("\n".join(sorted(task_ids)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Selection:
    task_set: str  # task_set_id of the set the choice was made on
    split: str
    candidates: list[str]
    chosen: str
    scores: dict[str, float]
    score_se: float  # clustered SE of one candidate's pass@1 on that set (the noise the argmax rode)
    time: float


class SelectionLedger:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or pdbgym_home() / "selection-ledger.jsonl"

    def entries(self) -> list[Selection]:
        found = []
        for row in read_jsonl(self.path).rows:
            try:
                found.append(Selection(**row))
            except TypeError:  # a row of another shape
                continue
        return found

    def record(self, selection: Selection) -> None:
        append_jsonl(self.path, [asdict(selection)])

    def selections_of(self, model: str, task_ids: list[str]) -> list[Selection]:
        """Earlier selections that chose ``model`` on exactly this task set."""
        wanted = task_set_id(task_ids)
        return [s for s in self.entries() if s.task_set == wanted and s.chosen == model]


@dataclass(frozen=True)
class SelectionWarning:
    model: str
    split: str
    candidates: int
    expected_inflation: float  # in solve-rate units (0..1)

    def text(self) -> str:
        return (f"'{self.model}' was selected as the best of {self.candidates} candidates on this very task set "
                f"(split '{self.split}'); its score here is biased upward by about "
                f"{100 * self.expected_inflation:.1f} points (winner's curse). Report it on a held-out split.")


def check_reportable(models: list[str], task_ids: list[str], *, force: bool,
                     ledger: SelectionLedger | None = None) -> list[SelectionWarning]:
    """Refuse (or, forced, warn) when a model would be reported on a task set that selected it."""
    ledger = ledger or SelectionLedger()
    warnings = []
    for model in models:
        for sel in ledger.selections_of(model, task_ids):
            inflation = winners_curse_inflation(len(sel.candidates), sel.score_se)
            warnings.append(SelectionWarning(model, sel.split, len(sel.candidates), inflation))
    if warnings and not force:
        listing = "\n  ".join(w.text() for w in warnings)
        raise PdbgymError(f"refusing to report a selected checkpoint on its selection set:\n  {listing}\n"
                          "Pass --force to report anyway (the report will carry this warning).")
    return warnings


def record_selection(split: str, task_ids: list[str], scores: dict[str, float], score_se: float,
                     ledger: SelectionLedger | None = None, chosen: str | None = None, once: bool = False) -> Selection:
    """Write a choice among ``scores`` to the ledger: ``chosen``, or by default their argmax (the first
    of equal scores). A choice by another rule is recorded all the same, since any choice made on a task
    set makes a later score of the chosen one on that set biased. With ``once``, a choice the ledger
    already holds (same split, task set, chosen one and scores) is not written again: a run resumed after
    a kill that followed its recording records it once."""
    if not scores:
        raise PdbgymError("no candidate scores to select from")
    if chosen is not None and chosen not in scores:
        raise PdbgymError(f"the chosen candidate {chosen!r} is not among the scored ones {sorted(scores)}")
    chosen = chosen if chosen is not None else max(scores, key=lambda m: scores[m])
    ledger = ledger or SelectionLedger()
    task_set = task_set_id(task_ids)
    if once:
        for earlier in ledger.entries():
            if (earlier.split, earlier.task_set, earlier.chosen, earlier.scores) == (split, task_set, chosen, scores):
                return earlier
    selection = Selection(task_set, split, sorted(scores), chosen, dict(scores), score_se, time.time())
    ledger.record(selection)
    return selection
