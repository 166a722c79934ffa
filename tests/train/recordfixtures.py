"""Rollout records shaped like pdbgym episodes (real chat-template text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pdbgym.agent.backends.base import tokenizer_info
from pdbgym.rollouts.cache import write_cache
from pdbgym.rollouts.record import RolloutRecord


def episode_record(tokenizer: Any, instance_id: str, turns: list[tuple[str, str]], solved: bool = True,
                   sample_idx: int = 0, reason: str | None = None) -> RolloutRecord:
    """A record of ``turns`` = [(assistant text, observation)]: assistant ids mask 1, the rest mask 0."""
    encode = lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    eot = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompt = encode("<|im_start|>system\nfix the bug<|im_end|>\n<|im_start|>user\nfailing test<|im_end|>\n"
                    "<|im_start|>assistant\n")
    tokens, mask = list(prompt), []
    for assistant, observation in turns:
        generated = encode(assistant) + [eot]
        delta = encode(f"\n<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n")
        tokens += generated + delta
        mask += [1] * len(generated) + [0] * len(delta)
    metadata = {"instance_id": instance_id, "_sample_idx": sample_idx, "tokenizer": tokenizer_info(tokenizer),
                "_termination_reason": reason or ("solved" if solved else "finish_unresolved")}
    return RolloutRecord(instance_id, "unit", tokens, len(prompt), len(mask), mask, [0.0] * len(mask),
                         1.0 if solved else 0.0, {"final_test_passed": solved}, metadata)


def write_records(folder: Path, records: list[RolloutRecord]) -> Path:
    write_cache(folder, records, overwrite=True)
    return folder
