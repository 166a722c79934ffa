"""GRPO on TRL's ``GRPOTrainer``: pdbgym episodes as the rollout, the seed recipe as extensions.

The policy is the base with its frozen SFT adapter merged in memory (``resolve_base``: the lineage is
checked, so the delta trains on exactly the weights it is registered against); TRL wraps it with a
fresh trainable DoRA delta, and with ``beta != 0`` TRL's reference is that model with the delta
disabled: the SFT model, not the raw base. Each optimizer step plays ``tasks_per_step`` groups of
``group`` episodes through ``pdbgym.agent.loop`` (``pdbgym.train.grpo.rollout``: one batched ``generate``
per round over every live episode) and hands TRL ``prompt_ids`` / ``completion_ids`` / ``logprobs`` /
``env_mask`` plus the episode facts the reward functions read.

What TRL does not carry and how it is extended here (subclass and callbacks, no loop of our own):
the adaptive KL leash (``AdaptiveKLCallback`` sets ``trainer.beta``), the BC anchor
(``compute_loss`` adds ``w * nll``), the replay seed and turn-budget curriculum (inside the
rollout function), recipe state across resume (written beside each checkpoint), and val gating.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from pdbgym.agent.backends.base import SamplingParams
from pdbgym.agent.loop import AgentConfig
from pdbgym.engine import EngineSettings
from pdbgym.env import DebugEnv, EnvConfig
from pdbgym.errors import PdbgymError
from pdbgym.fileio import append_jsonl, write_json_atomic
from pdbgym.tasks.difficulty import demands, rung
from pdbgym.tasks.model import Task
from pdbgym.train import seams
from pdbgym.train.gradguard import GradientGuard, guard_callback
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.grpo.data import AnchorBatches, ReplayPool, anchor_nll, gather_ranks, play_across_ranks
from pdbgym.train.grpo.merged import MergedPolicy
from pdbgym.train.grpo.packing import grouped_scores
from pdbgym.train.grpo.records import EpisodeFacts, StepOutcomes
from pdbgym.train.grpo.rewards import RewardColumns, RewardConfig
from pdbgym.train.grpo.rollout import (
    BatchedGenerator,
    EpisodeProgress,
    EpisodeSample,
    engine_metrics,
    episode_metrics,
    group_seeds,
    repeat_seeds,
    run_episodes,
    sample_from_outcome,
)
from pdbgym.train.grpo.schedules import (
    AdaptiveKLCallback,
    AdaptiveKLController,
    RecipeState,
    TurnBudgetCurriculum,
    anchor_weight,
    replayed_per_group,
)
from pdbgym.train.grpo.stepdump import dump_step
from pdbgym.train.grpo.timing import UpdateClock, optimizer_clock
from pdbgym.train.grpo.valgate import append_gate, gate_on_val, read_gates
from pdbgym.train.records import LogRow

if TYPE_CHECKING:  # annotations only: torch, transformers and TRL load with the trainer
    import torch
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from trl import GRPOConfig, GRPOTrainer

logger = logging.getLogger(__name__)
MERGED_DTYPES = {"merged": "policy", "merged-float32": "float32"}  # --rollout-weights -> the copy's dtype

RECIPE_STATE_FILE = "pdbgym_recipe_state.json"


def per_process_groups(tasks_per_step: int, processes: int) -> int:
    """Groups each training process plays a step: ``tasks_per_step / processes``, whole groups only.

    A group never straddles two processes, so its G episodes are generated together on one process and
    the replay seed picks a group's replayed slots in one place; ``--tasks-per-step`` stays the global
    count of groups per optimizer step.
    """
    if processes < 1 or tasks_per_step < 1 or tasks_per_step % processes:
        fit = max(processes, tasks_per_step - tasks_per_step % processes)
        raise PdbgymError(f"--tasks-per-step {tasks_per_step} is not a multiple of the {processes} training "
                          "processes: each process plays whole groups, tasks_per_step / processes of them a step. "
                          f"Pass a multiple of {processes} (e.g. --tasks-per-step {fit}) or launch fewer processes")
    return tasks_per_step // processes


def peak_memory_gib(device: torch.device) -> float | None:
    """The most GiB the CUDA ``device`` held since the last call (the count reset), or None off CUDA."""
    import torch  # optional: torch (pdbgym[hf])

    if device.type != "cuda" or not torch.cuda.is_initialized():
        return None
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    torch.cuda.reset_peak_memory_stats(device)
    return round(peak, 2)


def micro_batch_rows(rows: int, micro_batches: int) -> int:
    """Rows of each of a process's ``micro_batches`` forward-and-backward passes over its ``rows`` episodes."""
    if rows % micro_batches:
        fits = [m for m in range(1, rows + 1) if rows % m == 0]
        raise PdbgymError(f"--update-micro-batches {micro_batches} does not divide the {rows} episodes each training "
                          f"process plays a step (group x tasks per step / processes): every micro-batch holds the "
                          f"same number of rows. Pass one of {fits}")
    return rows // micro_batches


