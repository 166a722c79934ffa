"""``LocalEngine``: the one place a local model samples tokens, batched across every caller of the process.

Callers submit ``EngineRequest`` objects from any thread or event loop. One scheduler thread owns the
model: it waits ``window_s`` after a request arrives for others to join it, then serves everything
pending as one batch. Two ways to decode, chosen per engine:

- **static** (CUDA, the default there): a ``StaticCache`` of ``slots`` rows and ``length`` positions and
  a decode step compiled by transformers (``get_compiled_call``: ``torch.compile``, mode
  ``reduce-overhead``, i.e. CUDA graphs). Every row writes at one shared head; a prompt is prefilled on
  its own and its keys and values are placed right-aligned below the head in a free slot, so a request
  that arrives while others decode joins the running batch at the next step (continuous batching), as
  long as its prompt fits below the head and its budget above it. A row that ends leaves a copy of its
  keys and values (its slot's positions) to be continued by its episode's next turn, as on the dynamic
  path: that turn prefills only its new part. Slot counts and lengths come in
  buckets (powers of two), so the number of compiled shapes stays small; each compile is counted,
  timed and logged.
- **dynamic** (CPU, and wherever the static cache does not fit the model): transformers'
  ``DynamicCache``, the pending requests decoded together round by round. A request continues the KV
  cache of an earlier turn whose ids are a prefix of its prompt (an episode's trajectory only grows), so
  only the new suffix is prefilled. The rows of a round that continue kept caches are extended in one
  forward pass: their caches joined, right-aligned (``kv.join_rows``), each new part right-padded after
  them, and each row moved back to end at the last column (``kv.right_align``); the rows are cut apart
  again to be kept for the next turn. A prefill projects only the columns it samples from on the
  vocabulary (``logits_to_keep``).

Sampling is ``pdbgym.engine.draw``: exactly temperature and top-p (and a grammar mask where a request
carries one), nothing taken from the model's ``generation_config``; ids and log-probs come from the
same processed logits. The log-prob semantics are those of ``LogprobSemantics`` for the request's mode.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from pdbgym.engine.attention import decode_attention
from pdbgym.engine.dora import dora_norms_cached
from pdbgym.engine.draw import LOGPROB_MODES, draw_rows
from pdbgym.engine.kv import (
    cache_bytes,
    cache_keyword,
    cut_row,
    join_rows,
    keeps_logits,
    new_dynamic_cache,
    new_static_cache,
    place_rows,
    right_align,
    rows_problem,
    set_head,
    static_cache_problem,
)
from pdbgym.errors import PdbgymError

log = logging.getLogger("pdbgym.engine")
# CUDA graph captures of every engine of the process, one at a time; the engines' device-wide syncs wait
# for a capture in another thread to end (a sync of a capturing stream would invalidate it).
_CAPTURE = threading.RLock()


def _synchronize() -> None:
    with _CAPTURE:
        torch.cuda.synchronize()

SLOT_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
LENGTH_STEP = 512  # static cache lengths are multiples of this (a captured graph costs about a second)
MIN_SLOTS = 8  # a static session leaves room for requests that arrive while it runs
JOIN_STEPS = 256  # decode steps, at least, during which a static session takes requests that arrive
PREFIXES_KEPT = 4  # earlier turns' KV caches kept at least (the dynamic path: and every row of the last round)


class EngineError(PdbgymError):
    """A request the engine cannot serve (bad settings), or the model call failed."""


@dataclass(frozen=True)
class EngineRequest:
    """One turn to sample: ``prompt_ids`` continued by at most ``max_new_tokens`` ids, ending after a stop id.

    ``seed`` fixes the draw (None: random); ``mask`` is a grammar state with ``apply(logits_row, left)``
    and ``accept(id)`` (``pdbgym.agent.constrained.TurnMask``) that forbids ids before each draw.
    """

    prompt_ids: Sequence[int]
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    logprob_mode: str = "tempered"
    mask: Any = None

    def check(self) -> None:
        if not self.prompt_ids:
            raise EngineError("an empty prompt: give at least one token id")
        if self.max_new_tokens < 1:
            raise EngineError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not 0.0 < self.top_p <= 1.0:
            raise EngineError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.temperature < 0:
            raise EngineError(f"temperature must be >= 0, got {self.temperature}")
        if self.logprob_mode not in LOGPROB_MODES:
            raise EngineError(f"logprob_mode must be one of {LOGPROB_MODES}, got {self.logprob_mode!r}")


@dataclass
class EngineResult:
    """The sampled ids (a stop id, when sampled, is the last), one log-prob per id, and why it ended:
    ``stop`` or ``length``. ``model_seconds``: from entering a batch to the last id; ``queued_seconds``:
    from submission to entering a batch."""

    ids: list[int]
    logprobs: list[float]
    finish: str
    model_seconds: float
    queued_seconds: float


@dataclass(frozen=True)
class EngineSettings:
    """How the engine batches and decodes.

    Args:
        window_s: how long a request waits for others before a batch starts. Default 0.003.
        max_batch: rows decoded together at most. Default 64.
        static: decode with a static cache and CUDA graphs; None: on CUDA devices. Default None.
        min_length: the smallest static cache length (lengths are multiples of ``LENGTH_STEP``). Default 1024.
        graphs: how a static decode step becomes a CUDA graph: ``capture`` records the model's own
            forward once per shape (about a second), ``compiled`` has transformers compile it
            (``get_compiled_call``: inductor kernels, tens of seconds per shape). Default ``capture``.
        reuse_prefix: keep each request's KV cache for a later prompt that extends it (an episode's next
            turn), so only the new part is prefilled (both paths). Default True.
        prefix_bytes: how many bytes of kept KV caches are held beyond ``PREFIXES_KEPT`` and, on the
            dynamic path, the last round's rows (oldest dropped first). Default 2 GiB.
        session_bytes: how many bytes a static session's cache may take so that longer prompts than
            its first rows' (the later turns of the same episodes, up to the length given to ``expect``)
            join it while it runs; a session never gets less than its first rows need. Each decode step
            reads the whole cache, so this also bounds what the room costs a step. Default 4 GiB.
    """

    window_s: float = 0.003
    max_batch: int = 64
    static: bool | None = None
    min_length: int = 1024
    graphs: str = "capture"
    reuse_prefix: bool = True
    prefix_bytes: int = 2 << 30
    session_bytes: int = 4 << 30


@dataclass
class EngineStats:
    """What the engine did since it started. ``compiles``: one entry per compiled decode shape
    (``slots``, ``length``, ``seconds`` of the first call at that shape, warm-up included)."""

    requests: int = 0
    tokens: int = 0  # sampled ids of finished requests
    decode_steps: int = 0
    prefills: int = 0
    prefill_tokens: int = 0
    reused_tokens: int = 0
    batches: int = 0  # dynamic rounds and static sessions started
    busy_seconds: float = 0.0
    prefill_seconds: float = 0.0
    draw_seconds: float = 0.0  # sampling and bookkeeping, host round trip included
    step_seconds: float = 0.0  # decode steps: their inputs set and the forward (or graph replay) launched
    keep_seconds: float = 0.0  # ended rows' caches kept for their episodes' next turns
    admit_seconds: float = 0.0  # rows joining a static session, less their prefill, draw and kept caches
    row_steps: int = 0  # sum over decode steps of the rows that were live
    compiles: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "tokens": self.tokens, "decode_steps": self.decode_steps,
                "prefills": self.prefills, "prefill_tokens": self.prefill_tokens,
                "reused_tokens": self.reused_tokens, "batches": self.batches,
                "busy_seconds": round(self.busy_seconds, 3), "prefill_seconds": round(self.prefill_seconds, 3),
                "draw_seconds": round(self.draw_seconds, 3), "step_seconds": round(self.step_seconds, 3),
                "keep_seconds": round(self.keep_seconds, 3), "admit_seconds": round(self.admit_seconds, 3),
                "mean_live_rows": round(self.row_steps / self.decode_steps, 2) if self.decode_steps else 0.0,
                "compiles": list(self.compiles)}


@dataclass
class _Row:
    request: EngineRequest
    future: Future[EngineResult]
    submitted: float
    seed: int
    started: float = 0.0
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    slot: int = -1
    position: int = 0  # the position id of the next id fed to the model

    @property
    def left(self) -> int:
        return self.request.max_new_tokens - len(self.ids)


@dataclass
class _Prefix:
    ids: list[int]
    cache: Any
    size: int = 0  # bytes of its keys and values


@dataclass
class _Static:
    """One static cache shape: its cache, the decode step's input buffers and the compiled step."""

    slots: int
    length: int
    cache: Any
    mask: torch.Tensor  # [slots, 1, 1, length] True where a row's query may look
    input_ids: torch.Tensor  # [slots, 1]
    positions: torch.Tensor  # [slots, 1]
    step: Callable[..., Any]
    warm: bool = False
    graph: Any = None  # torch.cuda.CUDAGraph of one decode step, once captured
    logits: torch.Tensor | None = None  # the graph's output buffer
    weights: int = 0  # data pointer of the first parameter the graph was captured with


