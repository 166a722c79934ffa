"""Reproduction acceptance: does a retrained adapter meet the recorded targets of a lost layer?

Targets (JSON)::

    {"lora_tensor_count": 432, "best_val_loss": 0.11644, "best_step": 156,
     "val_loss_tolerance": 0.005, "step_tolerance": 0, "rank": 24, "use_dora": true}

``lora_tensor_count`` counts every tensor in adapter_model.safetensors (lora_A, lora_B and DoRA magnitude
vectors) and must match exactly. ``best_val_loss`` is the minimum validation loss (nats/token, as the
trainer logs it); the candidate passes when |observed - target| <= val_loss_tolerance (absolute, default
0.005). ``best_step`` is the step of that minimum, within ``step_tolerance`` steps (default 0).
Optional, exact: ``total_steps`` (trainer_state's global_step, or the last logged step), ``rank``, ``use_dora``.
Passing means the candidate can stand in for the lost layer as an init; it never restores a delta that
was trained over the lost layer, whose recorded parent hash stays unmatched.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from pdbgym.adapters.errors import AdapterError
from pdbgym.adapters.files import read_json
from pdbgym.adapters.peft_format import adapter_content_hash, load_adapter
from pdbgym.adapters.store import Store
from pdbgym.fileio import JsonlError, JSONValue, read_jsonl

DEFAULT_VAL_LOSS_TOLERANCE = 0.005


class Targets(TypedDict):
    """An acceptance targets file (docs/adapters.md), its tolerances defaulted: what the lost layer's training
    recorded, and optionally its step count, rank and DoRA flag."""

    lora_tensor_count: int
    best_val_loss: float
    best_step: int
    val_loss_tolerance: float
    step_tolerance: int
    total_steps: NotRequired[int]
    rank: NotRequired[int]
    use_dora: NotRequired[bool]


class CheckDict(TypedDict):
    name: str
    target: int | float | bool
    observed: int | float | bool
    passed: bool
    rule: str


class AcceptanceDict(TypedDict):
    """``AcceptanceReport.as_dict()``: what ``pdbgym adapters accept --json`` prints."""

    candidate: str
    accepted: bool
    statement: str
    checks: list[CheckDict]
    notes: list[str]


@dataclass(frozen=True)
class Check:
    """One acceptance criterion: the recorded target (a count, a loss, a step or a flag) and what was observed."""

    name: str
    target: int | float | bool
    observed: int | float | bool
    passed: bool
    rule: str


@dataclass
class AcceptanceReport:
    """All checks, the verdict, and what the verdict does and does not mean."""

    candidate: str
    checks: list[Check]
    statement: str
    notes: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return all(check.passed for check in self.checks)

    def as_dict(self) -> AcceptanceDict:
        return {"candidate": self.candidate, "accepted": self.accepted, "statement": self.statement,
                "checks": [cast(CheckDict, asdict(c)) for c in self.checks], "notes": self.notes}


def load_targets(path: Path) -> Targets:
    """Read and validate a targets file; names the field that is missing or of the wrong type."""
    targets = read_json(path, "acceptance targets")
    if not isinstance(targets, dict):
        raise AdapterError(f"{path}: targets must be a JSON object.")
    for name, kind in (("lora_tensor_count", int), ("best_val_loss", float), ("best_step", int)):
        value = targets.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool) or (kind is int and value != int(value)):
            raise AdapterError(f"{path}: field {name!r} is missing or not a {kind.__name__} (see docs/adapters.md).")
    targets.setdefault("val_loss_tolerance", DEFAULT_VAL_LOSS_TOLERANCE)
    targets.setdefault("step_tolerance", 0)
    return cast(Targets, targets)  # the three required fields numbers, as checked


def _curve_from_log_history(history: JSONValue, where: Path) -> list[tuple[int, float]]:
    if not isinstance(history, list):
        raise AdapterError(f"{where}: 'log_history' is not a list.")
    curve = []
    for index, entry in enumerate(history):
        if not isinstance(entry, dict) or "eval_loss" not in entry:
            continue
        try:
            curve.append((int(entry["step"]), float(entry["eval_loss"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise AdapterError(f"{where}: log_history[{index}] = {entry!r} needs an integer 'step' and a numeric "
                               f"'eval_loss' ({type(exc).__name__}: {exc}).") from exc
    return curve


def validation_curve(candidate: Path, metrics: Path | None) -> tuple[list[tuple[int, float]], Path, int]:
    """(step, validation loss) pairs, their source, and the last training step logged."""
    path = metrics or _find_trainer_state(candidate)
    last_step = 0
    if path.suffix == ".jsonl":
        curve = []
        try:
            found = read_jsonl(path, strict=True)
        except JsonlError as exc:
            raise AdapterError(f"{exc.where}: expected {{'step': int, 'val_loss': float}} ({exc.reason}).") from exc
        for number, row in zip(found.numbers, found.rows, strict=True):
            try:
                loss = row.get("val_loss", row.get("eval_loss"))
                last_step = max(last_step, int(row["step"]))
                if loss is not None:
                    curve.append((int(row["step"]), float(loss)))
            except (KeyError, TypeError, ValueError) as exc:
                raise AdapterError(f"{path}:{number}: expected {{'step': int, 'val_loss': float}} ({exc}).") from exc
    else:
        state = read_json(path, "training state")
        if not isinstance(state, dict) or "log_history" not in state:
            raise AdapterError(f"{path}: no 'log_history' (expected HF Trainer's trainer_state.json).")
        curve = _curve_from_log_history(state["log_history"], path)
        steps = [int(e["step"]) for e in state["log_history"] if isinstance(e, dict) and "step" in e]
        last_step = int(state.get("global_step") or max(steps, default=0))
    if not curve:
        raise AdapterError(f"{path}: holds no validation loss (eval_loss / val_loss); was evaluation enabled?")
    return curve, path, last_step


def _find_trainer_state(candidate: Path) -> Path:
    if (candidate / "trainer_state.json").is_file():
        return candidate / "trainer_state.json"
    checkpoints = sorted(candidate.glob("checkpoint-*/trainer_state.json"),
                         key=lambda p: int(p.parent.name.split("-")[-1]) if p.parent.name.split("-")[-1].isdigit() else -1)
    if checkpoints:
        return checkpoints[-1]
    raise AdapterError(f"{candidate}: no trainer_state.json (or checkpoint-*/trainer_state.json); pass --metrics FILE.")


def evaluate(candidate: Path, targets: Targets, metrics: Path | None = None) -> AcceptanceReport:
    """Compare a candidate adapter folder and its training record with the targets."""
    adapter = load_adapter(candidate)
    curve, source, last_step = validation_curve(candidate, metrics)
    finite = [(step, loss) for step, loss in curve if math.isfinite(loss)]
    if not finite:
        raise AdapterError(f"{source}: every validation loss is NaN or infinite; the run diverged.")
    # NaN compares false with everything, so min() over a curve holding one would depend on its position
    best_step, best_loss = min(finite, key=lambda pair: (pair[1], pair[0]))
    loss_tol, step_tol = float(targets["val_loss_tolerance"]), int(targets["step_tolerance"])
    checks = [
        Check("lora_tensor_count", targets["lora_tensor_count"], len(adapter.header.tensors),
              len(adapter.header.tensors) == targets["lora_tensor_count"], "exact"),
        Check("best_val_loss", targets["best_val_loss"], best_loss,
              abs(best_loss - targets["best_val_loss"]) <= loss_tol, f"|observed - target| <= {loss_tol}"),
        Check("best_step", targets["best_step"], best_step,
              abs(best_step - targets["best_step"]) <= step_tol, f"|observed - target| <= {step_tol}"),
    ]
    if "total_steps" in targets:
        checks.append(Check("total_steps", targets["total_steps"], last_step,
                            last_step == targets["total_steps"], "exact"))
    if "rank" in targets:
        checks.append(Check("rank", targets["rank"], adapter.config["r"], adapter.config["r"] == targets["rank"], "exact"))
    if "use_dora" in targets:
        checks.append(Check("use_dora", targets["use_dora"], adapter.use_dora, adapter.use_dora == targets["use_dora"], "exact"))
    report = AcceptanceReport(str(candidate), checks, "", [f"validation curve read from {source}"])
    if len(finite) < len(curve):
        skipped = [step for step, loss in curve if not math.isfinite(loss)]
        report.notes.append(f"{len(skipped)} non-finite validation loss(es) left out of the minimum (steps {skipped[:10]})")
    report.statement = (
        "ACCEPTED: the candidate restores the lineage's init; it can stand in for the lost layer as the parent "
        "of NEW deltas. It does not restore any delta trained over the lost layer: that delta's recorded "
        "parent hash is not this candidate's, so it stays unservable; retrain it over this candidate."
        if report.accepted else
        "REJECTED: the candidate does not reproduce the recorded targets; it cannot stand in for the lost layer."
    )
    return report


def relate_to_lineage(store: Store, ref: str, candidate: Path) -> str:
    """Say how the candidate relates to the first missing layer of REF's lineage (it is never the lost delta)."""
    lineage = store.lineage(store.resolve(ref))
    missing = [layer.node_id for layer in lineage.layers if layer.record is None]
    candidate_id = adapter_content_hash(load_adapter(candidate))
    if not missing:
        return f"{store.label(lineage.layers[-1].node_id)} is servable: no layer of its lineage is missing."
    if candidate_id == missing[0]:
        return (f"the candidate is bit-identical to the missing layer {missing[0][:12]}: register it with "
                f"`pdbgym adapters register {candidate} --parent <its parent>` and the lineage becomes servable.")
    return (f"the missing layer {missing[0][:12]} of {ref} differs from the candidate ({candidate_id[:12]}): "
            f"{ref} stays unservable; the candidate can only seed new deltas.")