def grpo_arguments(config: GRPORunConfig, device: str, processes: int = 1) -> GRPOConfig:
    """TRL ``GRPOConfig``: one optimizer step = ``tasks_per_step`` groups of ``group`` episodes over all
    ``processes`` (each plays ``tasks_per_step / processes`` whole groups), generated together and then split
    into ``update_micro_batches`` forward-and-backward passes whose gradients add up to the step's (TRL
    normalises each pass's loss by the whole generation batch's tokens)."""
    from trl import GRPOConfig  # optional: trl (pdbgym[train])

    groups = per_process_groups(config.tasks_per_step, processes)
    micro = config.update_micro_batches
    kwargs: dict[str, Any] = dict(  # GRPOConfig's fields, ours and then the caller's own (``config.extra``)
        output_dir=str(config.out / "checkpoints"), seed=config.seed, data_seed=config.seed,
        max_steps=config.steps, learning_rate=config.lr, lr_scheduler_type="constant",
        per_device_train_batch_size=micro_batch_rows(config.group * groups, micro),
        gradient_accumulation_steps=micro, steps_per_generation=micro,
        num_generations=config.group, num_iterations=config.num_iterations,
        temperature=config.temperature, beta=config.beta, loss_type=config.loss_type, epsilon=config.epsilon,
        importance_sampling_level=config.importance_sampling_level,
        reward_weights=RewardConfig(config.format_weight).functions()[1],
        logging_steps=1, logging_nan_inf_filter=False, save_strategy="steps", save_steps=config.save_steps, disable_tqdm=True,
        report_to=[], bf16=device.startswith("cuda"), gradient_checkpointing=config.gradient_checkpointing,
        use_cpu=device == "cpu", log_completions=False, max_completion_length=config.max_context_tokens,
    )
    kwargs.update(config.extra)
    return GRPOConfig(**kwargs)


