"""The engine's dynamic path (CPU, and wherever a static cache does not fit the model): transformers'
``DynamicCache``, the pending requests decoded together round by round.

A request continues the KV cache of an earlier turn whose ids are a prefix of its prompt (an episode's
trajectory only grows, ``pdbgym.engine.prefixes``), so only the new suffix is prefilled. The rows of a
round that continue kept caches are extended in one forward pass: their caches joined, right-aligned
(``kv.join_rows``), each new part right-padded after them, and each row moved back to end at the last
column (``kv.right_align``); the rows are cut apart again to be kept for the next turn. A prefill
projects only the columns it samples from on the vocabulary (``logits_to_keep``). The prefill pieces
here serve the static sessions too (``pdbgym.engine.static``): a row joining one is prefilled the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from pdbgym.engine.cuda import synchronize, traced
from pdbgym.engine.kv import counted, cut_row, join_rows, new_dynamic_cache, right_align
from pdbgym.engine.prefixes import Prefix, PrefixStore
from pdbgym.engine.regional import compiled_forward
from pdbgym.engine.types import EngineSettings, EngineStats, Row

log = logging.getLogger("pdbgym.engine")


class Rounds:
    """The prefill and dynamic-round half of ``LocalEngine`` (a mixin: the engine holds the state)."""

    device: torch.device
    pad_id: int
    settings: EngineSettings
    stats: EngineStats
    prefixes: PrefixStore
    _forward: Callable[..., torch.Tensor]
    _draw: Callable[..., None]
    _release: Callable[[], None]
    _eager_passes = False  # a compiled prefill pass failed: the model's own forward from then on (``_pass``)

    def _prefill(self, model: Any, rows: Sequence[Row]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """Left-padded prefill of ``rows``' prompts into a fresh dynamic cache; returns the last
        position's logits, the cache and the attention mask ([rows, width])."""
        width = max(len(r.request.prompt_ids) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            prompt = row.request.prompt_ids
            ids[i, width - len(prompt):] = torch.tensor(list(prompt), dtype=torch.long)
            mask[i, width - len(prompt):] = 1
            row.position = len(prompt)
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        started = time.perf_counter()
        # prompts of one length need no mask: transformers then attends causally (sdpa's flash kernel)
        even = all(len(r.request.prompt_ids) == width for r in rows)
        logits, cache = self._pass(model, ids, None if even else mask, positions, new_dynamic_cache(model))
        if self.device.type == "cuda":
            synchronize()
        self.stats.prefill_seconds += time.perf_counter() - started
        self.stats.prefills += 1
        self.stats.prefill_tokens += int(mask.sum())
        return logits, cache, mask

    def _extend(self, model: Any, rows: Sequence[Row], prefixes: Sequence[Prefix]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """Prefill, in one forward pass, the part of each row's prompt past its kept prefix (an earlier
        turn of its episode): the prefixes joined right-aligned, each row's new part right-padded after
        them. Returns the first logits, one cache with every row right-aligned at its prompt's end and the
        attention mask, as ``_prefill`` does."""
        kept = [len(p.ids) for p in prefixes]
        new = [len(r.request.prompt_ids) - k for r, k in zip(rows, kept, strict=True)]
        width, span = max(kept), max(new)
        cache = prefixes[0].cache if len(rows) == 1 else join_rows([p.cache for p in prefixes], model, width)
        ids = torch.full((len(rows), span), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width + span), dtype=torch.long)
        for i, (row, k, n) in enumerate(zip(rows, kept, new, strict=True)):
            ids[i, :n] = torch.tensor(list(row.request.prompt_ids[k:]), dtype=torch.long)
            mask[i, width - k:width + n] = 1  # a pad after a row's new part is later than every id it has
            row.position = k + n
        positions = torch.tensor(kept)[:, None] + torch.arange(span)[None, :]
        started = time.perf_counter()
        logits, cache = self._pass(model, ids.to(self.device), mask.to(self.device), positions.to(self.device),
                                   cache, last=[n - 1 for n in new])
        if len(rows) > 1:
            ends = torch.tensor(new, device=self.device) + width
            cache = right_align(cache, model, ends, max(r.position for r in rows))
        if self.device.type == "cuda":
            synchronize()
        self.stats.prefill_seconds += time.perf_counter() - started
        self.stats.prefills += 1
        self.stats.prefill_tokens += sum(new)
        self.stats.reused_tokens += sum(kept)
        return logits, cache, self._right_mask(rows)

    def _pass(self, model: Any, ids: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor, cache: Any,
              last: Sequence[int] | None = None) -> tuple[torch.Tensor, Any]:
        """A prefill pass's forward (``_forward``) and the cache it filled. With ``graphs="compiled"``, through
        the model's decoder layers compiled once for all (``regional.compiled_forward``, the decode step's
        compile) on a copy of ``cache`` that counts its layers' writes (``kv.counted``): a pass through the
        model's own forward is some 1,500 operator calls for a 30-layer model, and on a GPU a pass spent 60 ms of
        its own Python beside 57 ms of kernels in a real GRPO step (docs/benchmarks.md, sixth session). Where the compiled pass fails (a shape or model inductor
        cannot take), it says why once and every pass runs the model's own forward from then on, this one
        again from ``cache`` as it was (the copy's layers took the failed pass's writes)."""
        if self.settings.graphs == "compiled" and not self._eager_passes:
            copy = counted(cache)
            try:
                return self._forward(model, ids, mask, positions, copy, step=compiled_forward(model), last=last), copy
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of the compile: the model's own forward
                self._eager_passes = True
                log.warning("engine: prefill passes run the model's own forward: compiling them failed (%s: %s)",
                            type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else "", exc_info=True)
        return self._forward(model, ids, mask, positions, cache, last=last), cache

    def _right_mask(self, rows: Sequence[Row]) -> torch.Tensor:
        """The attention mask of ``rows`` right-aligned at their positions ([rows, longest])."""
        width = max(r.position for r in rows)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            mask[i, width - row.position:] = 1
        return mask.to(self.device)

    @traced("prefill")
    def _start_rows(self, model: Any, rows: list[Row]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """The first logits of every row, their KV cache (right-aligned) and attention mask.

        The rows whose prompts extend a kept prefix (an earlier turn of their episodes) prefill only their
        new parts, together in one pass; the others are prefilled together afresh. The two groups are then
        joined into one cache, which is possible where the cache's columns are positions
        (``kv.rows_problem``); where they are not, every row is prefilled afresh, together.
        """
        reuse = self.settings.reuse_prefix and (len(rows) == 1 or self.prefixes.joinable)
        prefixes = [self.prefixes.take(r.request.prompt_ids) if reuse else None for r in rows]
        fresh = [r for r, p in zip(rows, prefixes, strict=True) if p is None]
        continued = [r for r, p in zip(rows, prefixes, strict=True) if p is not None]
        kept = [p for p in prefixes if p is not None]
        if not continued:
            return self._prefill(model, rows)
        if not fresh:
            return self._extend(model, rows, kept)
        firsts: dict[int, torch.Tensor] = {}
        caches: dict[int, Any] = {}
        for group, (logits, cache, mask) in ((fresh, self._prefill(model, fresh)),
                                             (continued, self._extend(model, continued, kept))):
            width = mask.shape[1]
            for i, row in enumerate(group):
                firsts[id(row)] = logits[i:i + 1]
                caches[id(row)] = cut_row(cache, model, i, width - row.position, width)
        cache = join_rows([caches[id(r)] for r in rows], model, max(r.position for r in rows))
        return torch.cat([firsts[id(r)] for r in rows]), cache, self._right_mask(rows)

    def _keep(self, model: Any, rows: list[Row], cache: Any, width: int) -> None:
        """Keep each row's KV cache (its prompt and every id but the last) for the episode's next turn."""
        if not self.settings.reuse_prefix:
            return
        if len(rows) > 1 and not self.prefixes.rows_join(cache):
            return
        started = time.perf_counter()
        for i, row in enumerate(rows):
            ids = list(row.request.prompt_ids) + row.ids[:-1]
            start = width - len(row.request.prompt_ids)
            kept = cache if len(rows) == 1 else cut_row(cache, model, i, start, start + len(ids))
            self.prefixes.keep(ids, kept)
        self.prefixes.trim(len(rows))
        self.stats.keep_seconds += time.perf_counter() - started

    def _dynamic_round(self, model: Any, rows: list[Row], release_early: bool = True) -> None:
        """Decode ``rows`` together to their ends. With ``release_early`` a row that ends goes back to its
        caller at once (its episode steps while the others decode); without it (the model is in a state
        its owner must not see, ``dora_norms_cached``) every result waits for the batch's context to exit."""
        logits, cache, mask = self._start_rows(model, rows)
        width = mask.shape[1]
        self._draw(rows, logits, hold=True)
        while any(r.finish is None for r in rows):
            if release_early:
                self._release()  # rows that ended go back to their episodes while the others decode
            started = time.perf_counter()
            feed = torch.tensor([[r.ids[-1] if r.finish is None else self.pad_id] for r in rows],
                                dtype=torch.long, device=self.device)
            positions = torch.tensor([[r.position - 1] for r in rows], dtype=torch.long, device=self.device)
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=self.device)], dim=1)
            logits = self._forward(model, feed, mask, positions, cache)
            self.stats.step_seconds += time.perf_counter() - started
            self.stats.decode_steps += 1
            live = [r for r in rows if r.finish is None]
            self.stats.row_steps += len(live)
            self._draw(live, logits[[i for i, r in enumerate(rows) if r.finish is None]], hold=True)
        self._keep(model, rows, cache, width)  # the last rows to end are released after the batch's context
