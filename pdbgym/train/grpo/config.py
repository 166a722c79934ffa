"""The config of ``pdbgym train grpo``: every field but ``extra`` is a flag, declared once here with its help."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from pdbgym.defaults import documented
from pdbgym.episode_defaults import (
    EPISODE,
    GRPO_MAX_CONTEXT_TOKENS,
    GRPO_TEMPERATURE,
    EpisodeSettings,
    SettingsError,
    check_setting,
)
from pdbgym.train.records import Setting

ROLLOUT_WEIGHTS = ("merged", "merged-float32", "live")  # what GRPO's rollouts decode from (trainer.py)


@dataclass
class GRPORunConfig:
    """``pdbgym train grpo``: formulas of the recipe terms in ``schedules.py``.

    Every field is a flag of ``train grpo`` with its help text declared here (``documented``) and its
    default read from here (``pdbgym.commandapp.config_command``), except ``extra`` (further
    ``GRPOConfig`` fields; library callers only); ``use_dora``'s flag is ``--lora``, its negation.
    Episode settings default to ``pdbgym.episode_defaults``: ``max_new_tokens`` and ``budget_end`` (the
    turn budget the curriculum ends at, and val gates play) to ``EPISODE``'s; ``temperature`` and
    ``max_context_tokens`` to the named GRPO exceptions there (``GRPO_TEMPERATURE``,
    ``GRPO_MAX_CONTEXT_TOKENS``, with their reasons). Each episode's draw is seeded by
    ``pdbgym.seeds.grpo_episode_seed`` from ``seed``.
    """

    policy: str = documented(help="SFT adapter (store name/hash), a model folder, or 'embedded'")
    tasks: str = documented(help="training tasks: suite, task id or folder")
    out: Path = documented(help="run folder (checkpoints, steps.jsonl, gates.jsonl, adapter/)")
    group: int = documented(8, "G: episodes per task per step, generated together (TRL num_generations)")
    tasks_per_step: int = documented(1, "groups per optimizer step")
    steps: int = documented(100, "optimizer steps")
    seed: int = documented(42, "seed of training and of every episode's draw (pdbgym.seeds)")
    lr: float = documented(1e-5, "learning rate of the delta")
    rank: int = documented(16, "DoRA rank of the trainable delta")
    alpha: int = documented(32, "LoRA/DoRA alpha of the delta (its scale is alpha / rank)")
    use_dora: bool = documented(True, "plain LoRA delta instead of DoRA", flag="--lora", negates=True)
    temperature: float = documented(GRPO_TEMPERATURE, "sampling temperature of the episodes")
    max_new_tokens: int = documented(EPISODE.max_new_tokens, "tokens per model turn")
    max_context_tokens: int = documented(GRPO_MAX_CONTEXT_TOKENS, "tokens per episode (prompt + response)",
                                         old_flags=("--context-tokens",))
    command_timeout_s: float = documented(10.0, "seconds before a pdb command is interrupted")
    kl_mode: str = documented("adaptive", "adaptive: beta <- beta(1 + clip(KL/target-1, +-0.2) / horizon steps); "
                                          "fixed")
    beta: float = documented(0.04, "initial (or fixed) KL coefficient, k3 KL to the SFT model")
    target_kl: float = documented(0.05, "adaptive leash target, nats/token")
    kl_horizon_steps: int = documented(10, "adaptive leash horizon, optimizer steps (beta moves <= 0.2/this a step)")
    curriculum: str = documented("schedule", "turn budget: schedule | solve_rate | fixed")
    budget_start: int = documented(10, "the turn budget the curriculum starts at")
    budget_end: int = documented(EPISODE.turn_budget, "the turn budget the curriculum ends at (and val gates play)")
    budget_ramp_steps: int = documented(100, "schedule: start + floor((end-start) min(1, step/ramp))")
    budget_threshold: float = documented(0.5, "solve_rate: grow after a step solving >= this")
    budget_increment: int = documented(2, "solve_rate: tool calls the budget grows by (up to --budget-end)")
    anchor_data: Path | None = documented(None, "SFT corpus for the behaviour-cloning anchor")
    anchor_weight: float = documented(0.1, "w0 of loss = rl + w(step) nll; w = w0 max(0, 1-step/decay)")
    anchor_decay_steps: int = documented(0, "decay of the anchor weight, optimizer steps (0: constant)")
    anchor_batch: int = documented(1, "anchor examples per optimizer step")
    anchor_max_tokens: int = documented(4096, "anchor examples cut to this many ids")
    replay_data: Path | None = documented(None, "SFT corpus whose solved examples seed early groups")
    replay_fraction: float = documented(0.25, "f0; replayed = min(G-1, floor(f(step) G + 0.5))")
    replay_decay_steps: int = documented(20, "decay of the replay fraction: f = f0 max(0, 1-step/decay)")
    format_weight: float = documented(0.0, "weight of the valid-tool-call term (<= 0.2)")
    loss_type: str = documented("dapo", "TRL loss_type (dapo, grpo, dr_grpo, bnpo, ...)")
    importance_sampling_level: str = documented("token", "TRL: token | sequence")
    num_iterations: int = documented(1, "TRL: optimizer passes per generated batch (more than 1 reuses stale samples)")
    epsilon: float = documented(0.2, "TRL: clip range of the importance ratio")
    save_steps: int = documented(10, "a checkpoint every N optimizer steps, each gated on --val-tasks")
    rollout_weights: str = documented(
        "merged", "merged: rollouts decode from a plain copy of the policy with the delta merged in, refreshed every "
        "step (faster); merged-float32: that copy kept in float32 (a bf16 policy sampled as float32 arithmetic "
        "gives; twice the memory); live: from the PEFT model")
    update_tokens: int = documented(
        65536, "padded ids one forward of the update holds at most: the step's sequences are grouped by length and "
        "each group's padding cut (0: TRL's one padded batch)")
    update_micro_batches: int = documented(
        1, "forward-and-backward passes the step's rows are split into, their gradients accumulated into one "
        "optimizer step (TRL's steps_per_generation and gradient_accumulation_steps): the same loss, a "
        "micro-batch's activations held at a time; with --no-gradient-checkpointing the update skips the "
        "recompute where one micro-batch fits the card", min=1)
    trace_step: int = documented(
        0, "profile this optimizer step with torch.profiler (0: none): OUT/trace/step-N.json.gz (a Chrome trace) "
        "and step-N.txt (wall, device-busy seconds, top operators); the traced step runs slower", min=0)
    gradient_checkpointing: bool = documented(
        True, "recompute each layer's activations in the backward (TRL's default; off is faster where the "
        "step's activations fit the card: a DoRA delta's held over 1 MB an id at SmolLM2-135M's shape)")
    cudnn_attention: bool = documented(
        False, "let attention take cuDNN's kernels on a GPU (torch's default elsewhere). cuDNN builds a graph on the "
        "host for each new shape, and a step's shapes change every step: off, a random-weight step on an H100 ran "
        "1.41x faster (docs/benchmarks.md)")
    compile_decode: bool = documented(
        False, "on a GPU, have inductor fuse the model's decoder layers in the rollouts' decode step before the step "
        "is recorded as a CUDA graph (one compile of the layers' code a process, 12.8 s for one SmolLM2-135M shape on "
        "an H100): a small model's step is bound by its kernel launches, which the fusion cuts (3.32 against 5.60 ms "
        "a decode step there, docs/benchmarks.md), and its prefill passes through the same compile (each pass's "
        "1,500 operator calls, 60 ms of host time a pass in a real step); a GRPO step with the decode step alone "
        "compiled was not faster (11.66 against 10.34 s, one H100); with the prefill passes, not timed yet")
    fused_dora: bool = documented(
        True, "compute a DoRA delta's layers in the update as one fused function each, compiled by inductor on a "
        "GPU (pdbgym.train.dora; the same function as PEFT's): PEFT's float32 passes over every layer's output were "
        "most of a small model's update (docs/benchmarks.md); off: PEFT's own forward")
    max_minutes: float = documented(
        0.0, "stop training after this many minutes (this invocation; 0: no cap): a last checkpoint is saved and "
        "gated", min=0)
    pause_after_minutes: float = documented(
        0.0, "a job's time limit (0: none): stop at a saved, gated checkpoint after this many minutes of this "
        "invocation, nothing chosen or registered; --resume goes on", min=0)
    val_tasks: str | None = documented(None, "val split tasks: every checkpoint is gated on them")
    val_runs: int = documented(4, "episodes per val task at each gate")
    val_k: int = documented(3, "k of each gate's pass@k")
    store: Path | None = documented(None, "adapter store (default $PDBGYM_HOME/adapters)")
    ledger: Path | None = documented(None, "selection ledger (default $PDBGYM_HOME's)")
    name: str | None = documented(None, "store name of the result (default grpo-<out name>)")
    device: str = documented("auto", "auto (this process's GPU when torch sees one, else cpu), cpu, cuda, cuda:N")
    resume: bool = documented(False, "continue from the last checkpoint in --out", flag="--resume")
    tensorboard: bool = documented(False, "also log every step to TensorBoard (event files in OUT/tensorboard)")
    register_without_signal: bool = documented(False, "register the delta even if no step had reward spread")
    extra: dict[str, object] = documented(help="further GRPOConfig fields, as given (library callers only)", factory=dict,
                                       cli=False)

    def __post_init__(self) -> None:
        # The episode settings by EpisodeSettings' rules: the curriculum's ends as turn budgets, the rest as
        # an episode at the curriculum's end (where val gates play) checks them.
        check_setting("budget_start", self.budget_start, rule="turn_budget")
        check_setting("budget_end", self.budget_end, rule="turn_budget")
        check_setting("val_runs", self.val_runs, rule="runs")
        if isinstance(self.update_tokens, bool) or not isinstance(self.update_tokens, int) or self.update_tokens < 0:
            raise SettingsError(f"update_tokens must be a whole number of ids >= 0 (0: one padded batch), got "
                                f"{self.update_tokens!r}")
        if isinstance(self.update_micro_batches, bool) or not isinstance(self.update_micro_batches, int) \
                or self.update_micro_batches < 1:
            raise SettingsError(f"update_micro_batches must be a whole number >= 1 (1: the step's rows in one "
                                f"forward and backward), got {self.update_micro_batches!r}")
        if self.trace_step > self.steps:
            raise SettingsError(f"trace_step {self.trace_step} is past the run's {self.steps} steps, so nothing would be "
                                f"traced: pass a step from 1 to {self.steps} (0: no trace)")
        EpisodeSettings(max_context_tokens=self.max_context_tokens, turn_budget=self.budget_end,
                        temperature=self.temperature, max_new_tokens=self.max_new_tokens)

    def recipe(self) -> dict[str, Setting]:
        skip = {"out", "store", "ledger", "extra", "resume", "device", "name", "register_without_signal",
                "rollout_weights", "update_tokens", "update_micro_batches", "trace_step", "gradient_checkpointing",
                "cudnn_attention", "compile_decode", "fused_dora", "pause_after_minutes", "max_minutes"}  # how a run stops is no setting of its result
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items() if k not in skip}
