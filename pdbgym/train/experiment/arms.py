"""The experiment's arms that isolate what reinforcement learning adds (issue 42).

- ``sft-best``: of the ``[sft] candidates`` step counts, the SFT model with the best val pass@1 (ties: more
  steps). A GRPO gain over a deliberately weak SFT model says little; over the best one chosen on val it
  says what RL adds to what SFT alone reaches.
- ``sft-matched``: SFT continued from GRPO's start on exactly the corpus examples the GRPO stage trained
  on beyond its own samples (the replayed oracle trajectories and the behaviour-cloning anchor batches,
  step by step, as GRPO's rotation dealt them), for as many optimizer updates as GRPO took, at GRPO's
  learning rate and adapter: everything GRPO got except the reward. GRPO - sft-matched is the part of the
  gain that imitation of that data cannot explain.
- ``grpo``: GRPO from GRPO's start (``[sft] start``: ``best``, the default, or ``target``, the candidate
  nearest ``[sft] target``, kept as an extra arm ``sft-start`` when it is not the best).

The matched run differs from GRPO's stage in two ways it cannot avoid: SFT gives every example the same
weight (GRPO weighs a replayed trajectory by its advantage and the anchor by ``[grpo] anchor_weight``) and
spreads the examples evenly over the updates (GRPO replays more early on; ``replay_decay_steps``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from pdbgym.fileio import write_json_atomic
from pdbgym.train.corpus.build import load_corpus, write_corpus
from pdbgym.train.corpus.example import Example
from pdbgym.train.grpo.data import ReplayPool
from pdbgym.train.grpo.records import StepOutcomes
from pdbgym.train.grpo.schedules import anchor_weight

MATCHED_FILE = "matched.json"  # OUT/matched/matched.json: what the matched run trained on, and how


class MatchRules(TypedDict):
    """GRPO's settings that decide which corpus examples it trained on (``matched_examples``' keywords)."""

    anchor: float
    anchor_batch: int
    anchor_decay_steps: int
    anchor_max_tokens: int
    replay_max_tokens: int


class MatchedCounts(TypedDict):
    """Examples GRPO trained on beside its samples, by kind, and its optimizer steps."""

    replayed: int
    anchor: int
    updates: int


class MatchedFacts(TypedDict, total=False):
    """``OUT/matched/matched.json``: the counts, the examples in all, the rules and the effective batch of
    the matched run. Every key is written; a folder whose stage has not run reads as ``{}``."""

    replayed: int
    anchor: int
    updates: int
    examples: int
    rules: MatchRules
    effective_batch: int


def best_on_val(scores: dict[int, float]) -> int:
    """The step count with the best val score; of equal scores, the most steps."""
    return max(scores, key=lambda steps: (scores[steps], steps))


def matched_examples(examples: list[Example], outcomes: list[StepOutcomes], *, anchor: float,
                     anchor_batch: int, anchor_decay_steps: int, anchor_max_tokens: int,
                     replay_max_tokens: int) -> tuple[list[Example], MatchedCounts]:
    """The corpus examples GRPO trained on beside its own samples, step by step from ``outcomes.jsonl``:
    each step's replayed trajectories (``ReplayPool``'s rotation, by the task each was replayed for) and,
    while the anchor's weight is above 0, its anchor batch (``AnchorBatches``: batch i starts at
    i x batch size, cycling over the examples with a loss id). Returns them with counts by kind."""
    pool = ReplayPool(examples, replay_max_tokens)
    rows = [e for e in examples if any(e.assistant_masks[:anchor_max_tokens])]
    taken: list[Example] = []
    counts: MatchedCounts = {"replayed": 0, "anchor": 0, "updates": len(outcomes)}
    for index, row in enumerate(sorted(outcomes, key=lambda r: int(r["step"]))):
        for episode in row.get("episodes", []):
            if episode.get("replayed"):
                task = episode["task"]
                found, position = pool.by_task.get(task, []), pool.positions().get(task, 0)
                if found:
                    pool.take(task, 1)  # advance the rotation as GRPO's pool did
                    taken.append(found[position % len(found)])
                    counts["replayed"] += 1
        if rows and anchor_weight(index, anchor, anchor_decay_steps) > 0:
            start = (index * anchor_batch) % len(rows)
            taken += [rows[(start + k) % len(rows)] for k in range(anchor_batch)]
            counts["anchor"] += anchor_batch
    return taken, counts


def write_matched_corpus(corpus: Path, outcomes: list[StepOutcomes], folder: Path, *, anchor: float, anchor_batch: int,
                         anchor_decay_steps: int, anchor_max_tokens: int, replay_max_tokens: int) -> MatchedFacts:
    """The matched corpus in ``folder/corpus`` (duplicates kept: one line each time GRPO trained on an
    example) and what it holds in ``folder/matched.json``, which it returns. A GRPO stage with no replay and
    no anchor leaves nothing to match (``examples`` 0, no corpus): ``sft-matched`` is then GRPO's start.
    ``rules``: ``matched_examples``' keywords."""
    rules: MatchRules = {"anchor": anchor, "anchor_batch": anchor_batch, "anchor_decay_steps": anchor_decay_steps,
                         "anchor_max_tokens": anchor_max_tokens, "replay_max_tokens": replay_max_tokens}
    source = load_corpus(corpus)
    taken, counts = matched_examples(source.examples, outcomes, **rules)
    if taken:
        write_corpus(folder / "corpus", taken,
                     source.manifest["tokenizer"], {"sources": {"matched_to": str(corpus)}, "filters": {},
                                                    "records_read": len(taken), "dropped": {}})
    facts: MatchedFacts = {"replayed": counts["replayed"], "anchor": counts["anchor"], "updates": counts["updates"],
                           "examples": len(taken), "rules": rules,
                           "effective_batch": max(1, round(len(taken) / max(1, counts["updates"])))}
    write_json_atomic(folder / MATCHED_FILE, facts, indent=2)
    return facts


def read_matched(out: Path) -> MatchedFacts:
    """``OUT/matched/matched.json`` of an experiment folder, or {} when the stage has not written it."""
    path = out / "matched" / MATCHED_FILE
    return json.loads(path.read_text()) if path.is_file() else {}
