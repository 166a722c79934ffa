"""The teacher's labels of the student's states, turned into token-exact SFT examples.

Every assistant turn of a student episode is a state: the ids before it (the student's own history,
exactly as its record holds them). The teacher, given those ids, samples its own next turn; the pair
(state ids with mask 0, teacher ids with mask 1) is one labelled example. Labels of all iterations so
far are written as the iteration's corpus."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from pdbgym.agent.backends.base import Generation, GenerationRequest, SamplingParams
from pdbgym.agent.loop import EpisodeOutcome
from pdbgym.rollouts.record import RolloutRecord
from pdbgym.seeds import turn_seed
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


async def label_states(record: RolloutRecord, teacher: Policy, params: SamplingParams, iteration: int,
                       max_context: int) -> list[Example]:
    """The teacher's own next turn at every assistant turn's state of ``record`` (see the module doc), all
    states asked at once (a local teacher's engine batches them). Each state's draw is seeded by
    ``turn_seed(params.seed, state length)``."""
    states = [(index, record.tokens[:start]) for index, (start, _end) in enumerate(turn_spans(record))
              if max_context - start > 0]

    async def one(state: list[int]) -> Generation:
        room = max_context - len(state)
        seed = turn_seed(params.seed, len(state)) if params.seed is not None else None
        request = GenerationRequest(list(state), [], None,
                                    replace(params, max_new_tokens=min(params.max_new_tokens, room), seed=seed))
        return await teacher.backend.generate(request)

    turns = await asyncio.gather(*(one(state) for _, state in states))
    examples = []
    for (turn_index, state), turn in zip(states, turns, strict=True):
        if not turn.token_ids:
            continue
        examples.append(Example(record.instance_id, f"dagger-iter{iteration}", record.sample_idx * 1000 + turn_index,
                                teacher.label, bool(record.reward_score >= 1.0), list(state) + list(turn.token_ids),
                                [0] * len(state) + [1] * len(turn.token_ids)))
    return examples


def label_episodes(outcomes: list[EpisodeOutcome], teacher: Policy, config: DaggerConfig, iteration: int) -> list[Example]:
    """The teacher's labels of every state of ``outcomes`` (its own draw: ``teacher_temperature``), every
    episode's states asked together."""
    params = SamplingParams(config.teacher_temperature, 1.0, config.episode.max_new_tokens, config.seed)

    async def every() -> list[list[Example]]:
        return list(await asyncio.gather(*(label_states(o.record, teacher, params, iteration,
                                                        config.episode.max_context_tokens) for o in outcomes)))

    return [example for examples in asyncio.run(every()) for example in examples]


def write_labels(folder: Path, labels: list[Example], fingerprint: str, teacher: Policy, out: Path,
                 iteration: int) -> None:
    """The aggregate of labels so far as the iteration's corpus, ``folder/corpus``."""
    write_corpus(folder / "corpus", labels, {"fingerprint": fingerprint, "name": teacher.label},
                 {"sources": {"dagger": str(out)}, "iteration": iteration})
