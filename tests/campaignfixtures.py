"""Campaign folders shaped like a real held-out evaluation's: ``episodes.jsonl`` rows and text-format
transcripts as ``ResultsStore`` writes them, for the figures and sentences read from them. No model, no
episode is run."""

from __future__ import annotations

import json
from pathlib import Path

from pdbgym.evaluate.results import EpisodeRow, ResultsStore

ARMS = {"base": "embedded", "sft-best": "/home/u/.pdbgym/merged/8a6e01", "oracle": "scripted"}
TASKS = [f"ladder0__task-{i}" for i in range(5)]
SYSTEM = "You are debugging a Python project. A test fails; find the bug in the code and fix it."


def call(command: str) -> str:
    """An assistant turn as the text tool-call format writes it (what an SFT model sends)."""
    return "```tool\n" + json.dumps({"tool": "pdb", "args": {"command": command}}) + "\n```"


def write_campaign(folder: Path, turns: dict[str, list[list[str]]], solved: dict[str, int]) -> list[EpisodeRow]:
    """arm -> one list of assistant turns per task; the first ``solved[arm]`` tasks are solved."""
    store = ResultsStore(folder)
    store.open({"arms": ARMS, "runs": 1})
    rows = []
    for arm, episodes in turns.items():
        for index, (task, said) in enumerate(zip(TASKS, episodes, strict=True)):
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "A test fails."}]
            for text in said:
                messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "(Pdb)"}]
            path = store.transcript_path(arm, task, 0)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"instance_id": task, "sample_idx": 0, "policy": ARMS[arm],
                                        "tool_format": "text", "messages": messages}))
            won = index < solved.get(arm, 0)
            rows.append(EpisodeRow(arm, task, 0, won, "solved" if won else "budget", len(said), 1.0,
                                   str(path.relative_to(folder))))
    store.append(rows)
    return rows


# A run of the demo before it was an experiment file: base writes prose, the SFT model sends one call up to
# 8 times in a row, the oracle solves every task; its KL to the oracle.
REAL_TURNS = {
    "base": [["I will look at the code first."] * 3] * 5,
    "sft-best": [[call("c")] * 8, [call("b tests/test_a.py:13"), call("c"), "Let me", call("n")],
                 [call("l")] * 3 + ["oops"], [call("w"), call("p x")], [call("c"), call("c"), "hmm"]],
    "oracle": [[call("b f.py:3"), call("c"), call("p x")]] * 5,
}
REAL_KL = {"cache": "oracle-test", "records": 5, "max_ids": 1024, "metric": "kl_teacher_student/k1/token_mean",
           "arms": {"base": {"available": True, "path": "m", "kl_per_token": 1.4223, "ci_low": 1.3546,
                             "ci_high": 1.5035, "tasks": 5, "tokens": 262},
                    "sft-best": {"available": True, "path": "s", "kl_per_token": 0.4060, "ci_low": 0.3255,
                                 "ci_high": 0.4883, "tasks": 5, "tokens": 262},
                    "oracle": {"available": False, "reason": "the scripted oracle replays the task's reference fix"}}}
