"""Batched multi-turn rollouts: the live episodes of a batch share one ``generate`` call per round.

Each episode is pdbgym's own loop (``pdbgym.agent.loop.run_episode``) on its own ``DebugEnv``; episodes
advance concurrently under asyncio and their env steps run in threads. Their turn source is a
``GroupTurns`` that hands the pending request to a ``BatchedGenerator``; the generator waits until
every live episode has asked for a turn (or finished), then runs ONE left-padded batched ``generate``
of the local model over all pending requests and hands each episode its ids and log-probs.

Log-probs are ``log_softmax(logits / T)[sampled id]`` of the raw logits (``hf:tempered``), the same
quantity TRL's GRPO computes on the trainer side (it also divides by ``temperature``), so the
rollout/trainer mismatch is numerical only (padding, batch shape, kernels).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from pdbgym.agent.backends.base import Generation, GenerationRequest, SamplingParams, stop_token_ids
from pdbgym.agent.loop import AgentConfig, EpisodeOutcome, run_episode
from pdbgym.agent.toolcalls import ToolCallError, parse_tool_call
from pdbgym.rollouts.record import LogprobSemantics

GROUP_SEMANTICS_ENGINE = "hf:tempered"


@dataclass
class BatchStats:
    """What the generator did: rounds (batched calls), requests served, seconds inside ``generate``."""

    rounds: int = 0
    requests: int = 0
    generate_seconds: float = 0.0
    batch_sizes: list[int] = field(default_factory=list)


class BatchedGenerator:
    """Collects the pending turn requests of live episodes and serves them with one batched call.

    ``model`` is a causal LM (a PEFT model too); ``context`` returns a context manager entered around
    each ``generate`` (the trainer passes TRL's ``unwrap_model_for_generation``).
    """

    def __init__(self, model: Any, tokenizer: Any, context: Callable[[], AbstractContextManager[Any]] | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.context = context or nullcontext
        self.stops = sorted(stop_token_ids(tokenizer, model))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token to left-pad a batch with")
        self.pad_id = int(pad)
        self.stats = BatchStats()
        self._live = 0
        self._running = False
        self._pending: list[tuple[GenerationRequest, asyncio.Future[Generation]]] = []
        self._serving: asyncio.Future[None] | None = None

    # -- episode bookkeeping ---------------------------------------------------------------------
    def join(self) -> None:
        self._live += 1

    def leave(self) -> None:
        self._live -= 1
        self._maybe_flush()

    async def generate(self, request: GenerationRequest) -> Generation:
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._maybe_flush()
        return await future

    def _maybe_flush(self) -> None:
        # One batch at a time, and only once every live episode is waiting: the round's batch is full.
        if self._running or not self._pending or len(self._pending) < self._live:
            return
        batch, self._pending = self._pending, []
        self._running = True
        self._serving = asyncio.ensure_future(self._serve(batch))  # held: the loop keeps only weak references

    async def _serve(self, batch: list[tuple[GenerationRequest, asyncio.Future[Generation]]]) -> None:
        try:
            results = await asyncio.to_thread(self.generate_batch, [request for request, _ in batch])
        except Exception as exc:  # every episode of the round sees the failure and ends as ``other``
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        else:
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)
        finally:
            self._running = False
            self._maybe_flush()

    # -- the batched model call ------------------------------------------------------------------
    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One left-padded ``generate`` over ``requests`` (same sampling params); ids cut at each stop."""
        import torch

        started = time.perf_counter()
        params = requests[0].params
        device = next(self.model.parameters()).device
        width = max(len(r.prompt_ids) for r in requests)
        input_ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(requests), width), dtype=torch.long)
        for row, request in enumerate(requests):
            input_ids[row, width - len(request.prompt_ids):] = torch.tensor(request.prompt_ids)
            attention[row, width - len(request.prompt_ids):] = 1
        max_new = max(r.params.max_new_tokens for r in requests)
        with self.context() as model, torch.no_grad():
            model = model if model is not None else self.model
            out = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                                 generation_config=self._generation_config(params, max_new))
        generated = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # [B, steps, V], raw (before processors)
        scale = params.temperature if params.temperature > 0 else 1.0
        token_logprobs = torch.log_softmax(logits / scale, dim=-1).gather(-1, generated.unsqueeze(-1)).squeeze(-1)
        elapsed = time.perf_counter() - started
        self.stats.rounds += 1
        self.stats.requests += len(requests)
        self.stats.generate_seconds += elapsed
        self.stats.batch_sizes.append(len(requests))
        return [self._one(generated[row].tolist(), token_logprobs[row].tolist(), request.params.max_new_tokens,
                          elapsed) for row, request in enumerate(requests)]

    def _one(self, ids: list[int], logprobs: list[float], limit: int, elapsed: float) -> Generation:
        finish, end = "length", min(limit, len(ids))
        for position, token in enumerate(ids[:end]):
            if token in self.stops:
                finish, end = "stop", position + 1
                break
        kept = ids[:end]
        text = self.tokenizer.decode(kept, skip_special_tokens=False)
        return Generation(kept, logprobs[:end], text, finish, model_seconds=elapsed)

    def _generation_config(self, params: SamplingParams, max_new: int) -> Any:
        from transformers import GenerationConfig

        # A fresh config: nothing inherited from the model's (top_k=50, repetition penalties) may
        # change the distribution the log-probs are reported for.
        sample = params.temperature > 0
        return GenerationConfig(
            max_new_tokens=max_new, do_sample=sample, temperature=params.temperature if sample else None,
            top_p=params.top_p if sample else None, top_k=0 if sample else None, eos_token_id=self.stops,
            pad_token_id=self.pad_id, use_cache=True, return_dict_in_generate=True, output_logits=True)


