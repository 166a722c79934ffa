"""Batched multi-turn rollouts: the live episodes of a batch share the model through one engine.

Each episode is pdbgym's own loop (``pdbgym.agent.loop.run_episode``) on its own ``DebugEnv``; episodes
advance concurrently under asyncio and their env steps run in threads. Their turn source is a
``GroupTurns`` that sends each turn to a ``BatchedGenerator``: the trainer's model behind a
``pdbgym.engine.LocalEngine``, which batches whatever turns are pending (a turn never waits for another
episode's environment step) and, inside TRL's ``unwrap_model_for_generation``, runs on the trainer's
live weights.

Log-probs are ``log_softmax(logits / T)[sampled id]`` of the raw logits (``hf:tempered``), the same
quantity TRL's GRPO computes on the trainer side (it also divides by ``temperature``), so the
rollout/trainer mismatch is numerical only (padding, batch shape, kernels).

Seeds: each episode's ``SamplingParams.seed`` is its ``pdbgym.seeds`` episode seed, and each turn's draw
is seeded from it and the turn's place (``pdbgym.seeds.turn_seed``); the engine's draw depends on a
row's own seed alone, so an episode replays alike whichever episodes share its batches (up to the
numerics of the batch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from pdbgym.agent.backends.base import Generation, GenerationRequest, stop_token_ids
from pdbgym.agent.backends.hf import pad_id
from pdbgym.agent.loop import AgentConfig, EpisodeOutcome, run_episode
from pdbgym.agent.toolcalls import ToolCallError, parse_tool_call
from pdbgym.engine import EngineRequest, EngineResult, EngineSettings, EngineStats, LocalEngine
from pdbgym.env import DebugEnv
from pdbgym.rollouts.record import LogprobSemantics
from pdbgym.seeds import episode_seed, grpo_episode_seed
from pdbgym.tasks.model import Task
from pdbgym.termination import transcript_grading, verdict_refused
from pdbgym.train.grpo.records import EpisodeFacts

if TYPE_CHECKING:  # annotations only: torch and transformers load with the trainer
    import torch
    from transformers import PreTrainedTokenizerBase, TrainerCallback

GROUP_SEMANTICS_ENGINE = "hf:tempered"


class BatchedGenerator:
    """The turns of live episodes, served by one ``LocalEngine`` over ``model``.

    ``model`` is a causal LM (a PEFT model too); ``context`` returns a context manager entered around
    each batch that may yield the model to run (the trainer passes TRL's ``unwrap_model_for_generation``).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase,
                 context: Callable[[], AbstractContextManager[torch.nn.Module | None]] | None = None,
                 settings: EngineSettings | None = None):
        self.model = model
        self.tokenizer = tokenizer
        self.stops = sorted(stop_token_ids(tokenizer, model))
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token to pad a batch with")
        self.engine = LocalEngine(model, set(self.stops), pad_id(tokenizer), settings, context)

    @property
    def stats(self) -> EngineStats:
        return self.engine.stats

    def expect(self, episodes: int, prompt_ids: int = 0) -> None:
        """Up to ``episodes`` episodes will ask for turns at once, with prompts of up to ``prompt_ids`` ids
        (sizes the engine's batches and static sessions)."""
        self.engine.expect(episodes, prompt_ids)

    def _submit(self, request: GenerationRequest) -> Future[EngineResult]:
        params = request.params
        return self.engine.submit(EngineRequest(list(request.prompt_ids), params.max_new_tokens, params.temperature,
                                                params.top_p, params.seed, "tempered"))

    def _generation(self, result: EngineResult) -> Generation:
        text = self.tokenizer.decode(result.ids, skip_special_tokens=False)
        return Generation(result.ids, result.logprobs, text, result.finish, model_seconds=result.model_seconds)

    async def generate(self, request: GenerationRequest) -> Generation:
        return self._generation(await asyncio.wrap_future(self._submit(request)))

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Every request at once, waited for (results in the same order)."""
        futures = [self._submit(r) for r in requests]
        return [self._generation(f.result()) for f in futures]

    def close(self) -> None:
        self.engine.close()


class GroupTurns:
    """A turn source for one episode whose turns come from a shared ``BatchedGenerator``."""

    def __init__(self, generator: BatchedGenerator, name: str, temperature: float, top_p: float):
        self.generator = generator
        self.name = name
        self.tokenizer = generator.tokenizer
        self.semantics = LogprobSemantics(engine=GROUP_SEMANTICS_ENGINE, temperature=temperature if temperature > 0
                                          else 1.0, top_p=top_p, top_p_renormalized=False)

    def reset(self, task: Task, observation: str) -> None:
        return None

    async def next_turn(self, request: GenerationRequest, last_observation: str) -> Generation:
        return await self.generator.generate(request)


Result = TypeVar("Result")


async def gather_with_threads(jobs: Sequence[Callable[[], Awaitable[Result]]], threads: int) -> list[Result]:
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


def run_episodes(tasks: Sequence[Task], generator: BatchedGenerator, agent: AgentConfig,
                 make_env: Callable[[Task], DebugEnv], name: str = "policy",
                 on_episode: EpisodeHook | None = None, seeds: Sequence[int] | None = None) -> list[EpisodeOutcome]:
    """Play one episode per entry of ``tasks`` (repeat a task G times for a group), all together.

    Returns the outcomes in the order of ``tasks``. ``make_env(task)`` builds a fresh env per episode.
    ``on_episode(index, outcome)`` runs as each episode finishes (progress, saving its transcript), in
    finishing order, on the event loop's thread. ``seeds`` (one per entry of ``tasks``, from
    ``pdbgym.seeds``) become each episode's sampling seed; None keeps ``agent.sampling.seed``.
    """
    if seeds is not None and len(seeds) != len(tasks):
        raise ValueError(f"{len(seeds)} seed(s) for {len(tasks)} episode(s): give one seed per episode")

    async def one(index: int, task: Task) -> EpisodeOutcome:
        turns = GroupTurns(generator, name, agent.sampling.temperature, agent.sampling.top_p)
        config = replace(agent, sample_idx=index)
        if seeds is not None:
            config = replace(config, sampling=replace(agent.sampling, seed=int(seeds[index])))
        outcome = await run_episode(task, turns, make_env(task), config)
        if on_episode is not None:
            on_episode(index, outcome)
        return outcome

    generator.expect(len(tasks), agent.max_context_tokens)
    jobs = [lambda i=i, t=t: one(i, t) for i, t in enumerate(tasks)]
    return asyncio.run(gather_with_threads(jobs, threads=2 * len(tasks) + 2))


def run_one_at_a_time(tasks: Sequence[Task], generator: BatchedGenerator, agent: AgentConfig,
                      make_env: Callable[[Task], DebugEnv], name: str = "policy",
                      on_episode: EpisodeHook | None = None) -> list[EpisodeOutcome]:
    """The baseline: the same episodes, each played alone (batch size 1 on every turn)."""
    def hook(index: int) -> EpisodeHook | None:
        return None if on_episode is None else (lambda _, outcome: on_episode(index, outcome))

    return [run_episodes([task], generator, agent, make_env, name, hook(i))[0] for i, task in enumerate(tasks)]


def valid_tool_call_rate(messages: list[dict[str, str]], tool_format: str) -> float:
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
    facts: EpisodeFacts


def sample_from_outcome(outcome: EpisodeOutcome, tool_format: str) -> EpisodeSample:
    """Split a finished episode's token-exact record into GRPO's fields."""
    record = outcome.record
    transcript = outcome.transcript
    facts: EpisodeFacts = {
        "instance_id": record.instance_id,
        "final_test_passed": bool(transcript["final_test_passed"]),
        "termination_reason": str(transcript["termination_reason"]),
        # the grading refused the run's verdict (an abnormal end), the episode not tampered
        "grade_refused": verdict_refused(transcript_grading(transcript), str(transcript["termination_reason"])),
        "turns": int(transcript["actions_used"]),
        "valid_tool_call_rate": valid_tool_call_rate(transcript["messages"], tool_format),
        "model_seconds": float(outcome.model_seconds),  # waiting for turns (the engine's queue and decode)
        "env_seconds": float(outcome.env_seconds),  # in the sandbox (pdb, edits, test runs, grading)
    }
    return EpisodeSample(list(record.tokens[:record.prompt_len]), list(record.tokens[record.prompt_len:]),
                         list(record.rollout_log_probs), list(record.loss_mask), facts)


def episode_metrics(samples: Sequence[EpisodeSample], rungs: Callable[[str], int] | None = None) -> dict[str, float]:
    """One rollout batch's episode counts, logged beside TRL's metrics each step.

    ``episodes/solve_rate``: share of on-policy episodes whose final tests passed (replayed corpus
    trajectories are solved by construction and left out); ``episodes/tampered``, ``episodes/refused``
    and ``episodes/replayed``: how many episodes of the batch were graded tampered / had their grading
    verdict refused without being tampered (``pdbgym.termination.verdict_refused``) / came from the corpus.
    With ``rungs`` (task id -> rung of the task ladder), ``episodes/rung_R/played`` and
    ``episodes/rung_R/solved`` count the on-policy episodes of each rung R. ``time/episode_model_s`` and
    ``time/episode_env_s``: an on-policy episode's mean seconds waiting for turns and in the sandbox
    (episodes run at once, so these split an episode's latency, not the step's wall time).
    """
    on_policy = [s for s in samples if not s.facts.get("replayed")]
    metrics = {"episodes/tampered": float(sum(s.facts["termination_reason"] == "tampered" for s in on_policy)),
               "episodes/refused": float(sum(bool(s.facts.get("grade_refused")) for s in on_policy)),
               "episodes/replayed": float(len(samples) - len(on_policy))}
    if on_policy:
        metrics["episodes/solve_rate"] = sum(bool(s.facts["final_test_passed"]) for s in on_policy) / len(on_policy)
        for key, name in (("model_seconds", "time/episode_model_s"), ("env_seconds", "time/episode_env_s")):
            timed = [float(s.facts[key]) for s in on_policy if key in s.facts]
            if timed:
                metrics[name] = sum(timed) / len(timed)
    for sample in on_policy if rungs is not None else []:
        level = rungs(sample.facts["instance_id"])
        for key, add in (("played", 1.0), ("solved", float(bool(sample.facts["final_test_passed"])))):
            metrics[f"episodes/rung_{level}/{key}"] = metrics.get(f"episodes/rung_{level}/{key}", 0.0) + add
    return metrics


ENGINE_METRICS = (("busy_seconds", "engine/busy_s"), ("prefill_seconds", "engine/prefill_s"),
                  ("draw_seconds", "engine/draw_s"), ("decode_steps", "engine/decode_steps"),
                  ("batches", "engine/sessions"), ("prefill_tokens", "engine/prefill_tokens"),
                  ("prefills", "engine/prefills"), ("step_seconds", "engine/step_s"),
                  ("keep_seconds", "engine/keep_s"), ("admit_seconds", "engine/admit_s"))


def engine_metrics(before: EngineStats | None, after: EngineStats) -> dict[str, float]:
    """What the engine did between two reads of its stats (``before`` None: since it started).

    ``engine/busy_s``: seconds inside batches (decoding, prefilling, drawing), of which
    ``engine/prefill_s`` prefilling (``engine/prefills`` forward passes of ``engine/prefill_tokens`` ids)
    and ``engine/draw_s`` sampling and bookkeeping (its host round trip waits for the step's kernels),
    ``engine/step_s`` setting decode steps' inputs and launching them, ``engine/keep_s`` keeping ended
    rows' caches for their next turns, ``engine/admit_s`` placing rows that join a static session (less
    their prefill, draw and kept caches); the rest of ``engine/busy_s`` is the loop's own bookkeeping;
    ``engine/sessions``:
    static sessions or dynamic rounds started; ``engine/live_rows``: mean rows live per decode step (how
    full the batch ran).
    """
    metrics = {name: float(getattr(after, key)) - float(getattr(before, key) if before is not None else 0)
               for key, name in ENGINE_METRICS}
    steps = metrics["engine/decode_steps"]
    rows = after.row_steps - (before.row_steps if before is not None else 0)
    metrics["engine/live_rows"] = rows / steps if steps else 0.0
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

    def trainer_callback(self) -> TrainerCallback | None:
        return None
