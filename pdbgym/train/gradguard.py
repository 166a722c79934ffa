"""Optimizer steps whose gradients are not all finite are skipped, not taken.

A backward pass can produce NaN or inf gradients while its loss is finite: an ``exp`` that overflows on a
position the loss masks out, a ``sqrt`` at zero, a kernel's backward on a fully masked row. transformers
then clips with a NaN norm, which turns every gradient NaN, and the optimizer writes NaN into every
trainable weight: the policy is destroyed and every later step trains on garbage (an H100 GRPO run lost
22 of its 33 steps this way, ``docs/training.md``). ``GradientGuard`` checks the gradients just before
the optimizer step, after they are reduced over processes; one process's non-finite gradient (a shard's
under FSDP) makes every process skip. A step with a non-finite one has its gradients dropped, so the
optimizer leaves the weights and its own moments as they were, and the step is recorded. The guard also
names the tensors whose gradients went non-finite in this process's backward (a post-accumulate hook per
trainable tensor flags them on the device, read only on a skipped step), which brackets where the fault
entered the network. ``patience`` skipped steps in a row stop the run at a saved checkpoint, since a run
that cannot take a step learns nothing more.

The guard adds one fused norm over the trainable gradients, with several processes one all-reduce of a
flag, and one host read a step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypedDict

from pdbgym.train.records import LogRow

if TYPE_CHECKING:  # annotations only: torch and transformers load with the trainer
    import torch
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

logger = logging.getLogger(__name__)

DEFAULT_PATIENCE = 3  # skipped steps in a row that end the run
SKIPPED_KEY = "grad/nonfinite_skipped"  # logged on every training step: 1.0 when the step was skipped
NAMES_SHOWN = 8  # tensor names a warning lists


class GuardSummary(TypedDict):
    """What a run record keeps of the guard (``GradientGuard.summary``)."""

    skipped_steps: list[int]
    nonfinite_tensors: dict[str, list[str]]  # skipped step -> tensors non-finite in this process's backward
    stopped_at: int | None


def skipped_steps(rows: Sequence[LogRow]) -> list[int]:
    """The steps of logged rows (``steps.jsonl``, ``metrics.jsonl``) that the guard skipped."""
    return [int(row["step"]) for row in rows if row.get(SKIPPED_KEY)]


class GradientGuard:
    """Skips optimizer steps whose gradients are not all finite; see the module docstring."""

    def __init__(self, patience: int = DEFAULT_PATIENCE, on_skip: Callable[[int], object] | None = None):
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.patience = patience
        self.on_skip = on_skip  # called with a skipped step's number before its gradients are dropped
        self.skipped: list[int] = []  # optimizer steps (1-based, as logged) that were skipped
        self.offenders: dict[int, list[str]] = {}  # skipped step -> tensors non-finite in this process's backward
        self.stopped_at: int | None = None  # the step at which `patience` skips in a row stopped the run
        self._in_a_row = 0
        self._flags: dict[str, torch.Tensor] = {}  # tensor name -> device bool: its gradient was non-finite this step
        self._hooks: list[torch.utils.hooks.RemovableHandle] = []

    def attach(self, model: torch.nn.Module) -> None:
        """Flag, per trainable tensor of ``model``, a non-finite gradient as it accumulates (device-side)."""
        self.detach()
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                self._hooks.append(parameter.register_post_accumulate_grad_hook(self._flagger(name)))

    def detach(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks, self._flags = [], {}

    def _flagger(self, name: str) -> Callable[[torch.Tensor], None]:
        import torch  # optional: torch (pdbgym[hf])

        def flag(parameter: torch.Tensor) -> None:
            bad = ~torch.isfinite(parameter.grad).all()
            seen = self._flags.get(name)
            self._flags[name] = bad if seen is None else seen | bad
        return flag

    def check(self, model: torch.nn.Module, step: int) -> bool:
        """True if the gradients of ``model``'s trainable tensors are all finite. If not, drop them all
        (the optimizer then skips every tensor: weights and moments stay as they were) and record ``step``."""
        import torch  # optional: torch (pdbgym[hf])
        from torch.nn.utils import get_total_norm  # optional: torch (pdbgym[hf])

        parameters = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
        # each process checks the gradient it holds (a shard's local part under FSDP), and one process's
        # non-finite one makes every process skip: a step is taken everywhere or nowhere
        local = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in parameters]
        bad = (~torch.isfinite(get_total_norm(local))).float() if local else \
            torch.zeros((), device=next(model.parameters()).device)
        if torch.distributed.is_available() and torch.distributed.is_initialized() \
                and torch.distributed.get_world_size() > 1:
            torch.distributed.all_reduce(bad, op=torch.distributed.ReduceOp.MAX)
        finite = not bool(bad)
        flags, self._flags = self._flags, {}
        if finite:
            self._in_a_row = 0
            return True
        names = list(flags)
        marked = torch.stack([flags[n] for n in names]).tolist() if names else []
        self.offenders[step] = [name for name, flagged in zip(names, marked, strict=True) if flagged]
        if self.on_skip is not None:
            try:
                self.on_skip(step)
            except Exception as error:  # noqa: BLE001 - keeping evidence must not end the run
                logger.warning("step %d: keeping its batches failed: %s", step, error)
        for parameter in parameters:
            parameter.grad = None
        self.skipped.append(step)
        self._in_a_row += 1
        shown = self.offenders[step][:NAMES_SHOWN]
        more = len(self.offenders[step]) - len(shown)
        logger.warning("step %d skipped: its gradients are not finite (NaN or inf) though the weights are; "
                       "non-finite in this process's backward: %s%s", step,
                       ", ".join(shown) or "none (another process's, reduced into these)",
                       f" and {more} more" if more > 0 else "")
        if self._in_a_row >= self.patience:
            self.stopped_at = step
            logger.warning("training stops at step %d: %d steps in a row had non-finite gradients, so the "
                           "run can no longer update its weights; the weights kept are those of step %d",
                           step, self._in_a_row, step - self._in_a_row)
        return False

    def summary(self) -> GuardSummary:
        """What a run record keeps: the skipped steps, the tensors named at each, and a stop if there was one."""
        return {"skipped_steps": list(self.skipped),
                "nonfinite_tensors": {str(step): names for step, names in self.offenders.items()},
                "stopped_at": self.stopped_at}


def guard_callback(guard: GradientGuard) -> TrainerCallback:
    """A transformers ``TrainerCallback`` running ``guard`` before each optimizer step: a skipped step is
    logged (``SKIPPED_KEY`` in the step's log row: put this callback before those that write the rows),
    and ``patience`` skips in a row stop the run with the (unchanged) weights saved as a checkpoint."""
    from transformers import TrainerCallback  # optional: transformers (pdbgym[hf])

    class GradientGuardCallback(TrainerCallback):
        def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                           model: torch.nn.Module | None = None, **kwargs: object) -> None:
            guard.attach(model)

        def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                                  model: torch.nn.Module | None = None, **kwargs: object) -> None:
            if not guard.check(model, state.global_step + 1) and guard.stopped_at is not None:
                control.should_training_stop = True
                control.should_save = True

        def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                   logs: dict[str, float] | None = None, **kwargs: object) -> None:
            if logs is not None and "grad_norm" in logs:  # a training step's row, not an evaluation's
                logs[SKIPPED_KEY] = float(state.global_step in guard.skipped)

        def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                         **kwargs: object) -> None:
            guard.detach()

    return GradientGuardCallback()
