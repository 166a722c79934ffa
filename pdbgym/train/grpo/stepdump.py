"""A GRPO step whose gradients were not finite, kept so its fault can be reproduced away from the run.

When the gradient guard (``pdbgym.train.gradguard``) skips a step, ``dump_step`` writes
``OUT/nonfinite/step-N.pt`` (``step-N-rankR.pt`` with several processes): every batch the step's loss
was computed on, as TRL built them (ids, masks, advantages, reference log-probs), the trainable tensors
as they were (the optimizer has not moved them: they are the weights that made the NaN) and beta. With
a trainer built from the run's config, ``replay_step`` loads the weights, recomputes the loss on those
batches, backpropagates and says whether the gradients are finite and which tensors are not: the fault
can then be bisected on any machine with the model, instead of waiting for it to recur on a GPU.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from pdbgym.fileio import atomic_target

if TYPE_CHECKING:  # annotations only: torch and TRL load with the trainer
    import torch
    from trl import GRPOTrainer

logger = logging.getLogger(__name__)

DUMP_DIR = "nonfinite"
MAX_KEPT = 3  # steps kept per process and run: the first ones say what the fault is; each holds the weights


class StepDump(TypedDict):
    """What ``step-N.pt`` holds: the step, beta, TRL's gradient accumulation, the step's batches as TRL built
    them (its tensors on the CPU, with whatever else TRL put in a batch) and the trainable tensors."""

    step: int
    beta: float
    accumulation: int
    batches: list[dict[str, object]]
    trainable: dict[str, torch.Tensor]


class StepReplay(TypedDict):
    """What ``replay_step`` found: the step, its recomputed loss, whether its gradients are all finite and the
    tensors whose gradients are not."""

    step: int
    loss: float
    finite: bool
    nonfinite: list[str]


def dump_path(out: Path, step: int, rank: int, processes: int) -> Path:
    return Path(out) / DUMP_DIR / (f"step-{step}" + (f"-rank{rank}" if processes > 1 else "") + ".pt")


def _to_cpu(value: object) -> object:
    return value.detach().cpu() if hasattr(value, "detach") else value


def dump_step(trainer: GRPOTrainer, out: Path, step: int) -> Path | None:
    """Write what ``replay_step`` needs to recompute step ``step``'s loss and gradients (see the module);
    None once ``MAX_KEPT`` steps of this process are kept."""
    import torch  # optional: torch (pdbgym[hf])

    rank, processes = trainer.accelerator.process_index, trainer.accelerator.num_processes
    path = dump_path(out, step, rank, processes)
    kept = list(path.parent.glob(f"step-*-rank{rank}.pt" if processes > 1 else "step-*.pt"))
    if len(kept) >= MAX_KEPT:
        logger.warning("step %d is not kept for replay: %s already holds %d kept steps", step, path.parent, len(kept))
        return None
    accumulation = getattr(trainer, "current_gradient_accumulation_steps", trainer.args.gradient_accumulation_steps)
    payload: StepDump = {"step": step, "beta": float(trainer.beta), "accumulation": int(accumulation),
               "batches": [{key: _to_cpu(value) for key, value in batch.items()} for batch in trainer.step_batches],
               "trainable": {name: p.detach().cpu() for name, p in trainer.model.named_parameters() if p.requires_grad}}
    with atomic_target(path) as tmp:
        torch.save(payload, tmp)
    logger.warning("step %d's batches and weights are in %s (pdbgym.train.grpo.stepdump.replay_step reruns them)",
                   step, path)
    return path


def replay_step(trainer: GRPOTrainer, path: Path) -> StepReplay:
    """Recompute a dumped step's loss and gradients with ``trainer`` (built from the same run config):
    ``{"step", "loss", "finite", "nonfinite"}``, ``nonfinite`` naming the tensors whose gradients are not."""
    import torch  # optional: torch (pdbgym[hf])

    saved: StepDump = torch.load(path, map_location="cpu", weights_only=False)
    model = trainer.model
    parameters = dict(model.named_parameters())
    missing = sorted(set(saved["trainable"]) - set(parameters))
    if missing:
        raise ValueError(f"{path}: the trainer has no tensor {missing[0]!r} (and {len(missing) - 1} more): build it "
                         "from the config of the run that wrote the dump")
    with torch.no_grad():
        for name, value in saved["trainable"].items():
            parameters[name].copy_(value)
    trainer.beta = saved["beta"]
    trainer.state.global_step = saved["step"] - 1  # the BC anchor's batch is the step's
    trainer._batches_of = None  # the first batch replayed is the step's first: it carries the BC anchor
    trainer.current_gradient_accumulation_steps = saved["accumulation"]  # TRL's loss divides by it
    model.train()
    model.zero_grad()
    device = next(model.parameters()).device
    total = 0.0
    for batch in saved["batches"]:
        moved = {key: value.to(device) if hasattr(value, "to") else value for key, value in batch.items()}
        with trainer.compute_loss_context_manager():
            loss = trainer.compute_loss(model, moved)
        loss.backward()
        total += float(loss.detach())
    nonfinite = [name for name, p in model.named_parameters()
                 if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
    model.zero_grad()
    return {"step": saved["step"], "loss": total, "finite": not nonfinite, "nonfinite": nonfinite}
