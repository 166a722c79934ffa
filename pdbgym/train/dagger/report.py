"""A DAgger run's iterations table (``iterations.json``, rewritten after every iteration) and its report
(each iterate's SFT loss curve, the run's summary, the table)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from pdbgym.fileio import read_jsonl, write_json_atomic
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.report import write_training_report


@dataclass
class IterationRow:
    """One line of the iterations table (losses in nats per loss token; KL in nats per token).

    ``labels_new``: student states the teacher labelled this iteration; ``labels_total``: distinct
    (state, label) examples in the aggregate after it (a state reached again with the same teacher turn,
    such as every episode's first state under a greedy teacher, counts once)."""

    iteration: int
    adapter: str
    store_id: str
    student_episodes: int
    student_solved: int
    labels_new: int
    labels_total: int
    best_val_loss: float | None
    steps: int
    val_pass1: float | None = None
    val_pass1_ci: str | None = None
    kl_teacher_student: float | None = None
    transcripts: str = ""


@dataclass
class DaggerResult:
    out: Path
    rows: list[IterationRow] = field(default_factory=list)
    report: Path | None = None


def write_iterations(out: Path, rows: list[IterationRow]) -> None:
    write_json_atomic(out / "iterations.json", [asdict(r) for r in rows], indent=2)


def write_report(out: Path, config: DaggerConfig, result: DaggerResult, fingerprint: str) -> Path:
    history = []
    for row in result.rows:
        for entry in read_jsonl(out / f"iter{row.iteration}" / "sft" / "metrics.jsonl").rows:
            history.append({"step": entry["step"], f"iter{row.iteration}_loss": entry.get("loss")}
                           if "loss" in entry else {})
    history = [h for h in history if h]
    summary = {"student": config.student, "teacher": config.teacher, "tasks": config.tasks,
               "val tasks": config.val_tasks, "iterations": len(result.rows), "tokenizer fingerprint": fingerprint,
               "parent of every iterate": config.student}
    return write_training_report(out, "pdbgym DAgger", history, summary,
                                 {"Iterations": [asdict(r) for r in result.rows]})
