"""`pdbgym train ...`: corpus, sft, dagger (and grpo, from ``pdbgym.train.grpo.commands``)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pdbgym.commandapp import command_app, config_command
from pdbgym.defaults import defaults_of, pick
from pdbgym.fileio import JSONValue
from pdbgym.progress import progress
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.records import LogHook, LogRow
from pdbgym.train.sft.config import SFTTrainConfig

G = defaults_of(DaggerConfig)

app = command_app(no_args_is_help=True, help="Train students: SFT corpora and adapters, online DAgger, GRPO.")
console = Console(stderr=True)


@app.command("corpus")
def corpus_command(
    out: Annotated[Path, typer.Option(help="Corpus folder to write (examples.jsonl + corpus.json)")],
    cache: Annotated[list[Path] | None, typer.Option(help="Rollout cache folder; repeat for several")] = None,
    jsonl: Annotated[list[Path] | None, typer.Option(help="Chat / SWE-bench-style trajectory JSONL; repeat")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="Tokenizer for --jsonl: 'embedded' or a folder")] = None,
    solved_only: Annotated[bool, typer.Option(help="Keep only episodes whose final tests passed")] = False,
    dedupe: Annotated[bool, typer.Option(help="Drop examples whose ids and mask repeat an earlier one")] = True,
    max_length: Annotated[int | None, typer.Option(help="Most ids per example (prompt included)")] = None,
    overlength: Annotated[str, typer.Option(help="Longer examples: drop, or truncate (keep the start)")] = "drop",
    splits: Annotated[Path | None, typer.Option(help="Split file: refuse any val/test task")] = None,
    keep_tampered: Annotated[bool, typer.Option(help="Keep episodes graded tampered (never wise)")] = False,
) -> None:
    """Token-exact SFT examples from rollout records (loss on loss_mask == 1 ids only)."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.corpus.build import CorpusConfig, build_corpus

    manifest = build_corpus(CorpusConfig(caches=list(cache or []), jsonl=list(jsonl or []), tokenizer=tokenizer,
                                         out=out, solved_only=solved_only, dedupe=dedupe, max_length=max_length,
                                         overlength=overlength, splits=splits, keep_tampered=keep_tampered))
    shown = {k: manifest[k] for k in ("records_read", "examples_kept", "dropped", "truncated", "tokens", "loss_tokens",
                                      "tokenizer", "content_hash")}
    typer.echo(json.dumps(shown, indent=1))


