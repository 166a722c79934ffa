"""`pdbgym adapters ...`: register, lineage, list, merge, verify, accept. Parsing and printing only."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pdbgym.commandapp import command_app

if TYPE_CHECKING:  # annotations only: each command loads the store's code when it runs
    from pdbgym.adapters.store import Lineage, Store
    from pdbgym.adapters.verify import Verification

app = command_app(no_args_is_help=True)
console = Console()
err_console = Console(stderr=True)

StoreOption = Annotated[Path | None, typer.Option("--store", help="Store folder (default: $PDBGYM_HOME/adapters, ~/.pdbgym).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of tables.")]


def _store(root: Path | None) -> Store:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.adapters.store import Store

    return Store(root)


def _emit_json(payload: object) -> None:
    print(json.dumps(payload, indent=2, sort_keys=True))


@contextmanager
def _byte_progress(description: str, enabled: bool):
    """A rich progress bar fed with byte counts; yields the callback (None when disabled)."""
    if not enabled:
        yield None
        return
    # the command's code loads when it runs: every other command starts without it
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    with Progress(TextColumn(description), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task(description, total=None)
        yield lambda n: progress.advance(task, n)


@app.command("register")
def register_command(
    path: Annotated[Path, typer.Argument(help="Adapter folder (PEFT) or model folder (a base reference).")],
    parent: Annotated[str | None, typer.Option("--parent", help="What it was trained against: name, hash or folder.")] = None,
    name: Annotated[list[str] | None, typer.Option("--name", help="Alias to refer to it by (repeatable).")] = None,
    recipe: Annotated[Path | None, typer.Option("--recipe", help="JSON with corpus_hash, seed, rank, epochs, lr, ...")] = None,
    corpus_hash: Annotated[str | None, typer.Option(help="Recipe: hash of the training corpus.")] = None,
    seed: Annotated[int | None, typer.Option(help="Recipe: random seed.")] = None,
    rank: Annotated[int | None, typer.Option(help="Recipe: LoRA rank.")] = None,
    epochs: Annotated[float | None, typer.Option(help="Recipe: epochs.")] = None,
    lr: Annotated[float | None, typer.Option(help="Recipe: learning rate.")] = None,
    effective_batch: Annotated[int | None, typer.Option(help="Recipe: effective batch size (sequences).")] = None,
    context: Annotated[int | None, typer.Option(help="Recipe: context length (tokens).")] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Store an adapter with the exact weights it was trained against, or a base model reference."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.adapters.operations import load_recipe, register_path

    recipe_data = load_recipe(recipe, {"corpus_hash": corpus_hash, "seed": seed, "rank": rank, "epochs": epochs,
                                       "lr": lr, "effective_batch": effective_batch, "context": context})
    target = _store(store)
    with _byte_progress("hashing", not as_json) as on_bytes:
        result = register_path(target, path, parent, name or [], recipe_data, on_bytes)
    lineage = target.lineage(result.record["id"])
    if as_json:
        _emit_json({"record": result.record, "notes": result.notes, "servable": lineage.servable,
                    "problems": lineage.problems})
        return
    label, kind = escape(target.label(result.record["id"])), result.record["kind"]
    console.print(f"registered {label} ({kind}) in {escape(str(target.root))}")
    for note in result.notes:
        console.print(f"  note: {escape(note)}")
    if result.evidence is not None:
        style = {"contradicted": "bold yellow", "consistent": "green"}.get(result.evidence.verdict, "cyan")
        prefix = "WARNING: " if result.evidence.verdict == "contradicted" else ""
        console.print(f"  [{style}]{prefix}parent evidence {result.evidence.verdict}[/]: "
                      f"{escape(result.evidence.message)}")
    if not lineage.servable:
        console.print("  [bold red]UNSERVABLE[/]: " + escape(" ".join(lineage.problems)))


@app.command("lineage")
def lineage_command(
    ref: Annotated[str, typer.Argument(help="Name, hash prefix or registered folder.")],
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the chain base -> ... -> REF with hashes, and whether every layer is present (exit 1 if not)."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.adapters.operations import lookup

    target = _store(store)
    lineage = target.lineage(lookup(target, ref))
    if as_json:
        _emit_json({"servable": lineage.servable, "problems": lineage.problems, "layers": [
            {"id": layer.node_id, "present": layer.record is not None, "problem": layer.problem,
             "record": layer.record} for layer in lineage.layers]})
        if not lineage.servable:
            raise typer.Exit(1)
        return
    console.print(_lineage_table(target, lineage, ref))
    if lineage.servable:
        console.print("[green]servable[/]: every layer is present.")
    else:
        console.print("[bold red]unservable[/]: " + escape(" ".join(lineage.problems)))
        raise typer.Exit(1)


def _lineage_table(target: Store, lineage: Lineage, ref: str) -> Table:
    """One row per layer, base first: label, kind (method and rank for adapters), hash, status, recipe."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.adapters.operations import describe_recipe

    table = Table(title=f"lineage of {escape(ref)}")
    for column in ("#", "layer", "kind", "hash", "status", "recipe"):
        table.add_column(column)
    for depth, layer in enumerate(lineage.layers):
        record = layer.record
        kind: str = record["kind"] if record else "?"
        if record and kind == "adapter":
            kind = f"{record['adapter']['method']} r={record['adapter']['r']}"
        status = "[green]present[/]" if layer.problem is None else "[red]MISSING[/]" if not record else "[red]broken[/]"
        table.add_row(str(depth), escape(target.label(layer.node_id)) if record else "?", kind, layer.node_id[:16],
                      status, escape(describe_recipe(record.get("recipe") if record else None)))
    return table


