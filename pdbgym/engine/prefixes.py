"""The KV caches the engine keeps between an episode's turns, to be continued by the next one.

An episode's next prompt is its last prompt, the ids sampled for it and what the environment said: the
kept cache of the earlier turn holds the first part already, so only the rest is prefilled. Caches are
kept newest first and dropped oldest first beyond a byte budget; the newest ``PREFIXES_KEPT`` (and a
whole round's rows) stay whatever their size.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pdbgym.engine.kv import cache_bytes, rows_problem

log = logging.getLogger("pdbgym.engine")
PREFIXES_KEPT = 4  # earlier turns' KV caches kept at least (the dynamic path: and every row of the last round)


@dataclass
class Prefix:
    """The ids an episode's turn has been fed (its prompt and every sampled id but the last) and their
    one-row KV cache."""

    ids: list[int]
    cache: Any
    size: int = 0  # bytes of its keys and values


class PrefixStore:
    """Kept caches, newest first, within ``budget`` bytes (see the module docstring)."""

    def __init__(self, budget: int):
        self.budget = budget
        self.held: list[Prefix] = []
        self.joinable: bool | None = None  # can rows' caches be cut and joined by position (kv.rows_problem)

    def __bool__(self) -> bool:
        return bool(self.held)

    def take(self, prompt: Sequence[int]) -> Prefix | None:
        """The longest kept cache whose ids are a proper prefix of ``prompt`` (the newest of equals),
        removed from the store (None if none). Longest, not first found: episodes that sampled the same ids
        (near-greedy) hold the same prefixes, and a later turn taking a twin's shorter, newer cache would
        leave that twin's next turn none to continue (a whole prompt prefilled again)."""
        best: Prefix | None = None
        for prefix in self.held:  # newest first
            n = len(prefix.ids)
            if n >= len(prompt) or (best is not None and n <= len(best.ids)) \
                    or any(prompt[i] != prefix.ids[i] for i in (n - 1, n // 2, n - 2) if i >= 0):
                continue  # a few ids first: episodes of one task share their long first prompt
            if list(prompt[:n]) == prefix.ids:
                best = prefix
        if best is not None:
            self.held.remove(best)
        return best

    def keep(self, ids: list[int], cache: Any) -> None:
        self.rows_join(cache)  # learnt from the first cache kept, one row's or a round's: a round whose rows
        # continue kept caches before any round of several rows was kept must not prefill them all afresh
        self.held.insert(0, Prefix(ids, cache, cache_bytes(cache)))

    def trim(self, rows: int) -> None:
        """Drop the oldest kept caches beyond the budget; the newest ``rows`` (and ``PREFIXES_KEPT``) stay."""
        held, keep = 0, 0
        for prefix in self.held:  # newest first
            if keep >= max(PREFIXES_KEPT, rows) and held + prefix.size > self.budget:
                break
            held += prefix.size
            keep += 1
        del self.held[keep:]

    def forget(self) -> None:
        self.held = []

    def rows_join(self, cache: Any) -> bool:
        """Whether batched rows' caches can be cut and joined by position, learnt from the first ``cache``
        kept (``kv.rows_problem``; its layers' kinds, whatever its rows) and said once where they cannot."""
        if self.joinable is None:
            problem = rows_problem(cache)
            self.joinable = problem is None
            if problem:
                log.info("engine: batched rows re-prefill every turn: %s", problem)
        return self.joinable
