"""The end of a GRPO run: the checkpoint with the best val pass@1 chosen and the choice recorded in the
selection ledger (the final one without val tasks), its delta copied to ``adapter/`` and registered in
the store with its parent (``sft.register.register_adapter``), the run record written (``grpo_run.json``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pdbgym.adapters.store import Store
from pdbgym.evaluate.selection import SelectionLedger, record_selection
from pdbgym.fileio import read_jsonl, write_json_atomic
from pdbgym.tasks.model import Task
from pdbgym.train.gradguard import skipped_steps
from pdbgym.train.grpo.config import GRPORunConfig
from pdbgym.train.grpo.records import GateRow, GRPORunRecord, SignalCounts, StepOutcomes
from pdbgym.train.grpo.spread import spread_steps
from pdbgym.train.grpo.trainer import GATES_FILE, OUTCOMES_FILE, STEPS_FILE
from pdbgym.train.grpo.valgate import read_gates
from pdbgym.train.records import LogRow
from pdbgym.train.sft.base import BaseModel
from pdbgym.train.sft.register import register_adapter

if TYPE_CHECKING:  # annotations only: TRL loads with the trainer
    from trl import GRPOTrainer

RUN_FILE = "grpo_run.json"
SELECTION_SPLIT = "val"


def finish_run(config: GRPORunConfig, trainer: GRPOTrainer, base: BaseModel, val_tasks: list[Task]) -> GRPORunRecord:
    """Choose the checkpoint, copy its delta to ``adapter/``, register it, write ``grpo_run.json``."""
    chosen, gate = choose_checkpoint(config, val_tasks, config.name or f"grpo-{config.out.name}")
    adapter_dir = config.out / "adapter"
    if adapter_dir.exists():
        shutil.rmtree(adapter_dir)
    source = config.out / "final" if chosen == "final" else config.out / "checkpoints" / chosen
    adapter_dir.mkdir(parents=True)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        shutil.copy2(source / name, adapter_dir / name)
    rows = cast(list[LogRow], read_jsonl(config.out / STEPS_FILE).rows)
    spread = signal_counts(rows, cast(list[StepOutcomes], read_jsonl(config.out / OUTCOMES_FILE).rows))
    signal = spread["reward_signal_steps"]
    registered = signal > 0 or config.register_without_signal
    node_id = _register(config, adapter_dir, base.parent_id) if registered else None
    record: GRPORunRecord = {
        "format": "pdbgym-train-record/1", "kind": "grpo", "recipe": config.recipe(),
        "parent_id": base.parent_id, "policy": config.policy, "chosen": chosen, "gate": gate,
        "steps": int(trainer.state.global_step), "store_id": node_id,
        "name": config.name or f"grpo-{config.out.name}", "adapter": str(adapter_dir),
        "reward_signal_steps": spread["reward_signal_steps"],
        "replay_only_signal_steps": spread["replay_only_signal_steps"],
        "trl_reward_spread_steps": spread["trl_reward_spread_steps"],
        "registered": registered, "registered_without_signal": registered and not signal,
        "rollout_weights": getattr(getattr(trainer, "rollout_func", None), "weights_used", config.rollout_weights),
        "nonfinite_skipped_steps": skipped_steps(rows)}
    guard = getattr(trainer, "gradient_guard", None)
    if guard is not None and guard.skipped:  # this invocation's: the tensors named at each skipped step
        record["nonfinite"] = guard.summary()
    warnings = [no_signal_warning(registered, spread["replay_only_signal_steps"])] if not signal else []
    if record["nonfinite_skipped_steps"]:
        warnings.append(nonfinite_warning(record["nonfinite_skipped_steps"], guard.stopped_at if guard else None))
    if warnings:
        record["warning"] = " ".join(warnings)
    write_json_atomic(config.out / RUN_FILE, record)
    return record


def no_signal_warning(registered: bool, replay_only: int = 0) -> str:
    """What a run without on-policy reward spread learned, and where its delta went: registered (as asked by
    ``register_without_signal``) or only in ``adapter/``. One text, so the record never says both."""
    replay = (f" ({plural_steps(replay_only)} had spread only between replayed corpus trajectories and the "
              "played episodes, which teaches the policy nothing about its own choices)" if replay_only else "")
    where = ("it was registered anyway (--register-without-signal): whatever evaluates it evaluates the SFT "
             "model plus the anchor's imitation, not reinforcement learning" if registered else
             "the delta is in adapter/ but not registered (pass --register-without-signal to register such a run)")
    return ("no step had reward spread among its on-policy episodes (every group's played episodes scored "
            f"alike){replay}, so every advantage of the policy's own samples was 0 and the delta learned nothing "
            "from reward (only from replayed trajectories and the BC anchor, if on). Use easier tasks, a larger "
            f"--group, or an SFT start nearer a 50% solve rate; {where}")


def plural_steps(n: int) -> str:
    return f"{n} step" if n == 1 else f"{n} steps"


def signal_counts(rows: list[LogRow], outcomes: list[StepOutcomes]) -> SignalCounts:
    """The run record's spread counts: ``reward_signal_steps`` (steps with a group whose on-policy
    episodes scored differently, ``spread.spread_steps``), ``replay_only_signal_steps`` (steps whose only
    spread came from replayed episodes) and ``trl_reward_spread_steps`` (TRL's count over every episode,
    replayed ones included). A run that kept no ``outcomes.jsonl`` falls back on TRL's count."""
    trl = reward_signal_steps(rows)
    if not outcomes:
        return {"reward_signal_steps": trl, "replay_only_signal_steps": 0, "trl_reward_spread_steps": trl}
    spread = spread_steps(outcomes)
    return {"reward_signal_steps": spread["on_policy"], "replay_only_signal_steps": spread["replay_only"],
            "trl_reward_spread_steps": trl}


