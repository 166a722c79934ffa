"""The teacher's labels of the student's states, turned into token-exact SFT examples.

Every assistant turn of a student episode is a state: the ids before it (the student's own history,
exactly as its record holds them). The teacher, given those ids, samples its own next turn; the pair
(state ids with mask 0, teacher ids with mask 1) is one labelled example. Labels of all iterations so
far are written as the iteration's corpus."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

from pdbgym.agent.backends.base import GenerationRequest, SamplingParams
from pdbgym.rollouts.record import RolloutRecord
from pdbgym.train.corpus.build import Example, write_corpus
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.dagger.policy import Policy


def turn_spans(record: RolloutRecord) -> list[tuple[int, int]]:
    """(start, end) ids of each assistant turn in ``record.tokens``: maximal runs of ``loss_mask == 1``."""
    spans, start = [], None
    for offset, bit in enumerate([*record.loss_mask, 0]):
        if bit and start is None:
            start = offset
        elif not bit and start is not None:
            spans.append((record.prompt_len + start, record.prompt_len + offset))
            start = None
    return spans


async def label_states(record: RolloutRecord, teacher: Policy, params: Any, iteration: int,
                       max_context: int) -> list[Example]:
    """The teacher's own next turn at every assistant turn's state of ``record`` (see the module doc)."""
    examples = []
    for turn_index, (start, _end) in enumerate(turn_spans(record)):
        state = record.tokens[:start]
        room = max_context - len(state)
        if room <= 0:
            break
        request = GenerationRequest(list(state), [], None, replace(params, max_new_tokens=min(params.max_new_tokens, room)))
        turn = await teacher.backend.generate(request)
        if not turn.token_ids:
            continue
        examples.append(Example(record.instance_id, f"dagger-iter{iteration}", record.sample_idx * 1000 + turn_index,
                                teacher.label, bool(record.reward_score >= 1.0), list(state) + list(turn.token_ids),
                                [0] * len(state) + [1] * len(turn.token_ids)))
    return examples


def label_episodes(outcomes: list[Any], teacher: Policy, config: DaggerConfig, iteration: int) -> list[Example]:
    """The teacher's labels of every state of ``outcomes`` (its own draw: ``teacher_temperature``)."""
    params = SamplingParams(config.teacher_temperature, 1.0, config.max_new_tokens, config.seed)
    new = []
    for outcome in outcomes:
        new += asyncio.run(label_states(outcome.record, teacher, params, iteration, config.max_context_tokens))
    return new


def write_labels(folder: Path, labels: list[Example], fingerprint: str, teacher: Policy, out: Path,
                 iteration: int) -> None:
    """The aggregate of labels so far as the iteration's corpus, ``folder/corpus``."""
    write_corpus(folder / "corpus", labels, {"fingerprint": fingerprint, "name": teacher.label},
                 {"sources": {"dagger": str(out)}, "iteration": iteration})
