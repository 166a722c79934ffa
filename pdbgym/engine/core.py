"""``LocalEngine``: the one place a local model samples tokens, batched across every caller of the process.

Callers submit ``EngineRequest`` objects from any thread or event loop. One scheduler thread owns the
model: it waits ``window_s`` after a request arrives for others to join it, then serves everything
pending as one batch, in one of two ways chosen per engine:

- **static** (CUDA, the default there; ``pdbgym.engine.static``): a static cache and a decode step
  recorded as a CUDA graph; requests that arrive while it runs join it (continuous batching).
- **dynamic** (CPU, and wherever the static cache does not fit the model; ``pdbgym.engine.dynamic``):
  transformers' ``DynamicCache``, the pending requests decoded together round by round.

On both, an episode's next turn continues the KV cache its last turn left (``pdbgym.engine.prefixes``),
so only the new part of its prompt is prefilled. Sampling is ``pdbgym.engine.draw``: exactly temperature
and top-p (and a grammar mask where a request carries one), nothing taken from the model's
``generation_config``; ids and log-probs come from the same processed logits. The log-prob semantics are
those of ``LogprobSemantics`` for the request's mode.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

from pdbgym.engine.attention import decode_attention
from pdbgym.engine.cuda import engine_attention, traced
from pdbgym.engine.dora import dora_norms_cached
from pdbgym.engine.draw import draw_rows
from pdbgym.engine.dynamic import Rounds
from pdbgym.engine.kv import cache_keyword, keeps_logits
from pdbgym.engine.prefixes import PrefixStore
from pdbgym.engine.static import Sessions, StaticShape
from pdbgym.engine.types import (
    EngineError,
    EngineRequest,
    EngineResult,
    EngineSettings,
    EngineStats,
    Row,
)

log = logging.getLogger("pdbgym.engine")

__all__ = ["EngineError", "EngineRequest", "EngineResult", "EngineSettings", "EngineStats", "LocalEngine"]


class LocalEngine(Sessions, Rounds):
    """Serves ``EngineRequest`` objects for one model; see the module docstring.

    ``stops``: ids that end a turn. ``pad_id``: the id padding rows are filled with. ``context``: a
    callable returning a context manager entered around each batch, which may yield the model to use
    (GRPO passes TRL's ``unwrap_model_for_generation``, so rollouts run on the trainer's live weights).
    """

    def __init__(self, model: Any, stops: set[int] | Sequence[int], pad_id: int,
                 settings: EngineSettings | None = None,
                 context: Callable[[], AbstractContextManager[Any]] | None = None):
        self.model = model
        self.stops = frozenset(int(s) for s in stops)
        self.pad_id = int(pad_id)
        self.settings = settings or EngineSettings()
        self.context = context or nullcontext
        self.device = next(model.parameters()).device
        self.stats = EngineStats()
        self._keyword = cache_keyword(model)
        self._keeps_logits = keeps_logits(model)
        self._static_reason: str | None = None  # why the static path is off, when it is
        self._trialled = False
        self._static = self._use_static()
        self._shapes: dict[tuple[int, int], StaticShape] = {}  # least recently used first
        self.prefixes = PrefixStore(self.settings.prefix_bytes)
        self._row_cap = self.settings.max_batch  # halved by each batch the device had no memory for
        self._session_bytes = self.settings.session_bytes  # likewise
        self._held: list[tuple[Row, EngineResult]] = []
        self._queue: list[Row] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._expected = 0
        self._expected_prompt = 0
        self._position_bytes = 0  # bytes of one slot's keys and values at one position of a static cache
        self._pass_seconds = 0.0  # mean seconds of recent passes admitting rows to a running static session

    # -- public ------------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``static`` or ``dynamic`` (see the module docstring)."""
        return "static" if self._static else "dynamic"

    def expect(self, rows: int, prompt_ids: int = 0) -> None:
        """Say that up to ``rows`` requests will be live at once, with prompts of up to ``prompt_ids``
        ids (an episode's context cap), so a static session sizes its slots and, within
        ``EngineSettings.session_bytes``, its length for them from the start: a later turn whose prompt
        has grown joins the running session instead of waiting for it to end, and fewer shapes are
        captured."""
        self._expected = max(self._expected, int(rows))
        self._expected_prompt = max(self._expected_prompt, int(prompt_ids))

    def submit(self, request: EngineRequest) -> Future[EngineResult]:
        """Queue ``request``; the future holds its ``EngineResult`` (or the error that stopped it)."""
        return self._enqueue([request])[0]

    def generate(self, requests: Sequence[EngineRequest]) -> list[EngineResult]:
        """Submit every request at once (the scheduler sees them together, however busy the machine) and
        wait for all (results in the same order)."""
        return [f.result() for f in self._enqueue(requests)]

    def _enqueue(self, requests: Sequence[EngineRequest]) -> list[Future[EngineResult]]:
        rows = []
        for request in requests:
            request.check()
            seed = request.seed if request.seed is not None else int.from_bytes(os.urandom(4), "little")
            rows.append(Row(request, Future(), time.perf_counter(), int(seed)))
        with self._cond:
            if self._closed:
                raise EngineError("the engine is closed")
            self._queue.extend(rows)
            self._start()
            self._cond.notify_all()
        return [row.future for row in rows]

    def forget_prefixes(self) -> None:
        """Drop every kept KV cache: the model's weights changed, so earlier turns' keys and values are
        not what it computes now (GRPO calls this after each refresh of its rollout weights)."""
        with self._cond:
            self.prefixes.forget()

    def close(self) -> None:
        """Stop serving (queued requests are still played first) and free what the engine keeps: its static
        caches, their captured graphs and the kept prefixes."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)
        if self._thread is None or not self._thread.is_alive():
            self._shapes.clear()
            self.prefixes.forget()

    # -- scheduling ----------------------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="pdbgym-engine", daemon=True)
            self._thread.start()

    def _take(self, limit: int, fits: Callable[[Row], bool] = lambda row: True) -> list[Row]:
        with self._cond:
            self._queue = [row for row in self._queue if not row.future.cancelled()]
            taken = [row for row in self._queue if fits(row)][:limit]
            for row in taken:
                self._queue.remove(row)
        now = time.perf_counter()
        for row in taken:
            row.started = now
        return taken

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed and not self._queue:
                    return
                first = min(row.submitted for row in self._queue)
            time.sleep(max(0.0, first + self.settings.window_s - time.perf_counter()))
            rows = self._take(self._row_cap)
            if not rows:
                continue
            started = time.perf_counter()
            self.stats.batches += 1
            live: list[Row] = list(rows)
            try:
                kernels = engine_attention() if self.device.type == "cuda" else nullcontext()
                with kernels, self.context() as maybe_model, torch.inference_mode():
                    model = maybe_model if maybe_model is not None else self.model
                    if self._static and not self._static_works(model):
                        self._static = False
                    if self._static:
                        with decode_attention(model):
                            self._static_session(model, rows, live)
                    else:
                        with dora_norms_cached(model) as cached:
                            self._dynamic_round(model, rows, release_early=not cached)
                self._release()
            except torch.OutOfMemoryError as exc:
                self._release()
                self._out_of_memory(live, exc)
            except BaseException as exc:  # noqa: BLE001 - every waiting caller learns of the failure
                self._release()
                log.exception("engine batch failed")
                for row in live:
                    if not row.future.done():
                        row.future.set_exception(exc if isinstance(exc, Exception) else EngineError(repr(exc)))
            finally:
                self.stats.busy_seconds += time.perf_counter() - started

    def _out_of_memory(self, live: list[Row], exc: torch.OutOfMemoryError) -> None:
        """The device had no memory for a batch (other processes on the GPU, other engines of this one):
        free what the engine holds (static caches and their graphs, kept prefixes), halve its rows a batch
        and its cache budgets, and play the unfinished rows again from their prompts. Each row samples
        with its own seed and step-keyed noise, so a replayed row draws what it would have drawn. A row
        under a grammar mask that has already drawn cannot be replayed (the mask has seen its ids), and a
        batch that fails at one row has nothing left to shrink: those fail, naming the cause."""
        self._shapes.clear()
        self.prefixes.forget()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        pending = [row for row in live if not row.future.done()]
        shrunk = self._row_cap > 1 and len(pending) > 1
        self._row_cap = max(1, min(self._row_cap, len(pending)) // 2)
        self._session_bytes = max(1 << 20, self._session_bytes // 2)
        self.prefixes.budget = max(1 << 20, self.prefixes.budget // 2)
        self.stats.oom_retries += 1
        again = [row for row in pending if shrunk and (row.request.mask is None or not row.ids)]
        replayed = {id(row) for row in again}  # rows by identity: a Row's dataclass equality compares its fields
        log.warning("engine: the device ran out of memory for a batch of %d rows; playing %d again at most %d "
                    "a batch (%s)", len(live), len(again), self._row_cap, str(exc).splitlines()[0][:200])
        for row in pending:
            if id(row) in replayed:
                row.ids, row.logprobs, row.finish, row.slot, row.position = [], [], None, -1, 0
            else:
                row.future.set_exception(EngineError(
                    f"the device ran out of memory decoding {len(pending)} row(s) at {self._row_cap} a batch "
                    f"({str(exc).splitlines()[0][:200]}): free GPU memory (another process, or fewer engines "
                    "at once) and run again"))
        with self._cond:
            self._queue[:0] = again

    # -- shared pieces -------------------------------------------------------------------------------
    def _forward(self, model: Any, ids: torch.Tensor, mask: torch.Tensor | None, positions: torch.Tensor,
                 cache: Any, step: Callable[..., Any] | None = None, last: Sequence[int] | None = None) -> torch.Tensor:
        """The logits ([rows, vocab]) at each row's ``last`` column of ``ids`` (default: the last column of
        all). Where the model takes ``logits_to_keep``, a prefill projects only those columns on the
        vocabulary (the columns are known on the host: no device sync)."""
        call = step or model
        columns = sorted(set(last)) if last is not None else [ids.shape[1] - 1]
        keep = ({"logits_to_keep": torch.tensor(columns, device=ids.device)}
                if self._keeps_logits and ids.shape[1] > 1 else {})
        logits = call(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **keep,
                      **{self._keyword: cache}).logits
        if last is None:
            return logits[:, -1, :]
        at = {column: i for i, column in enumerate(columns)} if keep else None
        picked = [at[column] for column in last] if at else list(last)
        return logits[torch.arange(len(picked), device=logits.device), torch.tensor(picked, device=logits.device)]

    def _release(self) -> None:
        """Hand the held results to their callers."""
        held, self._held = self._held, []
        for row, result in held:
            if not row.future.done():  # a caller that stopped waiting (Ctrl-C, a cancelled episode) gets nothing
                row.future.set_result(result)

    @traced("draw")
    def _draw(self, rows: Sequence[Row], logits: torch.Tensor, hold: bool = False) -> None:
        """Draw the next id of each row from its row of ``logits`` and record it. A row that ends is handed
        to its caller now, or with ``hold`` kept until ``_release`` (after the batch's context has exited:
        a caller that resumes must find the model as the context found it)."""
        started = time.perf_counter()
        masked = [i for i, row in enumerate(rows) if row.request.mask is not None]
        if masked:
            logits = logits.float().clone()
            for i in masked:
                host = logits[i].to("cpu", torch.float32)
                rows[i].request.mask.apply(host, rows[i].left)
                logits[i] = host.to(logits.device)
        device = logits.device
        temperature, top_p = torch.tensor([[r.request.temperature for r in rows], [r.request.top_p for r in rows]],
                                          dtype=torch.float32).to(device)
        seeds, steps = torch.tensor([[r.seed for r in rows], [len(r.ids) for r in rows]], dtype=torch.int64).to(device)
        ids, logprobs = draw_rows(logits, temperature, top_p, seeds, steps, [r.request.logprob_mode for r in rows])
        self._record(rows, ids.tolist(), logprobs.tolist(), hold)
        self.stats.draw_seconds += time.perf_counter() - started

    def _record(self, rows: Sequence[Row], ids: Sequence[int], values: Sequence[float], hold: bool = False) -> None:
        """Append each row's drawn id and log-prob, end the rows that stopped or reached their budget, and
        hand those to their callers (``_draw``'s ``hold``)."""
        broken = sum(1 for value in values if value != value)  # NaN: the row's logits held NaN or +inf
        if broken:
            raise EngineError(f"the model's logits are not finite (NaN or inf) in {broken} of {len(rows)} rows, so "
                              "nothing can be sampled from them: its weights, or an adapter on them, hold non-finite "
                              "values (written by a training step, say). Load weights that are finite")
        now = time.perf_counter()
        for row, token, logprob in zip(rows, ids, values, strict=True):
            if row.request.mask is not None:
                row.request.mask.accept(token)
            row.ids.append(token)
            row.logprobs.append(logprob)
            row.position += 1
            if token in self.stops:
                row.finish = "stop"
            elif row.left <= 0:
                row.finish = "length"
            if row.future.cancelled():  # its caller stopped waiting (Ctrl-C): free the row, report nothing
                row.finish = row.finish or "cancelled"
                continue
            if row.finish is not None:
                self.stats.requests += 1
                self.stats.tokens += len(row.ids)
                result = EngineResult(list(row.ids), list(row.logprobs), row.finish, now - row.started,
                                      row.started - row.submitted)
                if hold:
                    self._held.append((row, result))
                else:
                    row.future.set_result(result)