def bucket(value: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= value (the largest when none is)."""
    return next((b for b in buckets if b >= value), buckets[-1])


def length_bucket(value: int, smallest: int) -> int:
    """``value`` rounded up to a multiple of ``LENGTH_STEP``, at least ``smallest``."""
    return max(smallest, -(-value // LENGTH_STEP) * LENGTH_STEP)


class LocalEngine:
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
        self._shapes: dict[tuple[int, int], _Static] = {}
        self._prefixes: list[_Prefix] = []
        self._held: list[tuple[_Row, EngineResult]] = []
        self._rows_joinable: bool | None = None  # can batched rows' caches be cut and joined (kv.rows_problem)
        self._queue: list[_Row] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._expected = 0
        self._expected_prompt = 0
        self._position_bytes = 0  # bytes of one slot's keys and values at one position of a static cache

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
            rows.append(_Row(request, Future(), time.perf_counter(), int(seed)))
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
            self._prefixes = []

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)

    # -- scheduling ----------------------------------------------------------------------------------
    def _start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="pdbgym-engine", daemon=True)
            self._thread.start()

    def _take(self, limit: int, fits: Callable[[_Row], bool] = lambda row: True) -> list[_Row]:
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
            rows = self._take(self.settings.max_batch)
            if not rows:
                continue
            started = time.perf_counter()
            self.stats.batches += 1
            live: list[_Row] = list(rows)
            try:
                with self.context() as maybe_model, torch.inference_mode():
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
            except BaseException as exc:  # noqa: BLE001 - every waiting caller learns of the failure
                self._release()
                log.exception("engine batch failed")
                for row in live:
                    if not row.future.done():
                        row.future.set_exception(exc if isinstance(exc, Exception) else EngineError(repr(exc)))
            finally:
                self.stats.busy_seconds += time.perf_counter() - started

    # -- shared pieces -------------------------------------------------------------------------------
    def _use_static(self) -> bool:
        wanted = self.settings.static if self.settings.static is not None else self.device.type == "cuda"
        if not wanted:
            return False
        self._static_reason = static_cache_problem(self.model)
        if self._static_reason is not None:
            log.warning("engine: decoding without a static cache: %s", self._static_reason)
            return False
        return True

    def _static_works(self, model: Any) -> bool:
        """Before the first static session on CUDA: capture and replay one decode step of a one-slot cache;
        a model whose step cannot be captured (a wrapper that syncs with the host, an unsupported
        attention) decodes dynamically from then on, with the reason logged and kept."""
        if self._trialled or self.device.type != "cuda":
            return True
        self._trialled = True
        try:
            with decode_attention(model):
                shape = self._shape(model, 1, self.settings.min_length)
                set_head(shape.cache, 1)
                shape.mask.fill_(True)
                self._capture(model, shape, 1)
                shape.graph.replay()
                _synchronize()
        except Exception as exc:  # noqa: BLE001 - any failure: decode without graphs
            self._static_reason = f"a decode step could not be captured as a CUDA graph ({type(exc).__name__}: {exc})"
            log.warning("engine: decoding without a static cache: %s", self._static_reason)
            return False
        finally:
            self._shapes.pop((1, self.settings.min_length), None)
        return True

    def _forward(self, model: Any, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
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

    def _draw(self, rows: Sequence[_Row], logits: torch.Tensor, hold: bool = False) -> None:
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
        temperature = torch.tensor([r.request.temperature for r in rows], dtype=torch.float32, device=device)
        top_p = torch.tensor([r.request.top_p for r in rows], dtype=torch.float32, device=device)
        seeds = torch.tensor([r.seed for r in rows], dtype=torch.int64, device=device)
        steps = torch.tensor([len(r.ids) for r in rows], dtype=torch.int64, device=device)
        ids, logprobs = draw_rows(logits, temperature, top_p, seeds, steps, [r.request.logprob_mode for r in rows])
        values = logprobs.tolist()
        broken = sum(1 for value in values if value != value)  # NaN: the row's logits held NaN or +inf
        if broken:
            raise EngineError(f"the model's logits are not finite (NaN or inf) in {broken} of {len(rows)} rows, so "
                              "nothing can be sampled from them: its weights, or an adapter on them, hold non-finite "
                              "values (written by a training step, say). Load weights that are finite")
        now = time.perf_counter()
        for row, token, logprob in zip(rows, ids.tolist(), values, strict=True):
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
        self.stats.draw_seconds += time.perf_counter() - started

    def _prefill(self, model: Any, rows: Sequence[_Row]) -> tuple[torch.Tensor, Any, torch.Tensor]:
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
        cache = new_dynamic_cache(model)
        started = time.perf_counter()
        logits = self._forward(model, ids, mask, positions, cache)
        if self.device.type == "cuda":
            _synchronize()
        self.stats.prefill_seconds += time.perf_counter() - started
        self.stats.prefills += 1
        self.stats.prefill_tokens += int(mask.sum())
        return logits, cache, mask

    # -- dynamic rounds --------------------------------------------------------------------------------
    def _reusable(self, prompt: Sequence[int]) -> _Prefix | None:
        for prefix in self._prefixes:
            n = len(prefix.ids)
            if n >= len(prompt) or any(prompt[i] != prefix.ids[i] for i in (n - 1, n // 2, n - 2) if i >= 0):
                continue  # a few ids first: episodes of one task share their long first prompt
            if list(prompt[:n]) == prefix.ids:
                self._prefixes.remove(prefix)
                return prefix
        return None

    def _extend(self, model: Any, rows: Sequence[_Row], prefixes: Sequence[_Prefix]) -> tuple[torch.Tensor, Any, torch.Tensor]:
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
        logits = self._forward(model, ids.to(self.device), mask.to(self.device), positions.to(self.device),
                               cache, last=[n - 1 for n in new])
        if len(rows) > 1:
            ends = torch.tensor(new, device=self.device) + width
            cache = right_align(cache, model, ends, max(r.position for r in rows))
        if self.device.type == "cuda":
            _synchronize()
        self.stats.prefill_seconds += time.perf_counter() - started
        self.stats.prefills += 1
        self.stats.prefill_tokens += sum(new)
        self.stats.reused_tokens += sum(kept)
        return logits, cache, self._right_mask(rows)

    def _right_mask(self, rows: Sequence[_Row]) -> torch.Tensor:
        """The attention mask of ``rows`` right-aligned at their positions ([rows, longest])."""
        width = max(r.position for r in rows)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            mask[i, width - row.position:] = 1
        return mask.to(self.device)

    def _start_rows(self, model: Any, rows: list[_Row]) -> tuple[torch.Tensor, Any, torch.Tensor]:
        """The first logits of every row, their KV cache (right-aligned) and attention mask.

        The rows whose prompts extend a kept prefix (an earlier turn of their episodes) prefill only their
        new parts, together in one pass; the others are prefilled together afresh. The two groups are then
        joined into one cache, which is possible where the cache's columns are positions
        (``kv.rows_problem``); where they are not, every row is prefilled afresh, together.
        """
        reuse = self.settings.reuse_prefix and (len(rows) == 1 or self._rows_joinable)
        prefixes = [self._reusable(r.request.prompt_ids) if reuse else None for r in rows]
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

    def _keep(self, model: Any, rows: list[_Row], cache: Any, width: int) -> None:
        """Keep each row's KV cache (its prompt and every id but the last) for the episode's next turn."""
        if not self.settings.reuse_prefix:
            return
        if len(rows) > 1 and not self._joinable(cache):
            return
        started = time.perf_counter()
        for i, row in enumerate(rows):
            ids = list(row.request.prompt_ids) + row.ids[:-1]
            start = width - len(row.request.prompt_ids)
            kept = cache if len(rows) == 1 else cut_row(cache, model, i, start, start + len(ids))
            self._prefixes.insert(0, _Prefix(ids, kept, cache_bytes(kept)))
        self._trim_prefixes(len(rows))
        self.stats.keep_seconds += time.perf_counter() - started

    def _joinable(self, cache: Any) -> bool:
        """Whether batched rows' caches can be cut and joined by position, learnt from the first ``cache``
        kept (``kv.rows_problem``) and said once where they cannot."""
        if self._rows_joinable is None:
            problem = rows_problem(cache)
            self._rows_joinable = problem is None
            if problem:
                log.info("engine: batched rows re-prefill every turn: %s", problem)
        return self._rows_joinable

    def _trim_prefixes(self, rows: int) -> None:
        """Drop the oldest kept caches beyond ``prefix_bytes``; the newest ``rows`` (and
        ``PREFIXES_KEPT``) stay whatever their size."""
        budget, held, keep = self.settings.prefix_bytes, 0, 0
        for prefix in self._prefixes:  # newest first
            if keep >= max(PREFIXES_KEPT, rows) and held + prefix.size > budget:
                break
            held += prefix.size
            keep += 1
        del self._prefixes[keep:]

    def _keep_static(self, model: Any, shape: _Static, row: _Row, end: int) -> None:
        """Keep the keys and values of a row that ended in a static session (its prompt and every id but
        the last, the positions ``[end - len, end)`` of its slot) for its episode's next turn."""
        if not self.settings.reuse_prefix or row.finish == "cancelled":
            return
        started = time.perf_counter()
        ids = list(row.request.prompt_ids) + row.ids[:-1]
        kept = cut_row(shape.cache, model, row.slot, end - len(ids), end)
        self._joinable(kept)  # a static session's joiners with kept rows are joined by position
        self._prefixes.insert(0, _Prefix(ids, kept, cache_bytes(kept)))
        self._trim_prefixes(0)  # within prefix_bytes: a static session may hold many long rows
        self.stats.keep_seconds += time.perf_counter() - started

    def _dynamic_round(self, model: Any, rows: list[_Row], release_early: bool = True) -> None:
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

    # -- static sessions ----------------------------------------------------------------------------------
    def _shape(self, model: Any, slots: int, length: int) -> _Static:
        key = (slots, length)
        if key not in self._shapes:
            log.info("engine: a static cache of %d slots x %d positions", slots, length)
            step = model
            if self.device.type == "cuda" and self.settings.graphs == "compiled":
                import torch._inductor.config as inductor  # heavy: the compiler, only when asked for
                from transformers import CompileConfig  # optional: transformers (pdbgym[hf])

                # The engine decodes in its own thread; inductor's cudagraph trees keep their state in the
                # thread that first used them, so graphs here are the per-function kind.
                inductor.triton.cudagraph_trees = False
                step = model.get_compiled_call(CompileConfig(dynamic=False, fullgraph=False))
            self._shapes[key] = _Static(
                slots, length, new_static_cache(model, slots, length),
                torch.ones((slots, 1, 1, length), dtype=torch.bool, device=self.device),
                torch.full((slots, 1), self.pad_id, dtype=torch.long, device=self.device),
                torch.zeros((slots, 1), dtype=torch.long, device=self.device), step)
        return self._shapes[key]

    def _static_session(self, model: Any, first: list[_Row], live: list[_Row]) -> None:
        """Decode ``first`` and whatever joins while they run, in one static cache; ``live`` is kept up
        to date with every row in flight (for failure reporting).

        ``shape.mask[r, 0, 0, j]`` says whether slot r's query may see position j: its prompt below the
        head where it joined, then every position the head has passed (each row's own new ids); never a
        position above the head, whatever an earlier occupant left there.
        """
        budget = max(r.request.max_new_tokens for r in first)
        room = budget + max(budget, JOIN_STEPS)
        slots = bucket(min(self.settings.max_batch, max(len(first), self._expected, MIN_SLOTS)), SLOT_BUCKETS)
        length = self._session_length(model, slots, max(len(r.request.prompt_ids) for r in first), room)
        shape = self._shape(model, slots, length)
        head = length - room
        set_head(shape.cache, head)
        shape.mask.fill_(False)
        occupied: list[_Row | None] = [None] * slots
        self._admit(model, shape, first, occupied, head)
        while True:
            free = occupied.count(None)
            if free and head < length:
                joiners = self._take(free, lambda r, h=head: len(r.request.prompt_ids) <= h
                                     and h + r.request.max_new_tokens <= length)
                live.extend(joiners)
                self._admit(model, shape, joiners, occupied, head)
            active = [r for r in occupied if r is not None]
            if not active:
                return
            started = time.perf_counter()
            for row in active:
                shape.input_ids[row.slot, 0] = row.ids[-1]
                shape.positions[row.slot, 0] = row.position - 1
            shape.mask[:, 0, 0, head] = True
            logits = self._decode(model, shape, head)
            self.stats.step_seconds += time.perf_counter() - started
            head += 1
            self.stats.decode_steps += 1
            self.stats.row_steps += len(active)
            self._draw(active, logits[[r.slot for r in active]])
            for row in active:
                if row.finish is not None:
                    self._keep_static(model, shape, row, head)
                    occupied[row.slot] = None

    def _session_length(self, model: Any, slots: int, prompt: int, room: int) -> int:
        """A static session's length: its first rows' longest ``prompt`` and ``room`` above it, and as
        much more room below the head for the expected prompts as ``session_bytes`` allows."""
        need = length_bucket(prompt + room, self.settings.min_length)
        wanted = length_bucket(max(prompt, self._expected_prompt) + room, self.settings.min_length)
        if wanted <= need:
            return need
        if not self._position_bytes:
            self._position_bytes = max(1, cache_bytes(new_static_cache(model, 1, LENGTH_STEP)) // LENGTH_STEP)
        allowed = self.settings.session_bytes // (slots * self._position_bytes) // LENGTH_STEP * LENGTH_STEP
        return max(need, min(wanted, allowed))

    def _admit(self, model: Any, shape: _Static, rows: list[_Row], occupied: list[_Row | None], head: int) -> None:
        """Prefill ``rows`` and place them in free slots right-aligned below ``head``; draw their first id."""
        if not rows:
            return
        started = time.perf_counter()
        inside = self.stats.prefill_seconds + self.stats.draw_seconds + self.stats.keep_seconds
        free = [i for i, r in enumerate(occupied) if r is None]
        for row, slot in zip(rows, free, strict=False):
            row.slot = slot
            occupied[slot] = row
        logits, cache, _ = self._start_rows(model, rows)  # a later turn prefills only its new part
        slots = torch.tensor([r.slot for r in rows], dtype=torch.long, device=self.device)
        place_rows(shape.cache, cache, slots, head)
        for row in rows:
            shape.mask[row.slot].fill_(False)
            shape.mask[row.slot, 0, 0, head - len(row.request.prompt_ids):head] = True
        self._draw(rows, logits)
        for row in rows:
            if row.finish is not None:
                self._keep_static(model, shape, row, head)
                occupied[row.slot] = None
        inside = self.stats.prefill_seconds + self.stats.draw_seconds + self.stats.keep_seconds - inside
        self.stats.admit_seconds += time.perf_counter() - started - inside

    def _decode(self, model: Any, shape: _Static, head: int) -> torch.Tensor:
        """One decode step of every slot at ``head``: the shape's CUDA graph replayed (captured on first
        use), the compiled step, or the eager forward (CPU)."""
        started = time.perf_counter()
        if self.device.type != "cuda" or self.settings.graphs == "compiled":
            if self.device.type == "cuda":
                torch.compiler.cudagraph_mark_step_begin()
            logits = self._forward(model, shape.input_ids, shape.mask, shape.positions, shape.cache,
                                   shape.step).clone()
        else:
            if shape.graph is None or shape.weights != next(model.parameters()).data_ptr():
                self._capture(model, shape, head)  # first use, or weights that moved (gathered shards)
            shape.graph.replay()
            logits = shape.logits
        if not shape.warm:
            shape.warm = True
            if self.device.type == "cuda":
                _synchronize()
            seconds = time.perf_counter() - started
            self.stats.compiles.append({"slots": shape.slots, "length": shape.length, "seconds": round(seconds, 2)})
            log.warning("engine: decode step for %d slots x %d positions ready in %.1f s (%s, once per shape "
                        "per process)", shape.slots, shape.length, seconds,
                        "CUDA graph capture" if self.device.type == "cuda" and self.settings.graphs != "compiled"
                        else "compile" if self.device.type == "cuda" else "first call")
        return logits

    def _capture(self, model: Any, shape: _Static, head: int) -> None:
        """Record the decode step at this shape as a CUDA graph. Warm-up runs write at the head (positions
        no row sees yet, rewritten by the first real step) and move it, so it is put back after them."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward(model, shape.input_ids, shape.mask, shape.positions, shape.cache)
        torch.cuda.current_stream().wait_stream(side)
        set_head(shape.cache, head)
        graph = torch.cuda.CUDAGraph()
        # thread_local: other threads (another engine of the process, an evaluation's other arm) keep
        # working while this one records; in the default global mode their host copies and kernel
        # launches invalidated the capture and broke both. One capture at a time in the process.
        with _CAPTURE, torch.cuda.graph(graph, capture_error_mode="thread_local"):
            shape.logits = self._forward(model, shape.input_ids, shape.mask, shape.positions, shape.cache)
        set_head(shape.cache, head)  # capture records without running; the head stays where it was
        shape.graph = graph
        shape.weights = next(model.parameters()).data_ptr()
