"""The update's forwards over rows of similar length, each group's padding cut away.

TRL scores a step's sequences as one batch: prompts left-padded, completions right-padded, every row as
wide as the longest prompt plus the longest completion. A GRPO step's episodes range from a few hundred
ids to the whole context, so most of such a batch can be padding, which the policy forward, the
reference forward and the backward all pay for (attention quadratically). Here the rows are grouped
longest first, each group holding at most ``budget`` padded ids, and each group's forward sees only the
columns some row of it uses; the log-probs (and entropies) come back in TRL's shape, zeros on the
columns a group did not compute, which are padding (``completion_mask`` 0) for every row of it.

Cutting a group's left padding moves its rows' position ids by a constant: rotary attention depends on
positions' differences only, so the log-probs are those of the whole batch up to float rounding
(``tests/train/test_grpo_packing.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Score = Callable[..., tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]


def length_groups(first: list[int], last: list[int], budget: int) -> list[list[int]]:
    """Row indices in groups: rows taken by span (``last - first``), longest first, into a group while its
    rows times its width (its columns from the least ``first`` to the greatest ``last``) stay within
    ``budget``; a row wider than ``budget`` is a group of its own."""
    order = sorted(range(len(first)), key=lambda i: last[i] - first[i], reverse=True)
    groups: list[list[int]] = []
    low = high = 0
    for i in order:
        if groups:
            width = max(high, last[i]) - min(low, first[i]) + 1
            if width * (len(groups[-1]) + 1) <= budget:
                groups[-1].append(i)
                low, high = min(low, first[i]), max(high, last[i])
                continue
        groups.append([i])
        low, high = first[i], last[i]
    return groups


def grouped_scores(score: Score, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                   budget: int, compute_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``score(ids, mask, keep, compute_entropy=...)`` (TRL's ``_get_per_token_logps_and_entropies`` on one
    group) over ``length_groups`` of the rows, each group cut to its columns; returns the log-probs and
    entropies as ``[rows, logits_to_keep]``, in the rows' order."""
    rows, width = input_ids.shape
    valid = attention_mask.bool()
    columns = torch.arange(width, device=input_ids.device).expand(rows, width)
    first = torch.where(valid, columns, width).amin(dim=1).clamp(max=width - 1).tolist()
    last = torch.where(valid, columns, -1).amax(dim=1).clamp(min=0).tolist()
    start = width - logits_to_keep  # the first completion column
    logps: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    order: list[int] = []
    for group in length_groups(first, last, budget):
        left = min(first[i] for i in group)
        right = max(max(last[i] for i in group) + 1, start + 1)  # at least one completion column
        left = min(left, start)  # the completion columns the group keeps start where TRL's do
        index = torch.tensor(group, device=input_ids.device)
        keep = right - start
        got, entropy, _ = score(input_ids[index, left:right], attention_mask[index, left:right], keep,
                                compute_entropy=compute_entropy)
        pad = (0, logits_to_keep - keep)
        logps.append(torch.nn.functional.pad(got, pad))
        if compute_entropy and entropy is not None:
            entropies.append(torch.nn.functional.pad(entropy, pad))
        order.extend(group)
    back = torch.empty(rows, dtype=torch.long, device=input_ids.device)
    back[torch.tensor(order, device=input_ids.device)] = torch.arange(rows, device=input_ids.device)
    joined = torch.cat(logps).index_select(0, back)
    return joined, (torch.cat(entropies).index_select(0, back) if entropies else None)
