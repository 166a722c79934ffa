"""The config of ``pdbgym train sft`` (DAgger's is in ``train.dagger.config``, GRPO's in ``train.grpo.config``).

Defaults are the seed recipe: the SFT layer that reached best_val_loss 0.11644 at step 156 of a
312-row corpus (DoRA rank 24, seed 42, 4 epochs, lr 1e-4, effective batch 8, 16k context). Every field
but ``extra`` is a flag of ``pdbgym train sft`` of the same name (``--lora-alpha`` for ``lora_alpha``;
``--lora`` sets ``use_dora`` off), its help text declared here (``documented``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from pdbgym.defaults import documented
from pdbgym.fileio import JSONValue

# Four attention projections per layer: with DoRA (lora_A, lora_B, magnitude per module) that is
# 36 layers x 4 modules x 3 tensors = 432 tensors on Qwen3-4B, the seed adapter's recorded count.
SEED_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")


def _module_names(text: str) -> tuple[str, ...]:
    """``q_proj,v_proj`` -> ``("q_proj", "v_proj")``: the flag's comma list as the field's tuple."""
    return tuple(name for name in text.split(",") if name)


@dataclass
class SFTTrainConfig:
    """Supervised fine-tuning of a LoRA/DoRA adapter on a ``pdbgym train corpus`` folder.

    Optimisation (TRL ``SFTConfig`` underneath; AdamW, linear decay, no warmup):

    - ``epochs`` passes over the training slice, or ``max_steps`` optimizer steps when > 0 (wins).
    - ``effective_batch`` examples per optimizer step = ``micro_batch`` x gradient-accumulation steps x
      processes; accumulation is ``effective_batch // (micro_batch * processes)``.
    - ``lr``: peak learning rate of AdamW, decayed linearly to 0 over the run.
    - Loss: mean cross-entropy (nats/token) over ids whose corpus mask is 1 (model-generated ids);
      prompt, tool-output and template ids are labels -100 and carry no gradient.

    Adapter: ``rank`` r, ``lora_alpha`` (scale alpha / r; default 2r), ``use_dora`` (DoRA: magnitude
    vector per output row; off with ``--lora``) on ``target_modules``.

    Lengths: ``max_length`` ids per example (TRL truncates the end beyond it);
    ``max_tokens_per_example`` (0: off) cuts examples to that many ids before training (for small runs).

    Validation: ``val_fraction`` of the corpus's task ids (whole tasks, drawn with ``seed``) are held
    out; their mean loss is measured every ``eval_steps`` steps and the lowest-loss checkpoint is the
    adapter written (transformers' best-checkpoint tracking on ``eval_loss``, earliest step on a tie).
    The choice is recorded in the selection ledger as a selection on that slice.

    Checkpoints (``out/checkpoints/checkpoint-N``: adapter, optimizer, scheduler, RNG, trainer state)
    every ``save_steps`` optimizer steps (0: every ``eval_steps``), the latest and the best kept;
    ``eval_steps`` must be a multiple of ``save_steps`` so that every evaluated step has its checkpoint.
    ``resume`` continues a killed run from its last complete checkpoint; ``restart`` deletes a previous
    run's checkpoints, logs and adapter in ``out`` and starts over. Without either, an ``out`` holding a
    run is refused. ``tensorboard``: event files in ``out/tensorboard``.

    Memory against speed (each needs ``gradient_checkpointing``, which recomputes every decoder layer's
    activations in the backward pass): ``recompute_every`` N recomputes one decoder layer in N and keeps
    the others' activations (transformers' ``every_n_layers``); ``selective_recompute`` keeps each
    checkpointed layer's attention output instead of recomputing it (TRL's selective activation
    checkpointing). On one H200 at 16k tokens (Qwen3-4B shape, DoRA r24; docs/benchmarks.md): off 50.3%
    MFU at 106.8 GiB, every layer 37.6% at 14.3 GiB, selective 39.9% at 18.8 GiB, every 2nd 42.9% at
    59.3 GiB, every 3rd 45.2% at 75.2 GiB.
    """

    base: str = documented(help="'embedded', a HF model folder, or an adapter-store reference")
    data: Path = documented(help="Corpus folder (pdbgym train corpus)")
    out: Path = documented(help="Run folder: checkpoints/, adapter/, metrics.jsonl, report")
    seed: int = documented(42, "Seed of init, shuffling and the held-out slice")
    rank: int = documented(24, "LoRA/DoRA rank r")
    lora_alpha: int | None = documented(None, "alpha (scale alpha/r); default 2r")
    use_dora: bool = documented(True, "Plain LoRA instead of DoRA", flag="--lora", negates=True)
    target_modules: tuple[str, ...] = documented(SEED_TARGET_MODULES, "Comma-separated module names",
                                                 text=(",".join, _module_names))
    epochs: float = documented(4.0, "Passes over the training slice")
    lr: float = documented(1e-4, "Peak AdamW learning rate (linear decay to 0)")
    effective_batch: int = documented(8, "Examples per optimizer step")
    micro_batch: int = documented(1, "Examples per forward pass")
    max_length: int = documented(16384, "Most ids per example (the end is cut)")
    max_steps: int = documented(0, "Stop after this many optimizer steps (0: epochs decide)")
    max_tokens_per_example: int = documented(0, "Cut examples to this many ids first (0: off)")
    val_fraction: float = documented(0.1, "Share of task ids held out for validation loss")
    eval_steps: int = documented(10, "Validation loss every N steps")
    save_steps: int = documented(0, "A checkpoint every N steps (0: every --eval-steps); must divide --eval-steps")
    gradient_checkpointing: bool = documented(False, "Recompute activations in backward")
    recompute_every: int = documented(1, "With --gradient-checkpointing: recompute one decoder layer in N, keep the "
                                         "rest (faster, more memory)")
    selective_recompute: bool = documented(False, "With --gradient-checkpointing: keep attention outputs instead of "
                                                  "recomputing them")
    packing: bool = documented(False, "Pack examples padding-free (TRL bfd packing)")
    device: str = documented("auto", "auto, cpu, cuda, cuda:N")
    name: str | None = documented(None, "Store name of the adapter (default: the out folder's name)")
    store: Path | None = documented(None, "Adapter store root (default $PDBGYM_HOME/adapters)")
    ledger: Path | None = documented(None, "Selection ledger (default $PDBGYM_HOME/selection-ledger.jsonl)")
    report: bool = documented(False, "Write training_report.html/.md with loss curves")
    tensorboard: bool = documented(False, "Also log to TensorBoard: event files in OUT/tensorboard")
    register: bool = documented(True, "Register the adapter in the store with its parent")
    resume: bool = documented(False, "Continue the killed run in --out from its last checkpoint", flag="--resume")
    restart: bool = documented(False, "Delete the run in --out and start over", flag="--restart")
    extra: dict[str, object] = documented(help="TRL SFTConfig fields, passed as given (library callers only)",
                                       factory=dict, cli=False)

    @property
    def checkpoint_every(self) -> int:
        """Optimizer steps between checkpoints."""
        return self.save_steps if self.save_steps > 0 else self.eval_steps

    @property
    def alpha(self) -> int:
        return self.lora_alpha if self.lora_alpha is not None else 2 * self.rank

    def recipe(self) -> dict[str, JSONValue]:
        """The recipe recorded beside the adapter and in the store (store field names where they exist)."""
        data = asdict(self)
        for key in ("base", "data", "out", "store", "ledger", "report", "tensorboard", "register", "device",
                    "save_steps", "resume", "restart"):
            data.pop(key)
        data["target_modules"] = list(self.target_modules)
        data["lora_alpha"] = self.alpha
        data["context"] = self.max_length
        return data
