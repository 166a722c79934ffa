"""The GRPO training report (``OUT/training_report.{html,md,json}`` + plots), from the run folder alone.

``write_grpo_report(out_dir)`` reads only what ``pdbgym train grpo`` wrote into its ``--out`` folder:
``steps.jsonl`` (one row per optimizer step), ``gates.jsonl`` (val pass@1 / pass@k of each checkpoint),
``grpo_run.json`` (written when the run finishes: recipe, parent, chosen checkpoint, store id),
``checkpoints/checkpoint-N/``, ``final/``, ``adapter/`` and ``episodes/`` (transcripts, when kept), plus
the selection ledger for the recorded choice. So it works on a finished run, a resumed one, and one
killed or still running (it says which). ``pdbgym train report RUN_DIR`` runs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict, cast

from pdbgym.errors import PdbgymError
from pdbgym.evaluate.selection import SelectionLedger
from pdbgym.fileio import read_jsonl
from pdbgym.reportkit import Cell, Link, pct_interval
from pdbgym.termination import transcript_grading, verdict_refused
from pdbgym.train.gradguard import skipped_steps
from pdbgym.train.grpo.records import GateRow, GRPORunRecord, StepOutcomes
from pdbgym.train.grpo.spread import spread_steps, step_spread
from pdbgym.train.records import LogRow, Setting
from pdbgym.train.report import Panel, write_training_report

STEPS_FILE, GATES_FILE, RUN_FILE = "steps.jsonl", "gates.jsonl", "grpo_run.json"
OUTCOMES_FILE = "outcomes.jsonl"  # the trainer's (trainer.OUTCOMES_FILE), read here without importing it
EPISODES_DIR = "episodes"
REWARD_TERMS = ("outcome", "format", "tampered")

MEANINGS = {
    "reward": "Mean total reward of the step's episodes (TRL's weighted sum of the terms) and each term's mean: "
              "outcome = 1 if the final tests passed, 0 if not, -1 if tampered (weight 1); format = share of "
              "turns holding a well-formed tool call (weight --format-weight); tampered = 1 per tampered episode "
              "(weight 0: counted, never rewarded). Replayed corpus trajectories count as solved.",
    "solve_rate": "Share of the step's on-policy episodes whose final tests passed (replayed trajectories left "
                  "out). Squares: val pass@1 of each checkpoint with its 95% CI over val tasks.",
    "kl": "TRL's k3 estimate of KL(policy || SFT model) per model token, nats. Dashed: the adaptive leash's target.",
    "beta": "The KL coefficient in the loss; the adaptive leash moves it by beta (1 + clip(KL/target - 1, "
            "+-0.2) n / horizon) after every step.",
    "turn_budget": "Tool calls an episode may make this step (the turn-budget curriculum).",
    "loss": "loss: what the optimizer stepped on (RL loss + bc/weight x bc/nll, as the trainer logged it); "
            "rl_loss: loss - bc/weight x bc/nll, TRL's GRPO loss (clipped surrogate + beta x KL); bc/nll: the "
            "behaviour-cloning anchor's mean NLL per assistant token of an SFT-corpus batch (nats; only with "
            "--anchor-data).",
    "bc_weight": "Weight of the behaviour-cloning anchor in the loss: w0 max(0, 1 - step / decay_steps).",
    "episodes": "On-policy episodes of the step graded tampered (they get the lowest reward, -1), verdict-refused "
                "ones (the grading run ended abnormally: killed, an exit status disagreeing with its end record, no "
                "pytest closing line, a result channel no longer the original pipe; not tampered, as a crash can "
                "be honest, but nothing passed) and solved SFT-corpus trajectories replayed into the groups (the "
                "replay seed).",
    "spread": "Groups with spread (Steps table): groups whose on-policy episodes' outcome rewards differed (the "
              "policy's own signal), and groups whose only spread came from a replayed trajectory scoring apart from "
              "the played episodes (TRL's frac_reward_zero_std counts both).",
}


class LedgerChoice(TypedDict):
    """The selection ledger's latest choice among a run's candidates, as the report shows it."""

    checkpoint: str
    split: str
    task_set: str
    time: float
    candidates: int
    path: str


def _with_counts(rows: list[LogRow]) -> list[LogRow]:
    """Rows sorted by step, with per-step tampered/refused/replayed counts derived from the running totals when a run
    logged only the totals, and ``rl_loss`` = loss - bc/weight x bc/nll (the loss without the anchor)."""
    out: list[LogRow] = []
    for row in sorted(rows, key=lambda r: r["step"]):
        row, previous = dict(row), out[-1] if out and out[-1]["step"] == row["step"] - 1 else None
        for count, total in (("episodes/tampered", "episodes/tampered_total"),
                             ("episodes/refused", "episodes/refused_total"),
                             ("episodes/replayed", "episodes/replayed_total")):
            before = previous.get(total) if previous is not None else (0.0 if row["step"] == 1 else None)
            if count not in row and total in row and before is not None:
                row[count] = row[total] - before
        if isinstance(row.get("loss"), int | float):
            row["rl_loss"] = row["loss"] - row.get("bc/weight", 0.0) * row.get("bc/nll", 0.0)
        out.append(row)
    return out


def _checkpoints(out: Path) -> dict[int, Path]:
    """Step -> checkpoint folder, complete ones only (TRL writes trainer_state.json last)."""
    folder = out / "checkpoints"
    found = {}
    for path in folder.glob("checkpoint-*") if folder.is_dir() else []:
        tail = path.name.rsplit("-", 1)[1]
        if tail.isdigit() and (path / "trainer_state.json").is_file():
            found[int(tail)] = path
    return dict(sorted(found.items()))


def _weights_of(step: int, checkpoints: dict[int, Path], out: Path, finished: bool) -> Link | None:
    """The saved weights that include ``step``'s update: the first checkpoint at or after it, else final/."""
    later = [n for n in checkpoints if n >= step]
    if later:
        return Link(f"checkpoint-{later[0]}", f"checkpoints/checkpoint-{later[0]}")
    return Link("final", "final") if finished and (out / "final").is_dir() else None