@app.command("sft")
@config_command(SFTTrainConfig)
def sft_command(config: SFTTrainConfig) -> None:
    """Train a LoRA/DoRA adapter with TRL's SFTTrainer; defaults are the seed recipe."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.sft.trainer import train_sft

    with _step_progress() as on_log:
        result = train_sft(config, on_log=on_log)
    typer.echo(json.dumps({"adapter": str(result.adapter_dir), "store_id": result.node_id, "name": result.name,
                           "parent": result.parent_id, "best_val_loss": result.best_val_loss,
                           "best_step": result.best_step, "steps": result.steps, "tensor_count": result.tensor_count,
                           "report": str(result.report) if result.report else None}, indent=1))


@app.command("dagger")
def dagger_command(
    student: Annotated[str, typer.Option(help="'embedded', a model folder, or an adapter-store reference")],
    teacher: Annotated[str, typer.Option(help="A model ('embedded', folder, store ref) or an SGLang URL")],
    tasks: Annotated[str, typer.Option(help="Training tasks: suite, task id or folder")],
    out: Annotated[Path, typer.Option(help="Run folder: iter0/, iter1/, ..., iterations.json, report")],
    iterations: Annotated[int, typer.Option(help="DAgger iterations")] = G.iterations,
    runs: Annotated[int, typer.Option(help="Student episodes per training task per iteration")] = G.runs,
    val_tasks: Annotated[str | None, typer.Option(help="Tasks for pass@1 of each iterate (held out)")] = G.val_tasks,
    splits: Annotated[Path | None, typer.Option(help="Split file: refuse val/test tasks in --tasks")] = G.splits,
    teacher_cache: Annotated[Path | None, typer.Option(help="Teacher cache for KL(teacher||student)")] = G.teacher_cache,
    eval_runs: Annotated[int, typer.Option(help="Episodes per val task per iterate")] = G.eval_runs,
    turn_budget: Annotated[int, typer.Option(help="Tool calls per episode before 'budget'")] = G.turn_budget,
    max_new_tokens: Annotated[int, typer.Option(help="Token cap of one turn (student and teacher)")] = G.max_new_tokens,
    max_context_tokens: Annotated[int, typer.Option(help="Trajectory cap in tokens")] = G.max_context_tokens,
    temperature: Annotated[float, typer.Option(help="Student sampling temperature")] = G.temperature,
    teacher_temperature: Annotated[float, typer.Option(help="Teacher sampling temperature (0: greedy)")] = G.teacher_temperature,
    tokenizer: Annotated[str, typer.Option(help="Tokenizer of a URL teacher: 'embedded' or a folder")] = G.tokenizer,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda")] = G.device,
    seed: Annotated[int, typer.Option(help="Seed of sampling and training")] = G.seed,
    name_prefix: Annotated[str | None, typer.Option(help="Store names PREFIX-iterN (default: out folder name)")] = G.name_prefix,
    sft: Annotated[str, typer.Option(help="JSON of SFT fields for every iteration, e.g. '{\"max_steps\": 20}'")] = "{}",
    store: Annotated[Path | None, typer.Option(help="Adapter store root")] = G.store,
    budget: Annotated[int | None, typer.Option("--budget", hidden=True)] = None,
    context_tokens: Annotated[int | None, typer.Option("--context-tokens", hidden=True)] = None,
) -> None:
    """Online DAgger: student rollouts, teacher labels on every student state, SFT on the aggregate."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.dagger.loop import train_dagger

    try:
        sft_fields: dict[str, JSONValue] = json.loads(sft)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--sft must be a JSON object ({exc})") from exc
    config = DaggerConfig(student=student, teacher=teacher, tasks=tasks, out=out, iterations=iterations, runs=runs,
                          val_tasks=val_tasks, splits=splits, teacher_cache=teacher_cache, eval_runs=eval_runs,
                          episode=replace(G.episode, turn_budget=pick(turn_budget, budget),
                                          max_new_tokens=max_new_tokens, temperature=temperature,
                                          max_context_tokens=pick(max_context_tokens, context_tokens)),
                          teacher_temperature=teacher_temperature, tokenizer=tokenizer,
                          device=device, seed=seed, name_prefix=name_prefix, sft=sft_fields, store=store)
    with console.status("DAgger") as status:
        result = train_dagger(config, on_event=lambda text: (status.update(text), console.log(text)))
    typer.echo(json.dumps({"iterations": [row.__dict__ for row in result.rows],
                           "report": str(result.report) if result.report else None}, indent=1))


class _step_progress:
    """Progress over optimizer steps (``pdbgym.progress``), fed by the trainer's log rows; yields the ``on_log`` hook."""

    def __enter__(self) -> LogHook:
        self.shown = progress(Console(stderr=True))  # a line at least every 30 s when piped
        self.progress = self.shown.__enter__()
        self.bar = self.progress.add_task("training", total=None)

        def on_log(row: LogRow, max_steps: int) -> None:
            losses = ", ".join(f"{k} {row[k]:.4f}" for k in ("loss", "eval_loss") if k in row)
            self.progress.update(self.bar, completed=row["step"], total=max_steps,
                                 description=f"step {row['step']}" + (f": {losses}" if losses else ""))

        return on_log

    def __exit__(self, *exc: object) -> None:
        self.shown.__exit__(*exc)


def _mount_grpo() -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.grpo.commands import grpo, report

    app.command("grpo", help="GRPO of a DoRA delta over a frozen SFT adapter (seed recipe).")(grpo)
    app.command("report", help="(Re)write a GRPO run's training report from its folder.")(report)


_mount_grpo()
