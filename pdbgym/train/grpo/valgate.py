"""The validation gate: each checkpoint scored on the val split (pass@1, pass@k) and logged in ``gates.jsonl``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import cast

from pdbgym.evaluate.stats import estimate_mean, per_task_pass_at_k
from pdbgym.fileio import read_jsonl, write_text_atomic
from pdbgym.reportkit import EstimateDict
from pdbgym.tasks.model import Task
from pdbgym.train.grpo.records import EpisodeFacts, GateRow


def score_outcomes(step: int, checkpoint: str, outcomes: dict[str, list[int]], k: int,
                   reasons: dict[str, int], refused: int = 0) -> GateRow:
    """One checkpoint's val score (a ``gates.jsonl`` line): pass@1 and pass@k estimates (clustered SE, CI over
    tasks) from per-task 0/1 outcomes, ``runs`` episodes a task."""
    runs = min(len(v) for v in outcomes.values())
    table = [v[:runs] for v in outcomes.values()]
    k = min(k, runs)
    pass_at_1 = cast(EstimateDict, estimate_mean(per_task_pass_at_k(table, 1)).to_dict())
    pass_at_k = cast(EstimateDict, estimate_mean(per_task_pass_at_k(table, k)).to_dict())
    return {"step": step, "checkpoint": checkpoint, "pass_at_1": pass_at_1, "pass_at_k": pass_at_k, "k": k,
            "runs": runs, "termination_reasons": reasons, "refused": refused}


def append_gate(path: Path, result: GateRow) -> None:
    lines = path.read_text().splitlines() if path.is_file() else []
    lines.append(json.dumps(result, sort_keys=True))
    write_text_atomic(path, "\n".join(lines) + "\n")


def read_gates(path: Path) -> list[GateRow]:
    return cast(list[GateRow], read_jsonl(path).rows)


def gate_on_val(play: Callable[[list[Task]], list[EpisodeFacts]], val_tasks: list[Task], runs: int, k: int,
                step: int, checkpoint: str) -> GateRow:
    """Play ``runs`` episodes of every val task with ``play`` (a batch of tasks -> each episode's facts:
    ``final_test_passed``, ``termination_reason``, ``grade_refused``) and score them."""
    episodes = [task for task in val_tasks for _ in range(runs)]
    played = play(episodes)
    outcomes: dict[str, list[int]] = {task.instance_id: [] for task in val_tasks}
    reasons: dict[str, int] = {}
    refused = 0
    for task, facts in zip(episodes, played, strict=True):
        outcomes[task.instance_id].append(int(facts["final_test_passed"]))
        reason = facts["termination_reason"]
        reasons[reason] = reasons.get(reason, 0) + 1
        refused += bool(facts.get("grade_refused"))
    return score_outcomes(step, checkpoint, outcomes, k, reasons, refused)
