"""Every place pdbgym touches a non-public part of TRL, transformers or accelerate, in one module.

pdbgym extends the trainers through their public hooks (subclass methods TRL documents, callbacks,
``rollout_func``) wherever one exists. What is left needs a private member: a method overridden so that
a checkpoint carries the recipe state, a metrics buffer TRL keeps private, a resume step transformers
does not expose. Each such member is named here once, reached only through the functions below, and
checked against the installed library before it is used: a release that renames one stops the run with
an error that names the member and the versions, instead of an override that silently never runs or an
attribute written where nothing reads it. ``tests/train/test_seams.py`` holds a test per seam.

| seam | library member | used by |
|---|---|---|
| checkpoint hook | ``Trainer._save_checkpoint`` (overridden) | GRPO: recipe state written beside each checkpoint |
| resume hook | ``Trainer._load_optimizer_and_scheduler`` (overridden) | GRPO: recipe state read back on resume |
| output folder | ``Trainer._get_output_dir`` | GRPO: where the checkpoint being saved goes |
| metrics buffer | ``GRPOTrainer._metrics`` | GRPO: rollout time, episode and BC-anchor metrics logged with TRL's |
| token counter | ``SFTTrainer._total_train_tokens`` | SFT resume: ``num_tokens`` continues from the checkpoint |
| checkpoint load | ``Trainer._load_from_checkpoint`` | SFT resume of a run killed after its last step |
| best model load | ``Trainer._load_best_model`` | SFT: the val-best checkpoint's weights at the end |
| generation unwrap | ``trl.models.utils.unwrap_model_for_generation`` | GRPO rollouts: the live policy outside DDP/ZeRO wrappers |
| TensorBoard writer | ``TensorBoardCallback._init_summary_writer`` (overridden), ``._SummaryWriter`` | SFT and GRPO ``--tensorboard`` folder and purge step |
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from pdbgym.train.errors import TrainError

if TYPE_CHECKING:  # annotations only: torch, transformers and TRL load with the trainer
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from trl import GRPOTrainer


class SeamError(TrainError):
    """An installed library no longer has a non-public member pdbgym relies on."""


def _versions() -> str:
    found = []
    for name in ("transformers", "trl", "accelerate"):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def _missing(what: str) -> SeamError:
    return SeamError(f"{what} is not in the installed libraries ({_versions()}); pdbgym relies on it "
                     "(see pdbgym/train/seams.py). Install the versions pyproject.toml names, or report "
                     "the release that changed it.")


def require_method(cls: type, name: str, parameters: tuple[str, ...]) -> None:
    """Refuse to subclass ``cls`` with an override of ``name`` unless the base still has that method
    with those leading parameters (after ``self``): an override of a renamed method would never run."""
    method = getattr(cls, name, None)
    if not callable(method):
        raise _missing(f"{cls.__module__}.{cls.__qualname__}.{name}")
    have = tuple(list(inspect.signature(method).parameters)[1:1 + len(parameters)])
    if have != parameters:
        raise _missing(f"{cls.__module__}.{cls.__qualname__}.{name}{parameters} (found {name}{have})")


def grpo_trainer_base() -> type:
    """TRL's ``GRPOTrainer``, checked for the methods ``PdbgymGRPOTrainer`` overrides."""
    from trl import GRPOTrainer  # optional: trl (pdbgym[train])

    require_method(GRPOTrainer, "_save_checkpoint", ("model", "trial"))
    require_method(GRPOTrainer, "_load_optimizer_and_scheduler", ("checkpoint",))
    require_method(GRPOTrainer, "_get_output_dir", ("trial",))
    require_method(GRPOTrainer, "_prepare_inputs", ("generation_batch",))
    require_method(GRPOTrainer, "_get_per_token_logps_and_entropies", ("model", "input_ids", "attention_mask",
                                                                        "logits_to_keep"))
    require_method(GRPOTrainer, "training_step", ("model", "inputs", "num_items_in_batch"))
    return GRPOTrainer