def _trainer_class() -> type:
    class PdbgymGRPOTrainer(seams.grpo_trainer_base()):
        """GRPOTrainer plus the BC anchor term, recipe logging and recipe state across resume."""

        def setup_recipe(self, recipe: RecipeState, config: GRPORunConfig, anchor: AnchorBatches | None,
                         curriculum: TurnBudgetCurriculum) -> None:
            self.recipe_state = recipe
            self.run_config = config
            self.anchor = anchor
            self.curriculum = curriculum
            self.update_clock = UpdateClock()
            self.add_callback(optimizer_clock(self.update_clock))

        def _prepare_inputs(self, generation_batch: dict[str, torch.Tensor | Any]) -> dict[str, torch.Tensor | Any]:
            with self.update_clock.timed("prepare"):
                return super()._prepare_inputs(generation_batch)

        def _get_per_token_logps_and_entropies(self, model: torch.nn.Module, input_ids: torch.Tensor,
                                               attention_mask: torch.Tensor, logits_to_keep: int,
                                               batch_size: int | None = None, compute_entropy: bool = False,
                                               compute_aux_loss: bool = False, **rest: object
                                               ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
            import torch  # optional: torch (pdbgym[hf])

            parent = super()._get_per_token_logps_and_entropies
            budget = self.run_config.update_tokens
            with self.update_clock.timed("policy_forward" if torch.is_grad_enabled() else "reference"):
                if budget <= 0 or compute_aux_loss or input_ids.size(0) < 2 or any(v is not None for v in rest.values()):
                    return parent(model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                                  compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **rest)
                logps, entropies = grouped_scores(lambda ids, mask, keep, compute_entropy: parent(
                    model, ids, mask, keep, compute_entropy=compute_entropy), input_ids, attention_mask,
                    logits_to_keep, budget, compute_entropy)
                return logps, entropies, None

        def training_step(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor | Any],
                          num_items_in_batch: torch.Tensor | int | None = None) -> torch.Tensor:
            with self.update_clock.timed("train_step"):
                return super().training_step(model, inputs, num_items_in_batch)

        def compute_loss(self, model: torch.nn.Module, inputs: dict[str, torch.Tensor | Any], return_outputs: bool = False,
                         num_items_in_batch: torch.Tensor | int | None = None) -> torch.Tensor:
            if getattr(self, "_batches_of", None) != self.state.global_step:
                self.step_batches, self._batches_of = [], self.state.global_step
            self.step_batches.append(inputs)  # kept until the next step: a skipped step's are dumped (stepdump)
            with self.update_clock.timed("loss"):
                loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
                weight = anchor_weight(self.state.global_step, self.run_config.anchor_weight,
                                       self.run_config.anchor_decay_steps) if self.anchor else 0.0
                if weight > 0 and len(self.step_batches) == 1:  # once a step: its first micro-batch carries it
                    with self.update_clock.timed("anchor"):
                        nll = anchor_nll(model, self.anchor.batch(self.state.global_step))
                    loss = loss + weight * nll
                    seams.append_metric(self, "bc/nll", float(nll.detach()))
            seams.append_metric(self, "bc/weight", weight)
            return loss

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            if self.model.training:
                metrics = seams.metrics_buffer(self)  # TRL's step_time holds rollouts, scoring and the update
                if metrics.get("step_time") and metrics.get("time/rollout_s"):
                    step, rollout = (sum(metrics[k]) / len(metrics[k]) for k in ("step_time", "time/rollout_s"))
                    metrics["time/update_s"] = [max(0.0, step - rollout)]
                rollouts = metrics.get("time/rollout_s") or [0.0]
                for key, value in self.update_clock.drain(sum(rollouts) / len(rollouts)).items():
                    metrics[key] = [value]
                peak = peak_memory_gib(self.accelerator.device)
                if peak is not None:  # the step's high-water mark of the card: what --update-micro-batches trades
                    metrics["memory/peak_gib"] = [peak]
                logs = {**logs, "beta": float(self.beta), "turn_budget": float(self.recipe_state.budget_now),
                        "episodes/tampered_total": float(self.recipe_state.tampered_total),
                        "episodes/refused_total": float(self.recipe_state.refused_total),
                        "episodes/replayed_total": float(self.recipe_state.replayed_total)}
            super().log(logs, start_time)

        def _save_checkpoint(self, model: torch.nn.Module, trial: object) -> None:
            # The recipe state goes in first: a checkpoint whose trainer_state.json exists is then complete.
            if self.args.should_save:
                folder = Path(seams.checkpoint_folder(self, trial)) / f"checkpoint-{self.state.global_step}"
                self.recipe_state.beta = float(self.beta)
                self.recipe_state.curriculum_current = self.curriculum.current
                write_json_atomic(folder / RECIPE_STATE_FILE, self.recipe_state.to_dict())
            super()._save_checkpoint(model, trial)

        def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
            super()._load_optimizer_and_scheduler(checkpoint)
            path = Path(checkpoint) / RECIPE_STATE_FILE if checkpoint else None
            if path is not None and path.is_file():
                saved = RecipeState(**json.loads(path.read_text()))
                for key, value in asdict(saved).items():
                    setattr(self.recipe_state, key, value)
                self.beta = saved.beta
                if saved.curriculum_current >= 0:
                    self.curriculum.current = saved.curriculum_current
                for callback in self.callback_handler.callbacks:
                    if hasattr(callback, "controller"):
                        callback.controller.beta = saved.beta

    return PdbgymGRPOTrainer


class PlayEpisodes(Protocol):
    """How a batch of episodes is played: ``PdbgymRollout.play_episodes``, or a test's stand-in."""

    def __call__(self, tasks: list[Task], trainer: GRPOTrainer, turn_budget: int, temperature: float,
                 seeds: list[int] | None = None) -> list[EpisodeSample]: ...


class RolloutOutput(RewardColumns):
    """What ``rollout_func`` hands TRL: each episode's ids, sampling log-probs and env mask, then the reward
    functions' columns (``rewards.RewardColumns``)."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    env_mask: list[list[int]]


class RankRow(TypedDict):
    """A line of ``ranks/rank-R.jsonl``: one process's view of a step (``PdbgymRollout._log_rank``)."""

    step: int
    rank: int
    episodes: int
    episodes_all_ranks: int
    solve_rate: float | None
    turn_budget: int
    next_turn_budget: int
    beta: float
    replay_next: dict[str, int]
    tampered_total: int
    refused_total: int
    episodes_total: int
    replayed_total: int


