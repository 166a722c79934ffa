"""The engine's static path (CUDA, the default there): a ``StaticCache`` of ``slots`` rows and ``length``
positions and a decode step recorded as a CUDA graph (with ``graphs="compiled"`` the model's forward in
it fused by inductor first: one compile per process and model, its slot and position dimensions dynamic; the
draw stays the recorded kernels of ``draw_all``, whose integer hashing inductor's GPU code generation
refused on an H100).

Every row writes at one shared head; a prompt is prefilled on its own and its keys and values are placed
right-aligned below the head in a free slot, so a request that arrives while others decode joins the
running batch at the next step (continuous batching), as long as its prompt fits below the head and its
budget above it. Requests that arrive while others decode wait briefly for more (``admit_wait_s``), so
that one prefill pass admits several. A row that ends leaves a copy of its keys and values (its slot's
positions) to be continued by its episode's next turn, as on the dynamic path: that turn prefills only
its new part. Slot counts and lengths come in buckets (powers of two), so the number of captured shapes
stays small; each capture is counted, timed and logged.

The draw is part of the recorded step: each slot's sampling settings live in device buffers beside its
inputs, and the step writes the id it drew back as the slot's next input, so one step follows another
with no host round trip between them. The host launches step t + 1 before it reads step t's ids (copied
to pinned memory behind the step), so its bookkeeping overlaps the device's work; a row that stopped at
step t has then run one step too many, whose id is dropped. A session holding a grammar-masked row reads
every step's logits before the next (the mask is applied on the host).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pdbgym.engine.attention import decode_attention
from pdbgym.engine.cuda import CAPTURE, synchronize, traced
from pdbgym.engine.draw import LOGPROB_MODES, draw_all
from pdbgym.engine.kv import (
    cache_bytes,
    cache_tensors,
    cut_row,
    new_static_cache,
    place_rows,
    set_head,
    static_cache_problem,
)
from pdbgym.engine.prefixes import PrefixStore
from pdbgym.engine.regional import compiled_forward
from pdbgym.engine.types import EngineSettings, EngineStats, Row

log = logging.getLogger("pdbgym.engine")

SLOT_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
LENGTH_STEP = 512  # static cache lengths are multiples of this (a captured graph costs about a second)
MIN_SLOTS = 8  # a static session leaves room for requests that arrive while it runs
JOIN_STEPS = 256  # decode steps, at least, during which a static session takes requests that arrive
PREFIXES_KEPT = 4  # earlier turns' KV caches kept at least (the dynamic path: and every row of the last round)


@dataclass
class StaticShape:
    """One static cache shape: its cache, the decode step's input and sampling buffers and its graphs."""

    slots: int
    length: int
    cache: Any
    mask: torch.Tensor  # [slots, 1, 1, length] True where a row's query may look
    input_ids: torch.Tensor  # [slots, 1]: each slot's next input, written back by the step's draw
    positions: torch.Tensor  # [slots, 1]
    head: torch.Tensor  # [1] int64: the position the next step writes at (the cache's own head moves with it)
    temperature: torch.Tensor  # [slots] float32, and below each slot's draw settings
    top_p: torch.Tensor
    seeds: torch.Tensor  # [slots] int64
    steps: torch.Tensor  # [slots] int64: the index of the id the next step draws in its row's turn
    modes: torch.Tensor  # [slots] int64: indices into LOGPROB_MODES
    live: torch.Tensor  # [slots, 1] int64: 1 where a row sits; only those slots' positions and steps move on
    warm: bool = False
    graphs: dict[bool, Any] = field(default_factory=dict)  # torch.cuda.CUDAGraph of one step, by "any top-p < 1"
    outputs: dict[bool, tuple[torch.Tensor, ...]] = field(default_factory=dict)  # (ids, logprobs, logits) each
    weights: int = 0  # data pointer of the first parameter the graphs were captured with


@dataclass
class Launched:
    """A decode step launched and not yet read: its rows, the head after it, and its ids and log-probs on
    their way to the host (``ready`` recorded behind the copies)."""

    rows: list[Row]
    end: int
    ids: torch.Tensor
    logprobs: torch.Tensor
    ready: Any = None