def checkpoint_folder(trainer: Trainer, trial: object) -> str:
    """The output folder ``Trainer._save_checkpoint`` writes its ``checkpoint-N`` folder into."""
    return str(trainer._get_output_dir(trial=trial))


def metrics_buffer(trainer: GRPOTrainer) -> dict[str, list[float]]:
    """TRL's per-step metric lists of the training mode (averaged and logged with TRL's own metrics)."""
    buffers = getattr(trainer, "_metrics", None)
    if not isinstance(buffers, dict) or "train" not in buffers:
        raise _missing(f"{type(trainer).__name__}._metrics['train']")
    return buffers["train"]


def append_metric(trainer: GRPOTrainer, key: str, value: float) -> None:
    """Log ``value`` under ``key`` for the current step, beside TRL's own metrics."""
    metrics_buffer(trainer)[key].append(value)


def set_token_count(trainer: Trainer, count: int) -> None:
    """Continue TRL's ``num_tokens`` counter (not saved in checkpoints) from ``count``."""
    if not hasattr(trainer, "_total_train_tokens"):
        raise _missing(f"{type(trainer).__name__}._total_train_tokens")
    trainer._total_train_tokens = int(count)


def load_checkpoint_weights(trainer: Trainer, checkpoint: str) -> None:
    """Load a checkpoint's model weights into ``trainer.model`` (transformers' resume step, on its own)."""
    loader = getattr(trainer, "_load_from_checkpoint", None)
    if loader is None:
        raise _missing(f"{type(trainer).__name__}._load_from_checkpoint")
    loader(checkpoint)


def load_best_model(trainer: Trainer) -> None:
    """What ``load_best_model_at_end`` does, for runs that save more often than they evaluate."""
    loader = getattr(trainer, "_load_best_model", None)
    if loader is None:
        raise _missing(f"{type(trainer).__name__}._load_best_model")
    loader()


@contextmanager
def unwrapped_for_generation(trainer: GRPOTrainer) -> Iterator[torch.nn.Module]:
    """The trainer's live policy, outside DDP/ZeRO wrappers, for generation (TRL's own helper)."""
    try:
        from trl.models.utils import unwrap_model_for_generation  # optional: trl (pdbgym[train])
    except ImportError as exc:
        raise _missing("trl.models.utils.unwrap_model_for_generation") from exc
    with unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                     gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs) as model:
        yield model


def tensorboard_callback_class(folder: str, purge_step: int | None) -> Callable[[], TrainerCallback]:
    """A ``TensorBoardCallback`` subclass whose writer logs to ``folder`` with ``purge_step``."""
    from transformers.integrations import TensorBoardCallback  # optional: transformers (pdbgym[hf])

    require_method(TensorBoardCallback, "_init_summary_writer", ("args",))

    class FolderTensorBoard(TensorBoardCallback):
        def _init_summary_writer(self, args: TrainingArguments) -> None:
            writer = getattr(self, "_SummaryWriter", None)
            if writer is None:
                raise _missing("TensorBoardCallback._SummaryWriter")
            self.tb_writer = writer(log_dir=folder, purge_step=purge_step)

    return FolderTensorBoard


def check_all() -> None:
    """Check every class-level seam against the installed libraries (instance members are checked
    where they are reached); for a start-up check or a test."""
    grpo_trainer_base()
    from transformers import Trainer  # optional: transformers (pdbgym[hf])

    for name in ("_load_from_checkpoint", "_load_best_model"):
        if not callable(getattr(Trainer, name, None)):
            raise _missing(f"transformers.Trainer.{name}")
    tensorboard_callback_class("unused", None)
    try:
        from trl.models.utils import unwrap_model_for_generation  # noqa: F401
    except ImportError as exc:
        raise _missing("trl.models.utils.unwrap_model_for_generation") from exc
