"""`pdbgym train ...`: corpus, sft, dagger (and grpo, from ``pdbgym.train.grpo.commands``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pdbgym.commandapp import command_app, config_command
from pdbgym.progress import progress
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.records import LogHook, LogRow
from pdbgym.train.sft.config import SFTTrainConfig

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
@config_command(DaggerConfig)
def dagger_command(config: DaggerConfig) -> None:
    """Online DAgger: student rollouts, teacher labels on every student state, SFT on the aggregate."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.train.dagger.loop import train_dagger

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