def _transcripts(out: Path, folder: str) -> list[Link]:
    """One link per saved transcript of a phase: ✓ solved, ✗ not, ! tampered, ? verdict refused."""
    links = []
    for path in sorted((out / EPISODES_DIR / folder).glob("*.json")):
        try:
            transcript = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        reason = transcript.get("termination_reason")
        mark = "!" if reason == "tampered" else "?" if verdict_refused(transcript_grading(transcript), reason) else \
            ("✓" if transcript.get("final_test_passed") else "✗")
        links.append(Link(mark, f"{EPISODES_DIR}/{folder}/{path.name}"))
    return links


def _ledger_choice(ledger: Path | None, name: str, chosen: str, gates: list[GateRow]) -> LedgerChoice | None:
    """The latest ledger selection among exactly this run's candidates (``name``, ``name@checkpoint-N``)."""
    expected = {name} | {f"{name}@{g['checkpoint']}" for g in gates if g["checkpoint"] != chosen}
    found = [s for s in SelectionLedger(ledger).entries() if set(s.candidates) == expected]
    if not found:
        return None
    latest = max(found, key=lambda s: s.time)
    picked = chosen if latest.chosen == name else latest.chosen.split("@", 1)[-1]
    return {"checkpoint": picked, "split": latest.split, "task_set": latest.task_set, "time": latest.time,
            "candidates": len(latest.candidates), "path": str(SelectionLedger(ledger).path)}


def _gate_rows(out: Path, gates: list[GateRow], checkpoints: dict[int, Path], name: str, chosen: str | None,
               ledger: LedgerChoice | None) -> list[dict[str, Cell]]:
    rows: list[dict[str, Cell]] = []
    for gate in sorted(gates, key=lambda g: g["step"]):
        folder = out / "checkpoints" / gate["checkpoint"]
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(gate.get("termination_reasons", {}).items()))
        reasons += f"; verdict-refused {gate['refused']}" if gate.get("refused") else ""
        rows.append({
            "step": gate["step"],
            "checkpoint": Link(f"checkpoints/{gate['checkpoint']}", f"checkpoints/{gate['checkpoint']}")
            if folder.is_dir() else f"checkpoints/{gate['checkpoint']} (folder gone)",
            "val pass@1 % [95% CI]": pct_interval(gate["pass_at_1"]),
            "val pass@k % [95% CI]": f"k={gate['k']}: {pct_interval(gate['pass_at_k'])}",
            "runs a task": gate["runs"],
            "ended": reasons,
            "ledger candidate": name if gate["checkpoint"] == chosen else f"{name}@{gate['checkpoint']}",
            "chosen": "yes: adapter/" if gate["checkpoint"] == chosen else "",
            "ledger chose": "yes" if ledger and ledger["checkpoint"] == gate["checkpoint"] else "",
            "transcripts": _transcripts(out, f"gate-{gate['checkpoint']}") or "not kept",
        })
    return rows


