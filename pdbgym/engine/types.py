"""What callers hand the engine and get back (``EngineRequest``, ``EngineResult``), how it batches
(``EngineSettings``), what it counted (``EngineStats``), and one request in flight (``Row``)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from pdbgym.engine.draw import LOGPROB_MODES
from pdbgym.errors import PdbgymError


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


GRAPHS = ("capture", "compiled")


@dataclass(frozen=True)
class EngineSettings:
    """How the engine batches and decodes.

    Args:
        window_s: how long a request waits for others before a batch starts. Default 0.003.
        max_batch: rows decoded together at most. Default 64.
        static: decode with a static cache and CUDA graphs; None: on CUDA devices. Default None.
        min_length: the smallest static cache length (lengths are multiples of ``LENGTH_STEP``). Default 1024.
        graphs: how a static decode step (forward and draw) becomes a CUDA graph: ``capture`` records the
            model's own kernels once per shape (about a second); ``compiled`` has inductor compile the step
            first (fused kernels: fewer launches a step, which bound a small model's step; tens of seconds
            once per process and model architecture, every shape sharing the compile) and records that.
            Default ``capture``.
        reuse_prefix: keep each request's KV cache for a later prompt that extends it (an episode's next
            turn), so only the new part is prefilled (both paths). Default True.
        prefix_bytes: how many bytes of kept KV caches are held beyond ``PREFIXES_KEPT`` and, on the
            dynamic path, the last round's rows (oldest dropped first). Default 2 GiB.
        admit_wait_s: how long requests that could join a running static session may wait for more to
            arrive, so that one prefill pass admits them together (each pass holds up every live row's
            decode step): None waits up to the mean seconds of the recent admission passes, so a joiner
            never waits longer than one more pass would have cost; 0 admits every arrival at once. A
            session with no live row admits at once. Default None.
        session_bytes: how many bytes a static session's cache may take so that longer prompts than
            its first rows' (the later turns of the same episodes, up to the length given to ``expect``)
            join it while it runs; a session never gets less than its first rows need. Each decode step
            reads the whole cache, so this also bounds what the room costs a step. The static caches kept
            for later sessions (one per shape) stay within twice this together. Default 4 GiB.

    A batch the device has no memory for (another process on the GPU, other engines of this process)
    is played again: the engine frees its kept caches, halves its rows a batch, ``session_bytes`` and
    ``prefix_bytes``, and replays the unfinished rows, which draw the ids they would have drawn
    (``EngineStats.oom_retries`` counts it).
    """

    window_s: float = 0.003
    max_batch: int = 64
    static: bool | None = None
    min_length: int = 1024
    graphs: str = "capture"
    reuse_prefix: bool = True
    prefix_bytes: int = 2 << 30
    admit_wait_s: float | None = None
    session_bytes: int = 4 << 30

    def __post_init__(self) -> None:
        if self.graphs not in GRAPHS:
            raise ValueError(f"graphs must be one of {GRAPHS} (how a static decode step becomes a CUDA graph), "
                             f"got {self.graphs!r}")


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
    draw_seconds: float = 0.0  # sampling and bookkeeping, host round trip included (a static session: reading
    # a step's drawn ids, which waits for the device to finish the step: its decode and draw)
    step_seconds: float = 0.0  # decode steps: their inputs set and the forward (or graph replay) launched
    # (a static session: the replay and the copy of its ids to the host queued)
    keep_seconds: float = 0.0  # ended rows' caches kept for their episodes' next turns
    admit_seconds: float = 0.0  # rows joining a static session, less their prefill, draw and kept caches
    row_steps: int = 0  # sum over decode steps of the rows that were live
    oom_retries: int = 0  # batches the device had no memory for, their unfinished rows played again
    compiles: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "tokens": self.tokens, "decode_steps": self.decode_steps,
                "prefills": self.prefills, "prefill_tokens": self.prefill_tokens,
                "reused_tokens": self.reused_tokens, "batches": self.batches,
                "busy_seconds": round(self.busy_seconds, 3), "prefill_seconds": round(self.prefill_seconds, 3),
                "draw_seconds": round(self.draw_seconds, 3), "step_seconds": round(self.step_seconds, 3),
                "keep_seconds": round(self.keep_seconds, 3), "admit_seconds": round(self.admit_seconds, 3),
                "mean_live_rows": round(self.row_steps / self.decode_steps, 2) if self.decode_steps else 0.0,
                "oom_retries": self.oom_retries,
                "compiles": list(self.compiles)}


@dataclass
class Row:
    """One request in flight: what it has sampled so far and where it sits (a static session's slot)."""

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