class GroupTurns:
    """A turn source for one episode whose turns come from a shared ``BatchedGenerator``."""

    def __init__(self, generator: BatchedGenerator, name: str, temperature: float, top_p: float):
        self.generator = generator
        self.name = name
        self.tokenizer = generator.tokenizer
        self.semantics = LogprobSemantics(engine=GROUP_SEMANTICS_ENGINE, temperature=temperature if temperature > 0
                                          else 1.0, top_p=top_p, top_p_renormalized=False)

    def reset(self, task: Any, observation: str) -> None:
        return None

    async def next_turn(self, request: GenerationRequest, last_observation: str) -> Generation:
        return await self.generator.generate(request)


async def gather_with_threads(jobs: Sequence[Callable[[], Awaitable[Any]]], threads: int) -> list[Any]:
    """Run ``jobs`` concurrently with a thread pool wide enough that no env step waits for a thread."""
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=max(4, threads), thread_name_prefix="pdbgym-rollout")
    loop.set_default_executor(executor)
    try:
        return await asyncio.gather(*(job() for job in jobs))
    finally:
        executor.shutdown(wait=False)


EpisodeHook = Callable[[int, EpisodeOutcome], None]  # (index in the batch, the finished episode)


def run_episodes(tasks: Sequence[Any], generator: BatchedGenerator, agent: AgentConfig,
                 make_env: Callable[[Any], Any], name: str = "policy",
                 on_episode: EpisodeHook | None = None) -> list[EpisodeOutcome]:
    """Play one episode per entry of ``tasks`` (repeat a task G times for a group), all together.

    Returns the outcomes in the order of ``tasks``. ``make_env(task)`` builds a fresh env per episode.
    ``on_episode(index, outcome)`` runs as each episode finishes (progress, saving its transcript), in
    finishing order, on the event loop's thread.
    """
    async def one(index: int, task: Any) -> EpisodeOutcome:
        turns = GroupTurns(generator, name, agent.sampling.temperature, agent.sampling.top_p)
        config = replace(agent, sample_idx=index)
        try:
            outcome = await run_episode(task, turns, make_env(task), config)
        finally:
            generator.leave()
        if on_episode is not None:
            on_episode(index, outcome)
        return outcome

    for _ in tasks:
        generator.join()
    jobs = [lambda i=i, t=t: one(i, t) for i, t in enumerate(tasks)]
    return asyncio.run(gather_with_threads(jobs, threads=2 * len(tasks) + 2))