def _step_rows(out: Path, rows: list[LogRow], checkpoints: dict[int, Path], finished: bool) -> list[dict[str, Cell]]:
    spread = {int(row["step"]): step_spread(row) for row in read_outcomes(out)}
    table: list[dict[str, Cell]] = []
    for row in rows:
        groups = spread.get(int(row["step"]))
        table.append({
            "step": row["step"], "reward": row.get("reward"), "solve rate": row.get("episodes/solve_rate"),
            "KL": row.get("kl"), "beta": row.get("beta"), "turn budget": row.get("turn_budget"),
            "loss": row.get("loss"), "rl_loss": row.get("rl_loss"), "bc/nll": row.get("bc/nll"),
            "bc/weight": row.get("bc/weight"), "tampered": row.get("episodes/tampered"),
            "verdict-refused": row.get("episodes/refused"),
            "replayed": row.get("episodes/replayed"),
            "groups with spread: on-policy / replay only": f"{groups['on_policy']} / {groups['replay_only']} of "
                                                           f"{groups['groups']}" if groups else "not logged",
            "weights after the step": _weights_of(int(row["step"]), checkpoints, out, finished) or "not saved yet",
            "episodes": _transcripts(out, f"step-{int(row['step']):06d}") or "not kept",
        })
    return table


def grpo_panels(recipe: Mapping[str, Setting], gates: list[GateRow]) -> list[Panel]:
    """The report's named plots (see ``MEANINGS``)."""
    val = [(g["step"], g["pass_at_1"]["mean"], *g["pass_at_1"]["ci"]) for g in sorted(gates, key=lambda g: g["step"])]
    target = ("target KL", float(recipe["target_kl"])) if recipe.get("kl_mode") == "adaptive" and "target_kl" in recipe \
        else None
    return [
        Panel("reward", "Reward (total and each term)", ("reward", *(f"rewards/{t}/mean" for t in REWARD_TERMS)),
              MEANINGS["reward"], "reward"),
        Panel("solve_rate", "On-policy solve rate", ("episodes/solve_rate",), MEANINGS["solve_rate"], "share solved",
              points={"val pass@1 (95% CI)": val} if val else {}),
        Panel("kl", "KL to the SFT model", ("kl",), MEANINGS["kl"], "nats / token", hline=target),
        Panel("beta", "KL coefficient beta", ("beta",), MEANINGS["beta"], "beta"),
        Panel("turn_budget", "Turn budget", ("turn_budget",), MEANINGS["turn_budget"], "turns"),
        Panel("loss", "Loss terms", ("loss", "rl_loss", "bc/nll"), MEANINGS["loss"], "loss"),
        Panel("bc_weight", "Behaviour-cloning anchor weight", ("bc/weight",), MEANINGS["bc_weight"], "weight"),
        Panel("episodes", "Tampered, verdict-refused and replayed episodes",
              ("episodes/tampered", "episodes/refused", "episodes/replayed"), MEANINGS["episodes"], "episodes per step"),
    ]


def _summary(out: Path, record: GRPORunRecord | None, rows: list[LogRow], checkpoints: dict[int, Path],
             ledger: LedgerChoice | None, torn: int) -> dict[str, Cell]:
    recipe = record.get("recipe", {}) if record is not None else {}
    last = rows[-1] if rows else {}
    summary: dict[str, Cell] = {"run folder": str(out.resolve())}
    if record is not None:
        summary["status"] = f"finished: {record['steps']} optimizer steps"
    else:
        summary["status"] = (f"not finished (no {RUN_FILE}: killed, failed or still running); last logged step "
                             f"{last.get('step', 'none')}; resume with pdbgym train grpo --resume")
    summary["last complete checkpoint"] = (Link(f"checkpoint-{max(checkpoints)}",
                                                f"checkpoints/checkpoint-{max(checkpoints)}") if checkpoints else None)
    for key in ("policy", "group", "tasks_per_step", "steps", "seed", "tasks", "val_tasks"):
        if key in recipe:
            summary[key] = recipe[key]
    if record is not None:
        summary["parent (SFT adapter or base) id"] = record["parent_id"]
        summary["chosen checkpoint"] = record["chosen"]
        summary["adapter"] = Link("adapter/", "adapter") if (out / "adapter").is_dir() else record["adapter"]
        summary["store name / id"] = f"{record['name']} / {record['store_id']}"
        summary["selection ledger"] = ("no val gate: the final weights were taken, nothing selected"
                                       if record.get("gate") is None else _ledger_text(ledger, record["chosen"]))
    for key, label in (("episodes/tampered_total", "tampered episodes (total)"),
                       ("episodes/refused_total", "verdict-refused episodes (total)"),
                       ("episodes/replayed_total", "replayed episodes (total)")):
        if key in last:
            summary[label] = int(last[key])
    outcomes = read_outcomes(out)
    if outcomes:
        spread = spread_steps(outcomes)
        summary["steps with reward spread"] = (f"{spread['on_policy']} of {spread['steps']} among on-policy episodes; "
                                               f"{spread['replay_only']} more only through replayed ones")
    skipped = skipped_steps(rows)
    if skipped:
        summary["steps skipped (non-finite gradients)"] = ", ".join(map(str, skipped))
    if record is not None and record.get("warning"):
        summary["warning"] = record["warning"]
    if torn:
        summary["unreadable lines skipped"] = torn
    return summary


