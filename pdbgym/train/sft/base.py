"""Where training starts: the base model, from a folder, the embedded model or an adapter-store reference
(its stack merged in memory), loaded by ``pdbgym.modelload`` with the store as the lineage
(``pdbgym.adapters.stacked.StoreLineage``), and the number of training processes. SFT, DAgger and GRPO
start from it; the device is ``pdbgym.modelload.pick_device``'s."""

from __future__ import annotations

import os

from pdbgym.adapters.stacked import StoreLineage
from pdbgym.adapters.store import Store
from pdbgym.modelload import LoadedModel, load_model

BaseModel = LoadedModel
"""The model training starts from: weights, tokenizer, the store id of those exact weights (``parent_id``),
a label and the folder they came from (None for a stack merged in memory): ``pdbgym.modelload.LoadedModel``."""


def world_size() -> int:
    """Training processes (accelerate / torchrun set WORLD_SIZE); 1 for a plain run."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def resolve_base(ref: str, store: Store, device: str) -> BaseModel:
    """``embedded``, a HF model folder (registered as a base if new), a registered adapter folder, or a
    store reference (name / hash) whose whole chain is merged in memory: ``pdbgym.modelload.load_model``
    with this store as the lineage; ``parent_id`` is what the trained adapter records as its parent."""
    base = load_model(ref, device, lineage=StoreLineage(store), parent=True)
    if base.path is None:  # a stack merged in memory: PEFT wraps it for training
        base.model.train()
    return base