def bucket(value: int, buckets: Sequence[int]) -> int:
    """The smallest bucket >= value (the largest when none is)."""
    return next((b for b in buckets if b >= value), buckets[-1])


def length_bucket(value: int, smallest: int) -> int:
    """``value`` rounded up to a multiple of ``LENGTH_STEP``, at least ``smallest``."""
    return max(smallest, -(-value // LENGTH_STEP) * LENGTH_STEP)


class Sessions:
    """The static-session half of ``LocalEngine`` (a mixin: the engine holds the state)."""

    model: Any
    device: torch.device
    pad_id: int
    settings: EngineSettings
    stats: EngineStats
    prefixes: PrefixStore
    _static_reason: str | None
    _trialled: bool
    _shapes: dict[tuple[int, int], StaticShape]
    _row_cap: int
    _session_bytes: int
    _expected: int
    _expected_prompt: int
    _position_bytes: int
    _pass_seconds: float  # mean seconds of the recent passes that admitted rows to a running session
    _cond: Any  # the engine's threading.Condition over its queue
    _queue: list[Row]
    _forward: Callable[..., torch.Tensor]
    _draw: Callable[..., None]
    _take: Callable[..., list[Row]]
    _start_rows: Callable[..., tuple[torch.Tensor, Any, torch.Tensor]]

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
        """Before the first static session on CUDA: capture and replay one decode step of a small cache (one
        slot; ``MIN_SLOTS`` for a compiled step, whose compile then serves every shape). A step that cannot be
        compiled is recorded as the model's own kernels instead; a model whose step cannot be captured (a
        wrapper that syncs with the host, an unsupported attention) decodes dynamically from then on, with the
        reason logged and kept."""
        if self._trialled or self.device.type != "cuda":
            return True
        self._trialled = True
        trial = MIN_SLOTS if self.settings.graphs == "compiled" else 1
        try:
            with decode_attention(model):
                shape = self._shape(model, trial, self.settings.min_length)
                _set_head(shape, 1)
                shape.mask.fill_(True)
                for nucleus in (False, True):  # both graphs a session may need, with and without a top-p < 1 row
                    self._capture(model, shape, nucleus, 1)
                    shape.graphs[nucleus].replay()
                synchronize()
        except Exception as exc:  # noqa: BLE001 - any failure: decode without graphs
            if self.settings.graphs == "compiled":  # no compiler here (Triton), or a model it cannot take
                log.warning("engine: recording the model's own decode step: compiling it failed (%s: %s)",
                            type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else "", exc_info=True)
                self.settings = dataclasses.replace(self.settings, graphs="capture")
                self._trialled = False
                return self._static_works(model)
            self._static_reason = f"a decode step could not be captured as a CUDA graph ({type(exc).__name__}: {exc})"
            log.warning("engine: decoding without a static cache: %s", self._static_reason)
            return False
        finally:
            self._shapes.pop((trial, self.settings.min_length), None)
        return True

    @traced("keep")
    def _keep_static(self, model: Any, shape: StaticShape, row: Row, end: int) -> None:
        """Keep the keys and values of a row that ended in a static session (its prompt and every id but
        the last, the positions ``[end - len, end)`` of its slot) for its episode's next turn."""
        if not self.settings.reuse_prefix or row.finish == "cancelled":
            return
        started = time.perf_counter()
        ids = list(row.request.prompt_ids) + row.ids[:-1]
        kept = cut_row(shape.cache, model, row.slot, end - len(ids), end)
        self.prefixes.keep(ids, kept)
        self.prefixes.trim(0)  # within prefix_bytes: a static session may hold many long rows
        self.stats.keep_seconds += time.perf_counter() - started

    # -- static sessions ----------------------------------------------------------------------------------
    def _slot_position_bytes(self, model: Any) -> int:
        """Bytes of one slot's keys and values at one position of a static cache."""
        if not self._position_bytes:
            self._position_bytes = max(1, cache_bytes(new_static_cache(model, 1, LENGTH_STEP)) // LENGTH_STEP)
        return self._position_bytes

    def _shape(self, model: Any, slots: int, length: int) -> StaticShape:
        """The static cache (and captured step) of ``slots`` x ``length``, made if new. The shapes kept for
        reuse stay within twice ``session_bytes`` together, least recently used dropped first: each holds
        its cache and its graph's memory, and a campaign whose sessions pass through several shapes would
        otherwise keep one of each; two sessions' worth keeps two alternating shapes from being captured
        again every session."""
        key = (slots, length)
        if key in self._shapes:
            self._shapes[key] = self._shapes.pop(key)  # now the most recently used
        else:
            per_position = self._slot_position_bytes(model)
            kept = {k: k[0] * k[1] * per_position for k in self._shapes}
            dropped = False
            while kept and sum(kept.values()) + slots * length * per_position > 2 * self._session_bytes:
                del self._shapes[oldest := next(iter(self._shapes))], kept[oldest]
                dropped = True
            if dropped and self.device.type == "cuda":
                torch.cuda.empty_cache()  # to the device, once: other processes on the GPU may use it
            log.info("engine: a static cache of %d slots x %d positions", slots, length)
            zeros = functools.partial(torch.zeros, slots, dtype=torch.long, device=self.device)
            self._shapes[key] = StaticShape(
                slots, length, new_static_cache(model, slots, length, self.settings.graphs == "compiled"),
                mask=torch.ones((slots, 1, 1, length), dtype=torch.bool, device=self.device),
                input_ids=torch.full((slots, 1), self.pad_id, dtype=torch.long, device=self.device),
                positions=zeros(1), head=torch.zeros(1, dtype=torch.long, device=self.device),
                temperature=torch.ones(slots, device=self.device), top_p=torch.ones(slots, device=self.device),
                seeds=zeros(), steps=zeros(), modes=zeros(), live=zeros(1))
            if self.settings.graphs == "compiled":
                _mark_dynamic(self._shapes[key])
        return self._shapes[key]

    def _static_session(self, model: Any, first: list[Row], live: list[Row]) -> None:
        """Decode ``first`` and whatever joins while they run, in one static cache; ``live`` is kept up
        to date with every row in flight (for failure reporting).

        ``shape.mask[r, 0, 0, j]`` says whether slot r's query may see position j: its prompt below the
        head where it joined, then every position the head has passed (each row's own new ids); never a
        position above the head, whatever an earlier occupant left there. ``head`` here is where the next
        launched step writes; the step launched before it may still be running (module docstring).
        """
        budget = max(r.request.max_new_tokens for r in first)
        room = budget + max(budget, JOIN_STEPS)
        slots = bucket(min(self._row_cap, max(len(first), self._expected, MIN_SLOTS)), SLOT_BUCKETS)
        length = self._session_length(model, slots, max(len(r.request.prompt_ids) for r in first), room)
        shape = self._shape(model, slots, length)
        head = length - room
        _set_head(shape, head)
        shape.mask.fill_(False)
        _vacate(shape, None)  # a shape kept from an earlier session still marks its last rows' slots
        occupied: list[Row | None] = [None] * slots
        self._admit(model, shape, first, occupied, head)
        launched: Launched | None = None
        while True:
            free = occupied.count(None)
            if free and head < length:
                def fits(r: Row, h: int = head) -> bool:
                    return len(r.request.prompt_ids) <= h and h + r.request.max_new_tokens <= length

                if self._admit_now(fits, free, slots - free):
                    joiners = self._take(free, fits)
                    live.extend(joiners)
                    started = time.perf_counter()
                    self._admit(model, shape, joiners, occupied, head)
                    if joiners:
                        seconds = time.perf_counter() - started
                        self._pass_seconds = seconds if not self._pass_seconds else 0.7 * self._pass_seconds + 0.3 * seconds
            in_flight = set(map(id, launched.rows)) if launched else set()
            # a row runs another step only while its budget has room beyond the step not yet read
            ready = [r for r in occupied if r is not None and r.left - (id(r) in in_flight) > 0]
            masked = any(r.request.mask is not None for r in ready)
            if launched is not None and (masked or not ready):
                self._settle(model, shape, launched, occupied)
                launched = None
                continue
            if not ready:
                return
            started = time.perf_counter()
            ids, logprobs, logits = self._decode(model, shape, head, any(r.request.top_p < 1.0 for r in ready))
            head += 1
            self.stats.decode_steps += 1
            self.stats.row_steps += len(ready)
            step = self._read(ready, head, ids, logprobs)
            self.stats.step_seconds += time.perf_counter() - started
            if masked:  # the mask is applied on the host: each masked row drawn again from its logits
                self._settle(model, shape, step, occupied, logits)
                continue
            if launched is not None:
                self._settle(model, shape, launched, occupied)
            launched = step

    def _read(self, rows: list[Row], end: int, ids: torch.Tensor, logprobs: torch.Tensor) -> Launched:
        """Start copying a launched step's ids and log-probs to the host, behind the step."""
        if self.device.type != "cuda":
            return Launched(rows, end, ids.clone(), logprobs.clone())
        host = Launched(rows, end, torch.empty(ids.shape, dtype=ids.dtype, pin_memory=True),
                        torch.empty(logprobs.shape, dtype=logprobs.dtype, pin_memory=True))
        host.ids.copy_(ids, non_blocking=True)
        host.logprobs.copy_(logprobs, non_blocking=True)
        host.ready = torch.cuda.Event()
        host.ready.record()
        return host

    @traced("draw")
    def _settle(self, model: Any, shape: StaticShape, step: Launched, occupied: list[Row | None],
                logits: torch.Tensor | None = None) -> None:
        """Record a launched step's ids for the rows still live, keep and free the rows that ended. With
        ``logits``, the masked rows are drawn on the host from them instead, and their ids written back as
        their slots' next inputs."""
        started = time.perf_counter()
        if step.ready is not None:
            step.ready.synchronize()
        rows = [r for r in step.rows if r.finish is None]
        masked = [r for r in rows if r.request.mask is not None] if logits is not None else []
        plain = [r for r in rows if r.request.mask is None] if masked else rows
        ids, values = step.ids.tolist(), step.logprobs.tolist()
        self._record(plain, [ids[r.slot] for r in plain], [values[r.slot] for r in plain])
        self.stats.draw_seconds += time.perf_counter() - started
        if masked:
            self._draw(masked, logits[[r.slot for r in masked]])
            slots = torch.tensor([r.slot for r in masked], dtype=torch.long, device=self.device)
            shape.input_ids[slots, 0] = torch.tensor([r.ids[-1] for r in masked], dtype=torch.long).to(self.device)
        ended = [row for row in rows if row.finish is not None]
        for row in ended:
            self._keep_static(model, shape, row, step.end)
            occupied[row.slot] = None
        _vacate(shape, [row.slot for row in ended])

    def _admit_now(self, fits: Callable[[Row], bool], free: int, busy: int) -> bool:
        """Whether the requests waiting to join a running session are admitted now: at once where no row
        is live or they fill every free slot; else once the oldest has waited ``admit_wait_s`` (None: the
        recent admission passes' mean seconds, what one more pass would hold up every live row)."""
        with self._cond:
            waiting = [r.submitted for r in self._queue if not r.future.cancelled() and fits(r)]
        if not waiting:
            return False
        if not busy or len(waiting) >= free:
            return True
        wait = self.settings.admit_wait_s if self.settings.admit_wait_s is not None else self._pass_seconds
        return time.perf_counter() - min(waiting) >= wait

    def _session_length(self, model: Any, slots: int, prompt: int, room: int) -> int:
        """A static session's length: its first rows' longest ``prompt`` and ``room`` above it, and as
        much more room below the head for the expected prompts as ``session_bytes`` allows."""
        need = length_bucket(prompt + room, self.settings.min_length)
        wanted = length_bucket(max(prompt, self._expected_prompt) + room, self.settings.min_length)
        if wanted <= need:
            return need
        allowed = self._session_bytes // (slots * self._slot_position_bytes(model)) // LENGTH_STEP * LENGTH_STEP
        return max(need, min(wanted, allowed))

    @traced("admit")
    def _admit(self, model: Any, shape: StaticShape, rows: list[Row], occupied: list[Row | None], head: int) -> None:
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
        _vacate(shape, [r.slot for r in rows if r.finish is not None])
        _seat(shape, [r for r in rows if r.finish is None])
        inside = self.stats.prefill_seconds + self.stats.draw_seconds + self.stats.keep_seconds - inside
        self.stats.admit_seconds += time.perf_counter() - started - inside

    @traced("decode")
    def _decode(self, model: Any, shape: StaticShape, head: int,
                nucleus: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Launch one decode step of every slot at ``head`` with its draw (``decode_step``): the shape's CUDA
        graph replayed (captured on first use), or the step run as it is (CPU). Returns the step's ids,
        log-probs and logits (device tensors, a graph's own buffers)."""
        started = time.perf_counter()
        if self.device.type != "cuda":
            out = self._step(model, shape, nucleus)
        else:
            if shape.weights != next(model.parameters()).data_ptr():
                shape.graphs.clear()  # weights that moved (gathered shards): every graph is captured again
                shape.outputs.clear()
            if nucleus not in shape.graphs:
                self._capture(model, shape, nucleus, head)
                shape.warm = False  # counted and logged below, a capture mid-session too
            shape.graphs[nucleus].replay()
            out = shape.outputs[nucleus]
        if not shape.warm:
            shape.warm = True
            if self.device.type == "cuda":
                synchronize()
            seconds = time.perf_counter() - started
            self.stats.compiles.append({"slots": shape.slots, "length": shape.length, "seconds": round(seconds, 2)})
            how = ("first call" if self.device.type != "cuda" else "CUDA graph capture"
                   if self.settings.graphs != "compiled" else "CUDA graph capture of the compiled step")
            log.warning("engine: decode step for %d slots x %d positions ready in %.1f s (%s, once per shape "
                        "per process, and once more at its first row with top-p < 1)", shape.slots, shape.length,
                        seconds, how)
        return out

    def _step(self, model: Any, shape: StaticShape, nucleus: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``decode_step`` on the shape's buffers, the model's forward as it is or compiled (``graphs="compiled"``)."""
        forward = (functools.partial(self._forward, step=compiled_forward(model))
                   if self.settings.graphs == "compiled" else self._forward)
        return decode_step(forward, model, shape.cache, shape.input_ids, shape.mask, shape.positions, shape.head,
                           shape.live, shape.temperature, shape.top_p, shape.seeds, shape.steps, shape.modes, nucleus)

    def _capture(self, model: Any, shape: StaticShape, nucleus: bool, head: int) -> None:
        """Record the step at this shape as a CUDA graph. One warm-up run first (on the side stream the capture
        then records on, as CUDA graphs want): it opens the head's column and writes keys and values there,
        which the first real step does again, and it moves the head and every slot's inputs, which are put back after it (a
        capture may come mid-session: a first row with top-p < 1). A second warm-up would open the column
        above the head, whose keys and values no real step has written yet, to every slot's next step."""
        saved = [t.clone() for t in (shape.input_ids, shape.positions, shape.steps)]

        def restore() -> None:
            for tensor, before in zip((shape.input_ids, shape.positions, shape.steps), saved, strict=True):
                tensor.copy_(before)
            _set_head(shape, head)

        current = torch.cuda.current_stream()
        try:
            # The warm-up and the capture both run on the process's one capture stream of the device, under the
            # one lock. ``torch.cuda.Stream()`` hands out a pool's streams in turn, 32 of them, and a warm-up
            # stream made for each capture outside the lock could come round to the stream another thread was
            # capturing on: its wait for its own thread's work, recorded into that capture, breaks it. That is
            # the likely cause of "dependency created on uncaptured work in another stream" with three engines
            # on three threads on an H100 (2026-12-07), not yet confirmed on a GPU.
            with CAPTURE:
                side = capture_stream(current.device)
                side.wait_stream(current)
                with torch.cuda.stream(side):
                    self._step(model, shape, nucleus)
                current.wait_stream(side)
                restore()
                graph = torch.cuda.CUDAGraph()
                # thread_local: other threads (another engine of the process, an evaluation's other arm) keep
                # working while this one records; in the default global mode their host copies and kernel
                # launches invalidated the capture and broke both.
                with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                    shape.outputs[nucleus] = self._step(model, shape, nucleus)
        finally:
            # a capture that fails at its end leaves its stream this thread's current one (``torch.cuda.graph``
            # raises before it leaves the stream's block), and every later call here would run inside it
            torch.cuda.set_stream(current)
        restore()  # capture records without running; the inputs and head stay where they were
        shape.graphs[nucleus] = graph
        shape.weights = next(model.parameters()).data_ptr()


def decode_step(forward: Callable[..., torch.Tensor], model: Any, cache: Any, input_ids: torch.Tensor,
                mask: torch.Tensor, positions: torch.Tensor, head: torch.Tensor, live: torch.Tensor,
                temperature: torch.Tensor, top_p: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor,
                modes: torch.Tensor, nucleus: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decode step as device work alone (what a graph records): the head's column opened to every
    slot, the forward, each slot's draw with its own settings (``draw_all``, nothing read back), and the
    drawn ids written back as the slots' next inputs, the occupied slots' positions and step indices and
    the head moved on."""
    mask.index_fill_(3, head, True)
    logits = forward(model, input_ids, mask, positions, cache)
    ids, logprobs = draw_all(logits, temperature, top_p, seeds, steps, modes, nucleus=nucleus, sync_free=True)
    input_ids[:, 0].copy_(ids)
    positions.add_(live)
    steps.add_(live[:, 0])
    head.add_(1)
    return ids, logprobs, logits


def _mark_dynamic(shape: StaticShape) -> None:
    """Mark a new shape's slot and position dimensions dynamic for the compiler, so that the first compile
    of the forward serves every later shape instead of specializing on this one's sizes."""
    for tensor in (shape.input_ids, shape.positions):
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
    for tensor, position in [(shape.mask, 3)] + [(t, 2) for t in cache_tensors(shape.cache)]:
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
        torch._dynamo.maybe_mark_dynamic(tensor, position)


@functools.cache
def capture_stream(device: torch.device) -> Any:
    """The stream every engine of the process warms up and records its decode steps on, on ``device``, one at a
    time (under ``CAPTURE``); made once, so the engines' captures take no more streams of torch's pool."""
    return torch.cuda.Stream(device=device)


def _set_head(shape: StaticShape, position: int) -> None:
    """Make the next step write at ``position``: the cache's head and the step's own."""
    set_head(shape.cache, position)
    shape.head.fill_(position)


def _vacate(shape: StaticShape, slots: list[int] | None) -> None:
    """Mark ``slots`` free (every slot with None) and put their positions and step indices back to 0. A free
    slot's position then stays 0: were it moved on with the head, it would pass what an absolute-position
    model's embeddings hold (the head may go beyond them) or widen the rotary scaling of models that scale
    by the batch's largest position."""
    if slots is None:
        shape.live.zero_()
        shape.positions.zero_()
        shape.steps.zero_()
    elif slots:
        index = torch.tensor(slots, dtype=torch.long).to(shape.positions.device)
        shape.live[index, 0] = 0
        shape.positions[index, 0] = 0
        shape.steps[index] = 0


def _seat(shape: StaticShape, rows: list[Row]) -> None:
    """Write the rows just admitted into their slots' inputs and draw settings (one copy for each kind)."""
    if not rows:
        return
    device = shape.input_ids.device
    slots = torch.tensor([r.slot for r in rows], dtype=torch.long).to(device)
    whole = torch.tensor([[r.ids[-1] for r in rows], [r.position - 1 for r in rows], [len(r.ids) for r in rows],
                          [r.seed for r in rows], [LOGPROB_MODES.index(r.request.logprob_mode) for r in rows]],
                         dtype=torch.long).to(device)
    real = torch.tensor([[r.request.temperature for r in rows], [r.request.top_p for r in rows]],
                        dtype=torch.float32).to(device)
    shape.input_ids[slots, 0] = whole[0]
    shape.positions[slots, 0] = whole[1]
    shape.steps[slots] = whole[2]
    shape.seeds[slots] = whole[3]
    shape.modes[slots] = whole[4]
    shape.live[slots, 0] = 1
    shape.temperature[slots] = real[0]
    shape.top_p[slots] = real[1]
