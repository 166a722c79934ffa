"""Batched multi-turn rollouts: the live episodes of a batch share one ``generate`` call per round.

Each episode is pdbgym's own loop (``pdbgym.agent.loop.run_episode``) on its own ``DebugEnv``; episodes
advance concurrently under asyncio and their env steps run in threads. Their turn source is a
``GroupTurns`` that hands the pending request to a ``BatchedGenerator``; the generator waits until
every live episode has asked for a turn (or finished), then runs ONE left-padded batched ``generate``
of the local model over all pending requests and hands each episode its ids and log-probs.

Log-probs are ``log_softmax(logits / T)[sampled id]`` of the raw logits (``hf:tempered``), the same
quantity TRL's GRPO computes on the trainer side (it also divides by ``temperature``), so the
rollout/trainer mismatch is numerical only (padding, batch shape, kernels).

Seeds: each episode's ``SamplingParams.seed`` is its ``pdbgym.seeds`` episode seed. A batched ``generate``
draws every row from one generator, so a round whose requests all carry a seed orders its rows by
(seed, prompt) and draws from ``round_seed`` of those seeds and prompt lengths, in a forked RNG state
(the trainer's own random stream is left as it was): a group replays alike whatever order its episodes
asked in, up to the numerics of the batch.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

from pdbgym.agent.backends.base import Generation, GenerationRequest, SamplingParams, stop_token_ids
from pdbgym.agent.loop import AgentConfig, EpisodeOutcome, run_episode
from pdbgym.agent.toolcalls import ToolCallError, parse_tool_call
from pdbgym.modelload import own_sampling
from pdbgym.rollouts.record import LogprobSemantics
from pdbgym.seeds import episode_seed, grpo_episode_seed

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
        """One left-padded ``generate`` over ``requests`` (same sampling params); ids cut at each stop.

        When every request carries a seed, the rows are ordered by (seed, prompt) and the draw is seeded
        with ``round_seed`` (see the module's docstring); the results come back in ``requests``' order.
        """
        seeds = [r.params.seed for r in requests]
        if not requests or any(seed is None for seed in seeds):
            return self._generate_rows(requests, None)
        order = sorted(range(len(requests)), key=lambda i: (seeds[i], requests[i].prompt_ids))
        drawn = self._generate_rows([requests[i] for i in order], round_seed(requests))
        results: list[Generation] = [drawn[0]] * len(requests)
        for position, index in enumerate(order):
            results[index] = drawn[position]
        return results

    def _generate_rows(self, requests: Sequence[GenerationRequest], seed: int | None) -> list[Generation]:
        import torch  # optional: torch (pdbgym[hf])

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
        forked = torch.random.fork_rng(devices=[device] if device.type == "cuda" else []) if seed is not None \
            else nullcontext()
        with self.context() as model, torch.no_grad(), forked:
            model = model if model is not None else self.model
            if seed is not None:
                torch.manual_seed(seed)
            with own_sampling(model):
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
        from transformers import GenerationConfig  # optional: transformers (pdbgym[hf])

        # With own_sampling around generate: nothing inherited from the model's generation config
        # (top_k, repetition penalties) may change the distribution the log-probs are reported for.
        sample = params.temperature > 0
        return GenerationConfig(
            max_new_tokens=max_new, do_sample=sample, temperature=params.temperature if sample else None,
            top_p=params.top_p if sample else None, top_k=0 if sample else None, eos_token_id=self.stops,
            pad_token_id=self.pad_id, use_cache=True, return_dict_in_generate=True, output_logits=True)


def round_seed(requests: Sequence[GenerationRequest]) -> int:
    """The seed of one batched draw: crc32 of its requests' (episode seed, prompt length) pairs, sorted.

    The prompt length tells an episode's turns apart, so each round of a group draws afresh; sorting makes
    it independent of the order the episodes asked in.
    """
    pairs = sorted((int(r.params.seed if r.params.seed is not None else -1), len(r.prompt_ids)) for r in requests)
    return zlib.crc32(repr(pairs).encode()) % 2**31


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


def group_seeds(base: int, prompts: Sequence[str], positions: Sequence[int], step: int, group_size: int,
                groups_per_step: int, process_index: int = 0) -> list[int]:
    """The seeds of the episodes at ``positions`` of one process's rollout batch at optimizer step ``step``.

    ``prompts`` is the batch as TRL hands it (task ids, each repeated ``group_size`` times in a row), so
    position p is slot ``p % group_size`` of this process's group ``p // group_size``; this process's groups
    follow those of the processes before it. Each seed is ``pdbgym.seeds.grpo_episode_seed(base, task id,
    step, group, slot, ...)``.
    """
    here = -(-len(prompts) // group_size)
    first = process_index * here
    total = max(groups_per_step, first + here)
    return [grpo_episode_seed(base, prompts[p], step, first + p // group_size, p % group_size, group_size, total)
            for p in positions]


def repeat_seeds(base: int, instance_ids: Sequence[str]) -> list[int]:
    """Seeds of a list of episodes that repeats tasks (a val gate's runs): the r-th occurrence of a task is
    its run r, ``episode_seed(base, task id, r)``, so every checkpoint is gated on the same draws."""
    seen: dict[str, int] = {}
    seeds = []
    for instance_id in instance_ids:
        seeds.append(episode_seed(base, instance_id, seen.get(instance_id, 0)))
        seen[instance_id] = seen.get(instance_id, 0) + 1
    return seeds


def run_episodes(tasks: Sequence[Any], generator: BatchedGenerator, agent: AgentConfig,
                 make_env: Callable[[Any], Any], name: str = "policy",
                 on_episode: EpisodeHook | None = None, seeds: Sequence[int] | None = None) -> list[EpisodeOutcome]:
    """Play one episode per entry of ``tasks`` (repeat a task G times for a group), all together.

    Returns the outcomes in the order of ``tasks``. ``make_env(task)`` builds a fresh env per episode.
    ``on_episode(index, outcome)`` runs as each episode finishes (progress, saving its transcript), in
    finishing order, on the event loop's thread. ``seeds`` (one per entry of ``tasks``, from
    ``pdbgym.seeds``) become each episode's sampling seed; None keeps ``agent.sampling.seed``.
    """
    if seeds is not None and len(seeds) != len(tasks):
        raise ValueError(f"{len(seeds)} seed(s) for {len(tasks)} episode(s): give one seed per episode")

    async def one(index: int, task: Any) -> EpisodeOutcome:
        turns = GroupTurns(generator, name, agent.sampling.temperature, agent.sampling.top_p)
        config = replace(agent, sample_idx=index)
        if seeds is not None:
            config = replace(config, sampling=replace(agent.sampling, seed=int(seeds[index])))
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