def run_one_at_a_time(tasks: Sequence[Any], generator: BatchedGenerator, agent: AgentConfig,
                      make_env: Callable[[Any], Any], name: str = "policy",
                      on_episode: EpisodeHook | None = None) -> list[EpisodeOutcome]:
    """The baseline: the same episodes, each played alone (batch size 1 on every turn)."""
    def hook(index: int) -> EpisodeHook | None:
        return None if on_episode is None else (lambda _, outcome: on_episode(index, outcome))

    return [run_episodes([task], generator, agent, make_env, name, hook(i))[0] for i, task in enumerate(tasks)]


def valid_tool_call_rate(messages: list[dict[str, Any]], tool_format: str) -> float:
    """Share of assistant turns that parse as a tool call (0.0 when there is none)."""
    turns = [m["content"] for m in messages if m.get("role") == "assistant"]
    if not turns:
        return 0.0
    valid = 0
    for content in turns:
        try:
            parse_tool_call(content, tool_format)
            valid += 1
        except ToolCallError:
            pass
    return valid / len(turns)


@dataclass
class EpisodeSample:
    """One episode as GRPO sees it: prompt ids, everything after them, masks and the episode facts."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # sampling log-prob on model tokens, 0.0 on env tokens
    env_mask: list[int]  # 1 on model tokens, 0 on tool output and template text
    facts: dict[str, Any]


def sample_from_outcome(outcome: EpisodeOutcome, tool_format: str) -> EpisodeSample:
    """Split a finished episode's token-exact record into GRPO's fields."""
    record = outcome.record
    transcript = outcome.transcript
    facts = {
        "instance_id": record.instance_id,
        "final_test_passed": bool(transcript["final_test_passed"]),
        "termination_reason": str(transcript["termination_reason"]),
        "turns": int(transcript["actions_used"]),
        "valid_tool_call_rate": valid_tool_call_rate(transcript["messages"], tool_format),
    }
    return EpisodeSample(list(record.tokens[:record.prompt_len]), list(record.tokens[record.prompt_len:]),
                         list(record.rollout_log_probs), list(record.loss_mask), facts)


def episode_metrics(samples: Sequence[EpisodeSample]) -> dict[str, float]:
    """One rollout batch's episode counts, logged beside TRL's metrics each step.

    ``episodes/solve_rate``: share of on-policy episodes whose final tests passed (replayed corpus
    trajectories are solved by construction and left out); ``episodes/tampered`` and
    ``episodes/replayed``: how many episodes of the batch were graded tampered / came from the corpus.
    """
    on_policy = [s for s in samples if not s.facts.get("replayed")]
    metrics = {"episodes/tampered": float(sum(s.facts["termination_reason"] == "tampered" for s in on_policy)),
               "episodes/replayed": float(len(samples) - len(on_policy))}
    if on_policy:
        metrics["episodes/solve_rate"] = sum(bool(s.facts["final_test_passed"]) for s in on_policy) / len(on_policy)
    return metrics


class EpisodeProgress:
    """The hooks GRPO calls around its phases; this one does nothing (``pdbgym.train.grpo.progress`` shows
    them as progress bars and keeps each episode's transcript).

    ``phase(kind, step, total)`` wraps a batch of ``total`` episodes: kind ``rollouts`` (optimizer step
    ``step``'s groups) or ``val gate`` (the checkpoint saved at ``step``); ``episode_finished`` is the
    ``on_episode`` hook of ``run_episodes`` inside it; ``trainer_callback()`` is a ``TrainerCallback``
    that follows the optimizer steps (or None).
    """

    @contextmanager
    def phase(self, kind: str, step: int, total: int) -> Iterator[None]:
        yield

    def episode_finished(self, index: int, outcome: EpisodeOutcome) -> None:
        return None

    def trainer_callback(self) -> Any | None:
        return None