@app.command("list")
def list_command(store: StoreOption = None, as_json: JsonOption = False) -> None:
    """List everything in the store."""
    target = _store(store)
    nodes = target.all_nodes()
    if as_json:
        _emit_json([{**node, "servable": target.lineage(node["id"]).servable} for node in nodes])
        return
    table = Table(title=f"adapter store {escape(str(target.root))}")
    for column in ("name", "kind", "hash", "parent", "servable"):
        table.add_column(column)
    for node in nodes:
        parent = node.get("parent")
        table.add_row(escape(target.label(node["id"])), node["kind"], node["id"][:16],
                      escape(target.label(parent)) if parent and target.has(parent) else (parent or "-")[:16],
                      "yes" if target.lineage(node["id"]).servable else "[red]no[/]")
    console.print(table)


@app.command("merge")
def merge_command(
    ref: Annotated[str, typer.Argument(help="The adapter to merge: name, hash prefix or registered folder.")],
    out: Annotated[Path, typer.Option("--out", help="New folder for the merged model.")],
    onto: Annotated[Path | None, typer.Option("--onto", help="Merge REF alone onto this model folder (checked by hash).")] = None,
    verify: Annotated[bool, typer.Option("--verify/--no-verify", help="Compare logits with PEFT's stacking after.")] = True,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Merge REF's whole recorded chain (base, SFT, delta) into a model folder with a lineage manifest."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.adapters.operations import merge_ref
    from pdbgym.adapters.verify import verify_folder

    target = _store(store)
    with _byte_progress("merging", not as_json) as on_bytes:
        outcome, manifest = merge_ref(target, ref, out, onto, on_bytes)
    verification = verify_folder(out) if verify else None
    if as_json:
        _emit_json({"out": str(out), "manifest": manifest,
                    "verification": verification.__dict__ if verification else None})
    else:
        chain = " -> ".join(entry["label"] for entry in manifest["chain"])
        console.print(f"merged {escape(chain)} into {escape(str(out))}")
        console.print(f"  weights hash {outcome.output_weights_hash[:16]}; modules merged per layer "
                      f"{escape(str(outcome.modules_merged))}")
        if verification:
            _print_verification(verification)
    if verification and not verification.passed:
        raise typer.Exit(1)


def _print_verification(result: Verification) -> None:
    verdict = "[green]PASS[/]" if result.passed else "[bold red]FAIL[/]"
    console.print(f"  verify {verdict}: relative logit error {result.relative_logit_error:.2e} "
                  f"(tolerance {result.tolerance:.0e}, {result.dtype}), max |diff| {result.max_abs_logit_diff:.2e}, "
                  f"argmax agreement {result.argmax_agreement:.3f} on probe {escape(str(result.probe_shape))}")


@app.command("verify")
def verify_command(
    folder: Annotated[Path, typer.Argument(help="A folder produced by `pdbgym adapters merge`.")],
    as_json: JsonOption = False,
) -> None:
    """Rerun the merged-vs-stacked logit comparison recorded in FOLDER's manifest."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.adapters.verify import verify_folder

    result = verify_folder(folder)
    if as_json:
        _emit_json(result.__dict__)
    else:
        _print_verification(result)
    if not result.passed:
        raise typer.Exit(1)


@app.command("accept")
def accept_command(
    candidate: Annotated[Path, typer.Argument(help="Retrained adapter folder (with trainer_state.json or --metrics).")],
    targets: Annotated[Path, typer.Option("--targets", help="JSON targets, see docs/adapters.md.")],
    metrics: Annotated[Path | None, typer.Option("--metrics", help="trainer_state.json or JSONL of step/val_loss.")] = None,
    lineage: Annotated[str | None, typer.Option("--lineage", help="The unservable adapter whose lost layer this replaces.")] = None,
    store: StoreOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compare a retrained adapter with the recorded targets of a lost layer."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.adapters.accept import evaluate, load_targets, relate_to_lineage

    report = evaluate(candidate, load_targets(targets), metrics)
    if lineage is not None:
        report.notes.append(relate_to_lineage(_store(store), lineage, candidate))
    if as_json:
        _emit_json(report.as_dict())
    else:
        table = Table(title=f"acceptance of {escape(str(candidate))}")
        for column in ("check", "target", "observed", "rule", "result"):
            table.add_column(column)
        for check in report.checks:
            table.add_row(check.name, str(check.target), str(check.observed), check.rule,
                          "[green]pass[/]" if check.passed else "[red]fail[/]")
        console.print(table)
        console.print(escape(report.statement))
        for note in report.notes:
            console.print(f"  note: {escape(note)}")
    if not report.accepted:
        raise typer.Exit(1)
