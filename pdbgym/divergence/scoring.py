"""Force-decoding cached token ids with a HF causal LM: log-probs of the cached response tokens.

Never re-tokenizes: the cached ids go in as they are. Response token j (absolute index in
``record.tokens``) is scored from the model's output at position j-1, and only positions with
``loss_mask == 1`` are scored. Full [T, V] logits are never built: the base model runs to its final
hidden states, the hidden rows of the scored positions are gathered, and the lm_head runs over them in
chunks, each upcast to fp32 for its logsumexp (``transform.token_logprobs``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rich.console import Console

from pdbgym.divergence.loading import check_vocab, lm_head_and_decoder
from pdbgym.divergence.transform import check_transform, token_logprobs
from pdbgym.errors import PdbgymError
from pdbgym.progress import progress
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord

if TYPE_CHECKING:  # annotations only: torch and transformers load with a model
    import torch
    from transformers import PreTrainedModel


class ScoringInputError(PdbgymError):
    """A record cannot be scored as given."""


DEFAULT_LOGIT_CHUNK_BYTES = 256 * 2**20


@dataclass
class ScoringConfig:
    """How to batch and chunk the scoring forward passes.

    token_budget: most padded tokens (batch x longest sequence) per forward pass; a sequence longer
        than the budget runs alone. max_padding_share: a record joins a batch only while padding stays
        at most this share of the batch's tokens (padding is wasted compute and forces a masked,
        slower attention kernel). logit_chunk_positions: scored positions per lm_head chunk; None
        derives it from logit_chunk_bytes (fp32 bytes of one chunk's [positions, V] logits).
    """

    # Batching pays only for short records: on an H200, padded batches of 2k-8k-token records scored
    # 9% slower than one record at a time (masked attention), see docs/benchmarks.md.
    token_budget: int = 4096
    max_padding_share: float = 0.1
    logit_chunk_positions: int | None = None
    logit_chunk_bytes: int = DEFAULT_LOGIT_CHUNK_BYTES
    show_progress: bool = True
    progress_label: str = "scoring"

    def chunk_positions(self, vocab_size: int) -> int:
        if self.logit_chunk_positions is not None:
            return max(1, self.logit_chunk_positions)
        return max(16, self.logit_chunk_bytes // (4 * vocab_size))


def scored_positions(record: RolloutRecord) -> np.ndarray:
    """Absolute indices into ``record.tokens`` of the response tokens with loss_mask == 1."""
    mask = np.asarray(record.loss_mask, dtype=np.int64)
    return record.prompt_len + np.flatnonzero(mask == 1)


def masked_rollout_logprobs(record: RolloutRecord) -> np.ndarray:
    """The cached ``rollout_log_probs`` at the scored (loss_mask == 1) positions, float64 nats."""
    mask = np.asarray(record.loss_mask, dtype=np.int64)
    return np.asarray(record.rollout_log_probs, dtype=np.float64)[mask == 1]


def plan_batches(lengths: Sequence[int], token_budget: int, max_padding_share: float = 0.1) -> list[list[int]]:
    """Group record indices into forward batches of at most ``token_budget`` padded tokens.

    Longest first, so neighbours have similar lengths; a record joins the current batch only while
    padding stays within ``max_padding_share`` of the padded tokens. Records of length 0 (nothing to
    score) are left out; a record longer than the budget gets a batch of its own.
    """
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for index in order:
        if batches:
            current = batches[-1]
            padded = (len(current) + 1) * lengths[current[0]]
            real = sum(lengths[i] for i in current) + lengths[index]
            if padded <= token_budget and padded - real <= max_padding_share * padded:
                current.append(index)
                continue
        batches.append([index])
    return batches


def record_lengths(records: Sequence[RolloutRecord]) -> list[int]:
    """Tokens each record runs through the model (up to its last scored position); 0: nothing scored."""
    return [int(p[-1]) if len(p) else 0 for p in map(scored_positions, records)]


def plan_record_batches(records: Sequence[RolloutRecord], config: ScoringConfig) -> list[list[int]]:
    """``plan_batches`` over ``records`` under ``config``: the forward batches ``score_records`` runs."""
    return plan_batches(record_lengths(records), config.token_budget, config.max_padding_share)


def _forward_inputs(records: Sequence[RolloutRecord], lengths: Sequence[int], device: torch.device
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Right-padded input ids [B, L] and attention mask (None when no row is padded)."""
    import torch  # optional: torch (pdbgym[hf])

    longest = max(lengths)
    ids = torch.zeros((len(records), longest), dtype=torch.long)
    mask = torch.zeros((len(records), longest), dtype=torch.long)
    for row, (record, length) in enumerate(zip(records, lengths, strict=True)):
        ids[row, :length] = torch.tensor(record.tokens[:length], dtype=torch.long)
        mask[row, :length] = 1
    attention = None if bool(mask.all()) else mask.to(device)
    return ids.to(device), attention


def _score_batch(
    model: PreTrainedModel, records: Sequence[RolloutRecord], semantics: LogprobSemantics, chunk: int
) -> list[np.ndarray]:
    import torch  # optional: torch (pdbgym[hf])

    lm_head, decoder = lm_head_and_decoder(model)
    device = lm_head.weight.device
    positions = [scored_positions(r) for r in records]
    lengths = [int(p[-1]) for p in positions]  # inputs up to j-1 for the last scored token j
    ids, attention = _forward_inputs(records, lengths, device)
    hidden = decoder(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
    width = ids.shape[1]
    rows = np.concatenate([row * width + p - 1 for row, p in enumerate(positions)])
    targets = torch.tensor(np.concatenate([np.asarray(r.tokens)[p] for r, p in zip(records, positions, strict=True)]))
    # With a device map the last hidden states may sit on another GPU than the lm_head.
    gathered = hidden.reshape(-1, hidden.shape[-1]).index_select(0, torch.from_numpy(rows).to(hidden.device))
    gathered = gathered.to(device)
    del hidden
    targets = targets.to(device)
    pieces = [
        token_logprobs(lm_head(gathered[start : start + chunk]), targets[start : start + chunk], semantics)
        for start in range(0, gathered.shape[0], chunk)
    ]
    flat = torch.cat(pieces).double().cpu().numpy()
    return np.split(flat, np.cumsum([len(p) for p in positions])[:-1])


def score_records(
    model: PreTrainedModel,
    records: Sequence[RolloutRecord],
    semantics: LogprobSemantics,
    config: ScoringConfig | None = None,
    on_batch: Callable[[int], None] | None = None,
    batches: Sequence[Sequence[int]] | None = None,
) -> list[np.ndarray]:
    """Log-probs (float64 nats) of each record's scored tokens under ``model`` and ``semantics``.

    Returns one array per record, aligned with ``scored_positions(record)`` (length sum(loss_mask));
    -inf where a renormalized top-p nucleus excludes the token. ``model`` is a loaded HF causal LM
    (see ``loading.load_causal_lm``); its dtype and device are used as they are. ``batches``: score
    only these forward batches of record indices (a data-parallel shard of ``plan_record_batches``);
    records outside them get empty arrays. A record's values depend on the batch it ran in (padding
    width changes the kernels' rounding), so a shard of whole planned batches scores exactly as the
    whole cache would.
    """
    import torch  # optional: torch (pdbgym[hf])

    config = config or ScoringConfig()
    check_transform(semantics)
    check_vocab(model, records)
    for record in records:
        if record.prompt_len == 0 and record.loss_mask and record.loss_mask[0] == 1:
            raise ScoringInputError(
                f"record {record.instance_id!r} (sample {record.sample_idx}) scores its very first token "
                "(prompt_len 0, loss_mask[0] 1), which has no context to be predicted from; set "
                "loss_mask[0] to 0 or include the prompt"
            )
    chunk = config.chunk_positions(lm_head_and_decoder(model)[0].weight.shape[0])
    lengths = record_lengths(records)
    results: list[np.ndarray] = [np.zeros(0) for _ in records]
    if batches is None:
        batches = plan_batches(lengths, config.token_budget, config.max_padding_share)
    total = sum(lengths[i] for batch in batches for i in batch)
    with torch.inference_mode(), _progress(config, total) as advance:
        for batch in batches:
            scored = _score_batch(model, [records[i] for i in batch], semantics, chunk)
            for index, values in zip(batch, scored, strict=True):
                results[index] = values
            tokens = sum(lengths[i] for i in batch)
            advance(tokens)
            if on_batch is not None:
                on_batch(tokens)
    return results


class _progress:
    """Progress over scored tokens (``pdbgym.progress``: a bar on a terminal, timed lines when piped), or a no-op."""

    def __init__(self, config: ScoringConfig, total_tokens: int) -> None:
        self.enabled = config.show_progress
        self.label = config.progress_label
        self.total = total_tokens

    def __enter__(self) -> Callable[[int], None]:
        if not self.enabled:
            return lambda _tokens: None
        self.shown = progress(Console(stderr=True), transient=True)
        bars = self.shown.__enter__()
        task = bars.add_task(f"{self.label} (tokens)", total=self.total)
        return lambda tokens: bars.advance(task, tokens)

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.shown.__exit__(*exc)

