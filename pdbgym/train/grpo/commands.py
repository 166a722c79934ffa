"""`pdbgym train grpo` and `pdbgym train report`: command functions mounted by ``pdbgym.train.commands``.

``grpo``'s flags are ``GRPORunConfig``'s fields, their defaults read from it (``defaults_of``). It shows
every phase as progress (``grpo.progress``), keeps each episode's transcript under ``OUT/episodes/`` and
writes the training report (``grpo.report``) when the run ends, also when it fails.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from pdbgym.defaults import defaults_of, pick
from pdbgym.train.grpo.config import GRPORunConfig

console = Console(stderr=True)
R = defaults_of(GRPORunConfig)  # every flag's default is the config field's (the episode ones: episode_defaults)


def grpo(
    policy: Annotated[str, typer.Option(help="SFT adapter (store name/hash), a model folder, or 'embedded'")],
    tasks: Annotated[str, typer.Option(help="training tasks: suite, task id or folder")],
    out: Annotated[Path, typer.Option(help="run folder (checkpoints, steps.jsonl, gates.jsonl, adapter/)")],
    group: Annotated[int, typer.Option(help="G: episodes per task per step, generated together")] = R.group,
    tasks_per_step: Annotated[int, typer.Option(help="groups per optimizer step")] = R.tasks_per_step,
    steps: Annotated[int, typer.Option(help="optimizer steps")] = R.steps,
    seed: Annotated[int, typer.Option(help="seed of training and of every episode's draw (pdbgym.seeds)")] = R.seed,
    lr: Annotated[float, typer.Option(help="learning rate of the delta")] = R.lr,
    rank: Annotated[int, typer.Option(help="DoRA rank of the trainable delta")] = R.rank,
    alpha: int = R.alpha,
    lora: Annotated[bool, typer.Option("--lora", help="plain LoRA delta instead of DoRA")] = not R.use_dora,
    temperature: Annotated[float, typer.Option(help="sampling temperature of the episodes")] = R.temperature,
    max_new_tokens: Annotated[int, typer.Option(help="tokens per model turn")] = R.max_new_tokens,
    max_context_tokens: Annotated[int, typer.Option(help="tokens per episode (prompt + response)")] = R.max_context_tokens,
    command_timeout_s: Annotated[float, typer.Option(help="seconds before a pdb command is interrupted")] = R.command_timeout_s,
    kl_mode: Annotated[str, typer.Option(help="adaptive: beta <- beta(1 + clip(KL/target-1, +-0.2) / horizon steps); fixed")] = R.kl_mode,
    beta: Annotated[float, typer.Option(help="initial (or fixed) KL coefficient, k3 KL to the SFT model")] = R.beta,
    target_kl: Annotated[float, typer.Option(help="adaptive leash target, nats/token")] = R.target_kl,
    kl_horizon_steps: Annotated[int, typer.Option(help="adaptive leash horizon, optimizer steps (beta moves <= 0.2/this a step)")] = R.kl_horizon_steps,
    curriculum: Annotated[str, typer.Option(help="turn budget: schedule | solve_rate | fixed")] = R.curriculum,
    budget_start: int = R.budget_start,
    budget_end: Annotated[int, typer.Option(help="the turn budget the curriculum ends at (and val gates play)")] = R.budget_end,
    budget_ramp_steps: Annotated[int, typer.Option(help="schedule: start + floor((end-start) min(1, step/ramp))")] = R.budget_ramp_steps,
    budget_threshold: Annotated[float, typer.Option(help="solve_rate: grow after a step solving >= this")] = R.budget_threshold,
    budget_increment: int = R.budget_increment,
    anchor_data: Annotated[Path | None, typer.Option(help="SFT corpus for the behaviour-cloning anchor")] = R.anchor_data,
    anchor_weight: Annotated[float, typer.Option(help="w0 of loss = rl + w(step) nll; w = w0 max(0, 1-step/decay)")] = R.anchor_weight,
    anchor_decay_steps: Annotated[int, typer.Option(help="0: constant anchor weight")] = R.anchor_decay_steps,
    anchor_batch: Annotated[int, typer.Option(help="anchor examples per optimizer step")] = R.anchor_batch,
    anchor_max_tokens: Annotated[int, typer.Option(help="anchor examples cut to this many ids")] = R.anchor_max_tokens,
    replay_data: Annotated[Path | None, typer.Option(help="SFT corpus whose solved examples seed early groups")] = R.replay_data,
    replay_fraction: Annotated[float, typer.Option(help="f0; replayed = min(G-1, floor(f(step) G + 0.5))")] = R.replay_fraction,
    replay_decay_steps: int = R.replay_decay_steps,
    format_weight: Annotated[float, typer.Option(help="weight of the valid-tool-call term (<= 0.2)")] = R.format_weight,
    loss_type: Annotated[str, typer.Option(help="TRL loss_type (dapo, grpo, dr_grpo, bnpo, ...)")] = R.loss_type,
    importance_sampling_level: Annotated[str, typer.Option(help="TRL: token | sequence")] = R.importance_sampling_level,
    num_iterations: Annotated[int, typer.Option(help="TRL: optimizer passes per generated batch")] = R.num_iterations,
    epsilon: float = R.epsilon,
    save_steps: int = R.save_steps,
    update_tokens: Annotated[int, typer.Option(help="padded ids one forward of the update holds at most: the step's sequences are grouped by length and each group's padding cut (0: TRL's one padded batch)")] = R.update_tokens,
    rollout_weights: Annotated[str, typer.Option(help="merged: rollouts decode from a plain copy of the policy with the delta merged in, refreshed every step (faster); merged-float32: that copy kept in float32 (a bf16 policy sampled as float32 arithmetic gives; twice the memory); live: from the PEFT model")] = R.rollout_weights,
    max_minutes: Annotated[float, typer.Option(min=0, help="stop training after this many minutes (this invocation; 0: no cap): a last checkpoint is saved and gated")] = R.max_minutes,
    pause_after_minutes: Annotated[float, typer.Option(min=0, help="a job's time limit (0: none): stop at a saved, gated checkpoint after this many minutes of this invocation, nothing chosen or registered; --resume goes on")] = R.pause_after_minutes,
    val_tasks: Annotated[str | None, typer.Option(help="val split tasks: every checkpoint is gated on them")] = R.val_tasks,
    val_runs: int = R.val_runs,
    val_k: int = R.val_k,
    store: Annotated[Path | None, typer.Option(help="adapter store (default $PDBGYM_HOME/adapters)")] = R.store,
    ledger: Annotated[Path | None, typer.Option(help="selection ledger (default $PDBGYM_HOME's)")] = R.ledger,
    name: Annotated[str | None, typer.Option(help="store name of the result (default grpo-<out name>)")] = R.name,
    device: str = R.device,
    resume: Annotated[bool, typer.Option("--resume", help="continue from the last checkpoint in --out")] = R.resume,
    tensorboard: bool = R.tensorboard,
    register_without_signal: Annotated[bool, typer.Option(help="register the delta even if no step had reward spread")] = R.register_without_signal,
    keep_episodes: Annotated[bool, typer.Option(help="write every episode's transcript under OUT/episodes/")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="print the run record as JSON")] = False,
    context_tokens: Annotated[int | None, typer.Option("--context-tokens", hidden=True)] = None,
) -> None:
    """GRPO over a frozen SFT adapter with a fresh DoRA delta, on pdbgym episodes (see docs/training.md)."""
    config = GRPORunConfig(
        policy=policy, tasks=tasks, out=out, group=group, tasks_per_step=tasks_per_step, steps=steps, seed=seed,
        lr=lr, rank=rank, alpha=alpha, use_dora=not lora, temperature=temperature, max_new_tokens=max_new_tokens,
        max_context_tokens=pick(max_context_tokens, context_tokens), command_timeout_s=command_timeout_s,
        kl_mode=kl_mode, beta=beta, target_kl=target_kl, kl_horizon_steps=kl_horizon_steps,
        curriculum=curriculum, budget_start=budget_start, budget_end=budget_end,
        budget_ramp_steps=budget_ramp_steps, budget_threshold=budget_threshold, budget_increment=budget_increment,
        anchor_data=anchor_data, anchor_weight=anchor_weight, anchor_decay_steps=anchor_decay_steps,
        anchor_batch=anchor_batch, anchor_max_tokens=anchor_max_tokens,
        replay_data=replay_data, replay_fraction=replay_fraction, replay_decay_steps=replay_decay_steps,
        format_weight=format_weight, loss_type=loss_type, importance_sampling_level=importance_sampling_level,
        num_iterations=num_iterations, epsilon=epsilon, save_steps=save_steps, rollout_weights=rollout_weights, update_tokens=update_tokens, max_minutes=max_minutes, pause_after_minutes=pause_after_minutes, val_tasks=val_tasks,
        val_runs=val_runs, val_k=val_k, store=store, ledger=ledger, name=name, device=device, resume=resume,
        tensorboard=tensorboard, register_without_signal=register_without_signal)

    if kl_mode == "adaptive" and _main_process():
        # the command's code loads when it runs: every other command starts without it
        from pdbgym.train.grpo.schedules import AdaptiveKLController

        leash = AdaptiveKLController(beta, target_kl, kl_horizon_steps)  # bad settings: refused before any work
        console.print(f"adaptive KL leash: beta {beta:g} toward KL {target_kl:g} nats/token, moving at most "
                      f"{leash.max_step_change:.1%} a step (--kl-horizon-steps {kl_horizon_steps})")

    def show(row: dict) -> None:
        console.print(f"step {row['step']}: reward {row.get('reward', 0):.3f}  kl {row.get('kl', 0):.4f}  "
                      f"beta {row.get('beta', 0):.4f}  turn budget {int(row.get('turn_budget', 0))}")

    record = _train_with_progress(config, show, keep_episodes)
    if not _main_process():
        return  # every process returns the same record: one prints it
    if record.get("warning"):
        console.print(f"[yellow]warning[/]: {record['warning']}")
    if json_out:
        typer.echo(json.dumps(record, indent=2, sort_keys=True))
    elif record.get("paused"):
        console.print(f"[bold yellow]paused[/]: step {record['steps']} of {record['max_steps']} saved and gated "
                      "(--pause-after-minutes); run again with --resume to go on")
    elif record["store_id"] is None:
        console.print(f"[bold yellow]done[/]: {record['steps']} steps; chosen {record['chosen']}; adapter "
                      f"{record['adapter']} (not registered)")
    else:
        console.print(f"[bold green]done[/]: {record['steps']} steps; chosen {record['chosen']}; adapter "
                      f"{record['adapter']} registered as {record['name']} ({str(record['store_id'])[:12]}) over "
                      f"{record['parent_id'][:12]}")


def _main_process() -> bool:
    """True unless this is a non-zero rank of a multi-process launch (only rank 0 shows and reports)."""
    return int(os.environ.get("RANK", "0")) == 0


def _train_with_progress(config: GRPORunConfig, show: Callable[[dict[str, Any]], None],
                         keep_episodes: bool) -> dict[str, Any]:
    """``train_grpo`` with its phases shown; the report is written at the end, also after a failure."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.progress import progress
    from pdbgym.train.grpo.progress import EPISODES_DIR, GRPOProgress
    from pdbgym.train.grpo.run import train_grpo

    main = _main_process()
    out = Path(config.out)
    with progress(console, disable=not main) as bars:
        hooks = GRPOProgress(bars, out / EPISODES_DIR if keep_episodes and main else None)
        try:
            record = train_grpo(config, on_log=show, progress=hooks)
        except BaseException:
            _report(out, quiet_failure=True)
            raise
    _report(out)
    return record


def _report(out: Path, quiet_failure: bool = False) -> None:
    """Write the run's report; after a failed run, a report that cannot be written must not hide the cause."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.grpo.report import write_grpo_report

    if not _main_process() or (quiet_failure and not (out / "steps.jsonl").is_file()):
        return  # a run refused before its first step has nothing to report
    try:
        page = write_grpo_report(out)
    except Exception as exc:
        if not quiet_failure:
            raise
        console.print(f"[yellow]no training report[/]: {exc}")
        return
    console.print(f"report: {page}")


def report(
    run_dir: Annotated[Path, typer.Argument(help="the --out folder of a pdbgym train grpo run (finished or not)")],
    ledger: Annotated[Path | None, typer.Option(help="selection ledger the run wrote to (default $PDBGYM_HOME's)")] = None,
) -> None:
    """(Re)write a GRPO run's training report (HTML, Markdown, JSON, plots) from its folder alone."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.grpo.report import write_grpo_report

    typer.echo(str(write_grpo_report(run_dir, ledger)))