class PdbgymRollout:
    """TRL's ``rollout_func``: prompts (task ids, G in a row per group) -> ids, log-probs, env mask, facts."""

    def __init__(self, tasks: dict[str, Task], config: GRPORunConfig, recipe: RecipeState,
                 curriculum: TurnBudgetCurriculum, replay: ReplayPool | None, tool_format: str,
                 play: PlayEpisodes | None = None):
        self.tasks = tasks
        self.config = config
        self.recipe = recipe
        self.curriculum = curriculum
        self.replay = replay
        self.tool_format = tool_format
        self.play: PlayEpisodes = play or self.play_episodes
        self.trainer: GRPOTrainer | None = None
        self._generator: BatchedGenerator | None = None
        self._merged: MergedPolicy | None = None
        self._merge_refused = False
        self._merge_why = ""
        self.progress = EpisodeProgress()  # phase/episode hooks (progress.GRPOProgress shows them)
        self._rungs: dict[str, int] = {}

    def play_episodes(self, tasks: list[Task], trainer: GRPOTrainer, turn_budget: int, temperature: float,
                      seeds: list[int] | None = None) -> list[EpisodeSample]:
        generator = self._generator_for(trainer)
        agent = AgentConfig(tool_format=self.tool_format, max_context_tokens=self.config.max_context_tokens,
                            sampling=SamplingParams(temperature, 1.0, self.config.max_new_tokens, None),
                            dataset="pdbgym_grpo", check_trajectory=True)
        env = EnvConfig(turn_budget=turn_budget, command_timeout_s=self.config.command_timeout_s)
        outcomes = run_episodes(tasks, generator, agent, lambda task: DebugEnv(task, env), name="grpo-policy",
                                on_episode=self.progress.episode_finished, seeds=seeds)
        return [sample_from_outcome(outcome, self.tool_format) for outcome in outcomes]

    @property
    def weights_used(self) -> str:
        """What this process's rollouts decoded from: ``merged``, ``merged-float32``, ``live``, or ``live``
        with the reason the merged copy was refused."""
        if self._merged is not None:
            return self.config.rollout_weights
        return f"live (a merged copy {self._merge_why})" if self._merge_why else "live"

    def _generator_for(self, trainer: GRPOTrainer) -> BatchedGenerator:
        """One engine for the run. With ``rollout_weights = "merged"`` it decodes from a merged copy of the
        policy (``MergedPolicy``), refreshed from the live weights before every batch of episodes; else
        (or where the copy cannot be made, said once) from the live PEFT model itself."""
        copy_dtype = MERGED_DTYPES.get(self.config.rollout_weights)
        if self._merged is None and copy_dtype is not None and not self._merge_refused:
            with seams.unwrapped_for_generation(trainer) as live:
                self._merged, why = MergedPolicy.of(live, copy_dtype)
            if self._merged is None:
                self._merge_refused, self._merge_why = True, why
                logger.warning("GRPO rollouts decode from the live PEFT model: a merged copy %s", why)
            else:
                logger.info("GRPO rollouts decode from a merged %s copy of the policy (%.0f MiB), refreshed "
                            "before every batch of episodes", next(self._merged.model.parameters()).dtype,
                            self._merged.megabytes())
        elif self._merged is not None:
            started = time.perf_counter()
            with seams.unwrapped_for_generation(trainer) as live:
                self._merged.refresh(live)
                why = self._merged.mismatch(live)  # two forwards of a few ids: checked at every refresh
            seams.append_metric(trainer, "time/refresh_s", time.perf_counter() - started)
            if why:
                self._merged, self._merge_refused, self._merge_why = None, True, why
                logger.warning("GRPO rollouts decode from the live PEFT model from now on: the merged copy %s", why)
        if self._merged is not None:
            if self._generator is None or self._generator.model is not self._merged.model:
                self._generator = BatchedGenerator(self._merged.model, trainer.processing_class,
                                                   settings=self._engine_settings())
        elif self._generator is None or self._generator.model is not trainer.model:
            self._generator = BatchedGenerator(trainer.model, trainer.processing_class,
                                               lambda: seams.unwrapped_for_generation(trainer), self._engine_settings())
        self._generator.engine.forget_prefixes()  # the weights changed since the last batch: no old KV caches
        return self._generator

    def _engine_settings(self) -> EngineSettings:
        """The rollouts' engine: the decode step compiled before its capture with ``--compile-decode``."""
        return EngineSettings(graphs="compiled" if self.config.compile_decode else "capture")

    def __call__(self, prompts: list[str], trainer: GRPOTrainer) -> RolloutOutput:
        step = trainer.state.global_step
        budget = self.curriculum.budget(step)
        self.recipe.budget_now = budget
        slots: list[EpisodeSample | None] = []
        to_play: list[Task] = []
        taken: dict[str, int] = {}
        if self.replay is not None:  # the recipe state holds the rotation: a resumed run continues it
            self.replay.restore(self.recipe.replay_next)
        groups = _runs(prompts)  # TRL repeats each prompt G times in a row; whole groups per process
        for group, count in zip(groups, self._replay_counts(step, len(groups), trainer), strict=True):
            task = self._task(group[0])
            replayed = self.replay.take(task.instance_id, min(count, len(group) - 1)) if self.replay else []
            taken[task.instance_id] = taken.get(task.instance_id, 0) + len(replayed)
            slots.extend(replayed + [None] * (len(group) - len(replayed)))
            to_play.extend([task] * (len(group) - len(replayed)))
        seeds = group_seeds(self.config.seed, prompts, [p for p, slot in enumerate(slots) if slot is None], step,
                            self.config.group, self.config.tasks_per_step, trainer.accelerator.process_index)
        started = time.perf_counter()
        engine, before = self._generator, copy.deepcopy(self._generator.stats) if self._generator is not None else None
        with self.progress.phase("rollouts", step + 1, len(to_play)):
            played = iter(self.play(to_play, trainer, budget, self.config.temperature, seeds=seeds) if to_play else [])
        seams.append_metric(trainer, "time/rollout_s", time.perf_counter() - started)
        if self._generator is not None:  # where the rollouts' seconds went inside the engine
            fresh = self._generator is not engine  # a new engine this step: all it did
            for key, value in engine_metrics(None if fresh else before, self._generator.stats).items():
                seams.append_metric(trainer, key, value)
        samples = [slot if slot is not None else next(played) for slot in slots]
        # Every process accounts the episodes of ALL processes, so the curriculum, the counters, the replay
        # rotation and the logged episode metrics are the same on every rank (one process: a list of one).
        everyone = gather_ranks(trainer, ([s.facts for s in samples], taken))
        if self.replay is not None:
            for rank, (_, rank_taken) in enumerate(everyone):
                if rank != trainer.accelerator.process_index:
                    self.replay.skip(rank_taken)
            self.recipe.replay_next = self.replay.positions()
        step_facts = [EpisodeSample([], [], [], [], facts) for rank_facts, _ in everyone for facts in rank_facts]
        self._account(step_facts)
        if trainer.accelerator.is_main_process:
            append_jsonl(self.config.out / OUTCOMES_FILE, [step_outcomes(step + 1, step_facts)])
        for key, value in episode_metrics(step_facts, self._rung).items():
            seams.append_metric(trainer, key, value)
        self._log_rank(trainer, step, len(samples), step_facts, budget)
        return rollout_output(samples)

    def _rung(self, instance_id: str) -> int:
        if instance_id not in self._rungs:  # measured once a task, from the task alone
            self._rungs[instance_id] = rung(demands(self._task(instance_id)))
        return self._rungs[instance_id]

    def _task(self, instance_id: str) -> Task:
        if instance_id not in self.tasks:
            raise PdbgymError(f"the GRPO dataset names task {instance_id!r}, which is not among the training tasks")
        return self.tasks[instance_id]

    def _replay_counts(self, step: int, groups: int, trainer: GRPOTrainer) -> list[int]:
        """This process's share of the step's replayed slots, one count per group: the counts are spread
        over the step's groups on all processes (``tasks_per_step``), so the step replays what one
        process playing every group would."""
        if self.replay is None:
            return [0] * groups
        processes = trainer.accelerator.num_processes
        everyone = max(groups * processes, self.config.tasks_per_step)
        counts = replayed_per_group(step, self.config.group, everyone, self.config.replay_fraction,
                                    self.config.replay_decay_steps)
        first = trainer.accelerator.process_index * groups
        return counts[first:first + groups]

    def _account(self, samples: list[EpisodeSample]) -> None:
        on_policy = [s for s in samples if not s.facts.get("replayed")]
        self.recipe.episodes_total += len(on_policy)
        self.recipe.replayed_total += len(samples) - len(on_policy)
        self.recipe.tampered_total += sum(s.facts["termination_reason"] == "tampered" for s in on_policy)
        self.recipe.refused_total += sum(bool(s.facts.get("grade_refused")) for s in on_policy)
        if on_policy:
            self.curriculum.observe(sum(s.facts["final_test_passed"] for s in on_policy) / len(on_policy))

    def _log_rank(self, trainer: GRPOTrainer, step: int, episodes: int, step_facts: list[EpisodeSample],
                  budget: int) -> None:
        """With several processes, each appends the episodes it played and the recipe state it now holds to
        ``ranks/rank-R.jsonl``: the rows of a step agree across ranks on everything but ``rank`` and
        ``episodes`` (this rank's share of the step)."""
        if trainer.accelerator.num_processes < 2:
            return
        rank = trainer.accelerator.process_index
        on_policy = [s.facts["final_test_passed"] for s in step_facts if not s.facts.get("replayed")]
        row: RankRow = {"step": step + 1, "rank": rank, "episodes": episodes, "episodes_all_ranks": len(step_facts),
                        "solve_rate": sum(on_policy) / len(on_policy) if on_policy else None, "turn_budget": budget,
                        "next_turn_budget": self.curriculum.budget(step + 1), "beta": float(trainer.beta),
                        "replay_next": self.recipe.replay_next, "tampered_total": self.recipe.tampered_total,
                        "refused_total": self.recipe.refused_total, "episodes_total": self.recipe.episodes_total,
                        "replayed_total": self.recipe.replayed_total}
        append_jsonl(self.config.out / RANKS_DIR / f"rank-{rank}.jsonl", [row], sort_keys=True)


