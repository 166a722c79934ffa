"""What GRPO draws from the SFT corpus (behaviour-cloning anchor batches, replayed solved trajectories)
and the gathering of episode facts across processes (the val gate is in ``valgate``).

Corpus examples are token-exact (``input_ids`` + ``assistant_masks``, see ``pdbgym.train.corpus.build``); a
corpus tokenized by another tokenizer is refused before training starts.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pdbgym.errors import PdbgymError
from pdbgym.tasks.model import Task
from pdbgym.train.corpus.build import check_corpus_tokenizer, load_corpus
from pdbgym.train.corpus.example import Example
from pdbgym.train.grpo.records import EpisodeFacts
from pdbgym.train.grpo.rollout import EpisodeSample

if TYPE_CHECKING:  # annotations only: torch, transformers and TRL load with the trainer
    import torch
    from transformers import PreTrainedTokenizerBase
    from trl import GRPOTrainer

IGNORE_INDEX = -100
Gathered = TypeVar("Gathered")


def load_checked_corpus(path: Path, tokenizer: PreTrainedTokenizerBase, label: str) -> list[Example]:
    """The examples of a corpus folder whose tokenizer fingerprint is ``tokenizer``'s."""
    corpus = load_corpus(path)
    check_corpus_tokenizer(corpus, tokenizer, label)
    return corpus.examples


class AnchorBatches:
    """Deterministic cycling over corpus examples for the BC anchor: batch ``i`` is the same on resume."""

    def __init__(self, examples: list[Example], batch_size: int, max_tokens: int, pad_id: int):
        self.rows = [(e.input_ids[:max_tokens], e.assistant_masks[:max_tokens]) for e in examples]
        self.rows = [(ids, mask) for ids, mask in self.rows if any(mask)]
        if not self.rows:
            raise PdbgymError("the anchor corpus holds no example with a loss token; pass another --anchor-data")
        self.batch_size = batch_size
        self.pad_id = pad_id

    def batch(self, index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(input_ids, attention_mask, labels) tensors [B, T], right-padded; labels -100 off the mask."""
        import torch  # optional: torch (pdbgym[hf])

        start = (index * self.batch_size) % len(self.rows)
        chosen = [self.rows[(start + k) % len(self.rows)] for k in range(self.batch_size)]
        width = max(len(ids) for ids, _ in chosen)
        input_ids = torch.full((len(chosen), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(chosen), width), dtype=torch.long)
        labels = torch.full((len(chosen), width), IGNORE_INDEX, dtype=torch.long)
        for row, (ids, mask) in enumerate(chosen):
            input_ids[row, :len(ids)] = torch.tensor(ids)
            attention[row, :len(ids)] = 1
            labels[row, :len(ids)] = torch.tensor([t if m else IGNORE_INDEX for t, m in zip(ids, mask, strict=True)])
        return input_ids, attention, labels


def anchor_nll(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Mean negative log-likelihood (nats per loss token) of the batch's masked tokens under ``model``."""
    input_ids, attention, labels = (t.to(next(model.parameters()).device) for t in batch)
    return model(input_ids=input_ids, attention_mask=attention, labels=labels).loss


def replay_refusal(example: Example, max_tokens: int | None = None) -> str | None:
    """Why a corpus example may not be replayed as a solved episode, or None when it may.

    Replayed with reward 1, it must be a whole trajectory that ended in a passing submit: solved, not
    cut (a corpus built with ``--overlength truncate`` keeps prefixes that never submitted), ending as
    ``solved``, with loss ids to train on, and no longer than the episodes of the run (``max_tokens``)."""
    if not example.solved:
        return "unsolved"
    if example.truncated:
        return "truncated"
    if example.termination_reason not in (None, "solved"):
        return "not ended by a passing submit"
    if not any(example.assistant_masks):
        return "no loss ids"
    if max_tokens is not None and len(example.input_ids) > max_tokens:
        return "longer than --max-context-tokens"
    return None


class ReplayPool:
    """Corpus trajectories that ended in a passing submit (``replay_refusal``), by task, handed out in a
    fixed rotation; ``refused`` counts the others by reason.

    With several training processes each holds a pool; after every step each ``skip``s what the others
    took, so the rotation is the one a single process would follow.
    """

    def __init__(self, examples: list[Example], max_tokens: int | None = None):
        self.by_task: dict[str, list[Example]] = {}
        self.refused: dict[str, int] = {}
        for example in examples:
            reason = replay_refusal(example, max_tokens)
            if reason is None:
                self.by_task.setdefault(example.instance_id, []).append(example)
            else:
                self.refused[reason] = self.refused.get(reason, 0) + 1
        self._next: dict[str, int] = {}

    def take(self, instance_id: str, count: int) -> list[EpisodeSample]:
        found = self.by_task.get(instance_id, [])
        taken = []
        for _ in range(count if found else 0):
            position = self._next.get(instance_id, 0)
            self._next[instance_id] = position + 1
            taken.append(replay_sample(found[position % len(found)]))
        return taken

    def positions(self) -> dict[str, int]:
        """The rotation: instance id -> how many examples of it were handed out (saved with checkpoints)."""
        return dict(self._next)

    def restore(self, positions: dict[str, int]) -> None:
        self._next = dict(positions)

    def skip(self, taken: dict[str, int]) -> None:
        """Advance the rotation past ``taken`` (instance id -> count) handed out elsewhere."""
        for instance_id, count in taken.items():
            if self.by_task.get(instance_id):
                self._next[instance_id] = self._next.get(instance_id, 0) + count


def replay_sample(example: Example) -> EpisodeSample:
    """A solved corpus example as a GRPO sample: prompt = ids before the first loss id."""
    ids, mask = example.input_ids, example.assistant_masks
    prompt_len = mask.index(1)
    response_mask = list(mask[prompt_len:])
    facts: EpisodeFacts = {"instance_id": example.instance_id, "final_test_passed": True, "termination_reason": "solved",
             "turns": sum(1 for i in range(len(response_mask)) if response_mask[i] and (i == 0 or not response_mask[i - 1])),
             "valid_tool_call_rate": 1.0, "replayed": True, "grade_refused": False}
    # The corpus' own sampler log-probs are not the policy's; 0.0 marks them unknown (TRL recomputes).
    return EpisodeSample(list(ids[:prompt_len]), list(ids[prompt_len:]), [0.0] * len(response_mask), response_mask,
                         facts)


def gather_ranks(trainer: GRPOTrainer, value: Gathered) -> list[Gathered]:
    """``value`` of every training process, in rank order (a collective: every process must call it)."""
    if trainer.accelerator.num_processes < 2:
        return [value]
    from accelerate.utils import gather_object  # optional: accelerate (pdbgym[hf])

    return list(gather_object([value]))


def play_across_ranks(trainer: GRPOTrainer, episodes: list[Task], play: Callable[[list[Task]], list[EpisodeSample]]
                      ) -> list[EpisodeFacts]:
    """The facts of every episode of ``episodes``, in order, on every process: episode i is played by
    rank i mod N (each rank's share in one batched ``play``) and the facts are gathered."""
    processes, rank = trainer.accelerator.num_processes, trainer.accelerator.process_index
    mine = episodes[rank::processes]
    local = [sample.facts for sample in play(mine)] if mine else []
    everyone = gather_ranks(trainer, local)
    return [everyone[i % processes][i // processes] for i in range(len(episodes))]
