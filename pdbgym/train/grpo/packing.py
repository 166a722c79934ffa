"""The update's forwards over rows of similar length, each row moved to the left edge and no mask.

TRL scores a step's sequences as one batch: prompts left-padded, completions right-padded, every row as
wide as the longest prompt plus the longest completion. A GRPO step's episodes range from a few hundred
ids to the whole context (a tool's output counts, though it is not trained on), so most of such a batch
can be padding, which the policy forward, the reference forward and the backward all pay for, and its
padding mask keeps attention off its fastest kernels: a mask rules out the flash kernel, and on an H100
the update of the short experiment's real episodes ran about 4x slower than a random-weight step of as
many trained ids (``docs/benchmarks.md``). Here the rows are grouped longest first, each group holding at
most ``budget`` ids (its rows times its longest row), and each row of a group starts at column 0, its
padding after it. Causal attention never looks past a row's own ids then, so the group needs no mask:
``scaled_dot_product_attention`` gets ``is_causal`` and may take the flash kernel. The log-probs (and
entropies) come back in TRL's shape, zeros on the columns a row does not use, which are padding
(``completion_mask`` 0).

Moving a row left shifts its position ids by a constant: rotary attention depends on positions'
differences only, so the log-probs are those of the whole batch up to float rounding
(``tests/train/test_grpo_packing.py``). The padding at a row's end is scored too (its ids are the pad id,
so its log-probs are finite) and dropped.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Score = Callable[..., tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]


def length_groups(first: list[int], last: list[int], budget: int) -> list[list[int]]:
    """Row indices in groups: rows taken by span (``last - first + 1``), longest first, into a group while its
    rows times its longest span stay within ``budget``; a row longer than ``budget`` is a group of its own."""
    span = [b - a + 1 for a, b in zip(first, last, strict=True)]
    order = sorted(range(len(first)), key=lambda i: span[i], reverse=True)
    groups: list[list[int]] = []
    for i in order:
        if groups and span[groups[-1][0]] * (len(groups[-1]) + 1) <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def grouped_scores(score: Score, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                   budget: int, compute_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``score(ids, mask, keep, compute_entropy=...)`` (TRL's ``_get_per_token_logps_and_entropies`` on one
    group) over ``length_groups`` of the rows, each row moved to its group's left edge and the mask all
    ones; returns the log-probs and entropies as ``[rows, logits_to_keep]``, in the rows' order."""
    rows, width = input_ids.shape
    device = input_ids.device
    valid = attention_mask.bool()
    columns = torch.arange(width, device=device).expand(rows, width)
    first = torch.where(valid, columns, width).amin(dim=1).clamp(max=width - 1).tolist()
    last = torch.where(valid, columns, -1).amax(dim=1).clamp(min=0).tolist()
    start = width - logits_to_keep  # TRL's first completion column
    logps = torch.zeros(rows, logits_to_keep, device=device)
    entropies = torch.zeros(rows, logits_to_keep, device=device) if compute_entropy else None
    for group in length_groups(first, last, budget):
        index = torch.tensor(group, device=device)
        lengths = torch.tensor([last[i] - first[i] + 1 for i in group], device=device)
        offsets = torch.tensor([first[i] for i in group], device=device)
        wide = int(lengths.max())
        # row r of the group: its ids from column first[r] on, at columns 0.. (past its end: wrapped ids of
        # its own, masked out below, which keep every scored id a real one)
        at = (offsets[:, None] + torch.arange(wide, device=device)) % width
        ids = input_ids[index[:, None], at]
        # the scorer returns the last ``keep`` columns: from the least shifted first completion column on
        keep = min(max(1, wide - (start - max(first[i] for i in group))), max(1, wide - 1))
        got, entropy, _ = score(ids, torch.ones_like(ids), keep, compute_entropy=compute_entropy)
        # TRL column start + j of row r sits at column start + j - first[r] of the group, which is column
        # start + j - first[r] - (wide - keep) of what the scorer returned
        j = torch.arange(logits_to_keep, device=device)
        source = start + j[None, :] - offsets[:, None] - (wide - keep)
        inside = (source >= 0) & (source < keep) & (start + j[None, :] <= offsets[:, None] + lengths[:, None] - 1)
        source = source.clamp(0, keep - 1)
        logps = logps.index_put((index,), torch.where(inside, got.gather(1, source), 0.0).to(logps.dtype))
        if entropies is not None and entropy is not None:
            entropies = entropies.index_put((index,), torch.where(inside, entropy.gather(1, source), 0.0)
                                            .to(entropies.dtype))
    return logps, entropies