def step_outcomes(step: int, samples: list[EpisodeSample]) -> StepOutcomes:
    """A step's row of ``outcomes.jsonl``: every episode of the step (all processes'), its task, whether its
    final tests passed, whether it was replayed from the corpus, how it ended and whether its grading
    refused the verdict (not tampered). The per-step metrics pool tasks; these rows let a report compare a
    task with itself across steps."""
    return {"step": step, "episodes": [
        {"task": s.facts["instance_id"], "solved": bool(s.facts["final_test_passed"]),
         "replayed": bool(s.facts.get("replayed")), "reason": s.facts.get("termination_reason"),
         "refused": bool(s.facts.get("grade_refused"))} for s in samples]}


def _runs(prompts: list[str]) -> list[list[str]]:
    """Consecutive runs of the same task id: the groups of the batch."""
    runs: list[list[str]] = []
    for prompt in prompts:
        if runs and runs[-1][0] == prompt:
            runs[-1].append(prompt)
        else:
            runs.append([prompt])
    return runs


def rollout_output(samples: list[EpisodeSample]) -> RolloutOutput:
    """The dict TRL's ``rollout_func`` contract asks for; every non-required key reaches the rewards."""
    return {
        "prompt_ids": [s.prompt_ids for s in samples],
        "completion_ids": [s.completion_ids for s in samples],
        "logprobs": [s.logprobs for s in samples],
        "env_mask": [s.env_mask for s in samples],
        "final_test_passed": [s.facts["final_test_passed"] for s in samples],
        "termination_reason": [s.facts["termination_reason"] for s in samples],
        "turns": [s.facts["turns"] for s in samples],
        "valid_tool_call_rate": [s.facts["valid_tool_call_rate"] for s in samples],
        "replayed": [bool(s.facts.get("replayed", False)) for s in samples],
    }