def reward_signal_steps(rows: list[LogRow]) -> int:
    """How many logged optimizer steps (``steps.jsonl`` rows) had a group whose episodes' rewards differed,
    by TRL's ``frac_reward_zero_std``: replayed episodes included (``signal_counts`` leaves them out)."""
    return sum(1 for row in rows if float(row.get("frac_reward_zero_std", 1.0)) < 1.0)


def nonfinite_warning(steps: list[int], stopped_at: int | None) -> str:
    shown = ", ".join(str(s) for s in steps[:10]) + (f" and {len(steps) - 10} more" if len(steps) > 10 else "")
    stop = f"; training stopped at step {stopped_at}, with the weights of the last step taken" if stopped_at else ""
    return (f"{len(steps)} step(s) were skipped because their gradients were not finite (steps {shown}): their "
            f"updates were not applied{stop}. The log names the tensors whose gradients went non-finite (and "
            "grpo_run.json's nonfinite, for this invocation's steps)")


def choose_checkpoint(config: GRPORunConfig, val_tasks: list[Task], name: str) -> tuple[str, GateRow | None]:
    """The checkpoint with the best val pass@1, recorded in the selection ledger; the final one without val."""
    gates = read_gates(config.out / GATES_FILE)
    if not val_tasks or not gates:
        return "final", None
    best = max(gates, key=lambda g: (g["pass_at_1"]["mean"], g["step"]))
    # The best goes first: record_selection takes the first of equal scores, and a tie must record this choice.
    scores = {name: best["pass_at_1"]["mean"]} | {f"{name}@{g['checkpoint']}": g["pass_at_1"]["mean"]
                                                 for g in gates if g is not best}
    se = best["pass_at_1"]["se"]
    record_selection(SELECTION_SPLIT, [t.instance_id for t in val_tasks], scores, se if se == se else 0.0,
                     SelectionLedger(config.ledger) if config.ledger else SelectionLedger())
    return best["checkpoint"], best


def _register(config: GRPORunConfig, adapter_dir: Path, parent_id: str) -> str:
    store = Store(config.store) if config.store else Store()
    name = config.name or f"grpo-{config.out.name}"
    recipe = {k: v for k, v in config.recipe().items() if not isinstance(v, dict)}
    recipe.update(seed=config.seed, rank=config.rank, lr=config.lr)
    return register_adapter(store, adapter_dir, parent_id, name, recipe)