def _ledger_text(ledger: LedgerChoice | None, chosen: str) -> str:
    if ledger is None:
        return "not found in this ledger (the run may have used another --ledger or PDBGYM_HOME)"
    agree = "" if ledger["checkpoint"] == chosen else f" (differs from the adapter's {chosen})"
    return (f"{ledger['checkpoint']} chosen among {ledger['candidates']} candidates on split {ledger['split']} "
            f"(task set {ledger['task_set']}){agree}; {ledger['path']}")


def read_outcomes(out: Path) -> list[StepOutcomes]:
    """The rows of a run folder's ``outcomes.jsonl`` (none for a run from before it)."""
    return cast(list[StepOutcomes], read_jsonl(out / OUTCOMES_FILE).rows)


def write_grpo_report(out_dir: Path, ledger: Path | None = None) -> Path:
    """Write ``out_dir/training_report.{html,md,json}`` and its plots from a GRPO run folder; return the HTML.

    ``ledger``: the selection ledger the run wrote to (default ``$PDBGYM_HOME/selection-ledger.jsonl``).
    """
    out = Path(out_dir)
    steps_log, gates_log = read_jsonl(out / STEPS_FILE), read_jsonl(out / GATES_FILE)
    raw, torn = cast(list[LogRow], steps_log.rows), steps_log.torn
    gates, torn_gates = cast(list[GateRow], gates_log.rows), gates_log.torn
    if not raw and not gates and not (out / RUN_FILE).is_file():
        raise PdbgymError(f"{out} holds no GRPO run ({STEPS_FILE}, {GATES_FILE} and {RUN_FILE} are all missing); "
                          "pass the --out folder of a pdbgym train grpo run")
    record: GRPORunRecord | None = json.loads((out / RUN_FILE).read_text()) if (out / RUN_FILE).is_file() else None
    rows, checkpoints = _with_counts(raw), _checkpoints(out)
    name = (record or {}).get("name") or f"grpo-{out.resolve().name}"
    chosen = (record or {}).get("chosen")
    choice = _ledger_choice(ledger, name, chosen, gates) if record and record.get("gate") else None
    tables = {"Val gate (one row per checkpoint)": _gate_rows(out, gates, checkpoints, name, chosen, choice),
              "Steps": _step_rows(out, rows, checkpoints, record is not None)}
    notes = {"How to read this report": [
        "Every step row names the saved weights that include its update (the first checkpoint at or after it); "
        "every gate row names the checkpoint folder it scored. Transcript marks: ✓ solved, ✗ not, ! tampered, "
        "? verdict refused (the grading run ended abnormally; graded unsolved, not tampered).",
        "Val pass@1 and pass@k are estimated over val tasks (task-clustered SE; CI method as in pdbgym eval) from "
        "--val-runs episodes a task at the full turn budget. The checkpoint with the best pass@1 (ties: the later "
        "one) becomes adapter/ and the choice is written to the selection ledger, so reporting it on the val "
        "split later is refused as biased by the choice.",
        *(f"{panel}: {text}" for panel, text in MEANINGS.items())]}
    return write_training_report(out, f"pdbgym GRPO: {name}", rows,
                                 _summary(out, record, rows, checkpoints, choice, torn + torn_gates), tables,
                                 panels=grpo_panels((record or {}).get("recipe", {}), gates), notes=notes)