def set_quiet_trl() -> None:
    """``rollout_func`` is marked experimental in TRL 1.16; the warning says nothing a user can act on."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


class StepLogCallback:
    """Appends every logged training step to ``steps.jsonl`` (and hands it to ``on_log``)."""

    def __init__(self, path: Path, on_log: Callable[[LogRow], None] | None):
        self.path = path
        self.on_log = on_log

    def __call__(self, step: int, logs: dict[str, float]) -> None:
        if "reward" not in logs:
            return
        row: LogRow = {"step": step, **{k: v for k, v in logs.items() if isinstance(v, int | float | str)}}
        append_jsonl(self.path, [row], sort_keys=True)
        if self.on_log is not None:
            self.on_log(row)


def make_callbacks(trainer: GRPOTrainer, config: GRPORunConfig, controller: AdaptiveKLController | None,
                   rollout: PdbgymRollout, val_tasks: list[Task], step_log: StepLogCallback) -> list[TrainerCallback]:
    """TrainerCallbacks: the KL leash, the step log, and the val gate run at every checkpoint."""
    from transformers import TrainerCallback  # optional: transformers (pdbgym[hf])

    class StepLog(TrainerCallback):
        # TRL's logged metrics are already reduced over processes: the main one writes them.
        def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                   logs: dict[str, float] | None = None, **kwargs: object) -> None:
            if state.is_world_process_zero:
                step_log(state.global_step, logs or {})

    class ValGate(TrainerCallback):
        def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: object) -> None:
            gates = config.out / GATES_FILE
            name = f"checkpoint-{state.global_step}"
            if any(g["checkpoint"] == name for g in read_gates(gates)):
                return

            def play(tasks: list[Task]) -> list[EpisodeFacts]:  # every process plays its share (a collective)
                rank, processes = trainer.accelerator.process_index, trainer.accelerator.num_processes
                seeds = repeat_seeds(config.seed, [t.instance_id for t in tasks])[rank::processes]
                return play_across_ranks(trainer, tasks, lambda mine: rollout.play(
                    mine, trainer, config.budget_end, config.temperature, seeds=seeds))

            share = len(range(trainer.accelerator.process_index, len(val_tasks) * config.val_runs,
                              trainer.accelerator.num_processes))  # this process's episodes of the gate
            with rollout.progress.phase("val gate", state.global_step, share):
                result = gate_on_val(play, val_tasks, config.val_runs, config.val_k, state.global_step, name)
            if state.is_world_process_zero:
                append_gate(gates, result)

    class TimeCap(TrainerCallback):
        # Two clocks of this invocation: --max-minutes ends the run (it is then chosen and registered);
        # pause_after_minutes only stops it at a checkpoint, for a later --resume (a job's wall-clock
        # limit). Every process must stop at the same step: one past a cap stops them all (a max).
        def __init__(self) -> None:
            self.started = time.monotonic()
            self.paused = False

        def _over(self) -> tuple[bool, bool]:
            """(past --max-minutes, past pause_after_minutes), one reduction over processes for both."""
            elapsed = time.monotonic() - self.started
            over = [minutes > 0 and elapsed >= 60 * minutes for minutes in (config.max_minutes, config.pause_after_minutes)]
            if trainer.accelerator.num_processes > 1:
                import torch  # optional: torch (pdbgym[hf])

                flags = torch.tensor([float(flag) for flag in over], device=trainer.accelerator.device)
                over = [bool(flag) for flag in trainer.accelerator.reduce(flags, reduction="max").tolist()]
            return over[0], over[1]

        def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                        **kwargs: object) -> None:
            if state.global_step >= state.max_steps:
                return
            capped, pause = self._over()
            if capped:
                logger.warning("GRPO stopped at step %d of %d: the %.1f-minute cap (--max-minutes) was reached",
                               state.global_step, state.max_steps, config.max_minutes)
            elif pause:
                self.paused = True
                logger.warning("GRPO paused at step %d of %d after %.1f minutes; resume to go on",
                               state.global_step, state.max_steps, config.pause_after_minutes)
            else:
                return
            control.should_training_stop = True
            control.should_save = True  # the last step is kept and gated like any checkpoint

    # a skipped step's batches and weights are kept for replay; the guard's log key must be in the row
    # before StepLog writes it
    trainer.gradient_guard = GradientGuard(on_skip=lambda step: dump_step(trainer, config.out, step))
    callbacks: list[TrainerCallback] = [guard_callback(trainer.gradient_guard), StepLog()]
    if config.max_minutes > 0 or config.pause_after_minutes > 0:
        callbacks.append(TimeCap())
    if controller is not None:
        callbacks.insert(0, AdaptiveKLCallback(trainer, controller))
    if val_tasks:
        callbacks.append(ValGate())
    return callbacks


GATES_FILE = "gates.jsonl"
STEPS_FILE = "steps.jsonl"
OUTCOMES_FILE = "outcomes.jsonl"  # one row per step: every episode's task and outcome (step_outcomes)
RANKS_DIR = "ranks"  # several processes: ranks/rank-R.jsonl, each rank's view of every step
