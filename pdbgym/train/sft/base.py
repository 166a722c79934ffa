"""Where training starts: the device of this process and the base model, from a folder, the embedded model
or an adapter-store reference (its stack merged in memory), loaded by ``pdbgym.modelload`` with the store
as the lineage (``StoreLineage``). SFT, DAgger and GRPO start from it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pdbgym.adapters.operations import lookup, resolve_parent
from pdbgym.adapters.peft_format import is_adapter_folder
from pdbgym.adapters.stacked import is_store_ref, load_stacked_model
from pdbgym.modelload import LoadedModel, load_model
from pdbgym.train.errors import TrainError

BaseModel = LoadedModel
"""The model training starts from: weights, tokenizer, the store id of those exact weights (``parent_id``),
a label and the folder they came from (None for a stack merged in memory): ``pdbgym.modelload.LoadedModel``."""


def device_problem(device: str) -> str | None:
    """Why ``device`` names no device torch knows (``cpu``, ``cuda``, ``cuda:1``, ``mps``...; ``auto`` is
    pdbgym's), or None: checked when a command starts, not when its first model stage does."""
    import torch  # optional: torch (pdbgym[hf])

    if device == "auto":
        return None
    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        return f"--device {device!r} is not a device torch knows; use cpu, cuda, cuda:N, mps or auto"
    return None


def pick_device(device: str) -> str:
    """``auto``: this process's GPU (``cuda:LOCAL_RANK`` under accelerate/torchrun) when there is one, else cpu."""
    import torch  # optional: torch (pdbgym[hf])

    if device != "auto":
        return device
    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{os.environ['LOCAL_RANK']}" if "LOCAL_RANK" in os.environ else "cuda"


def world_size() -> int:
    """Training processes (accelerate / torchrun set WORLD_SIZE); 1 for a plain run."""
    return int(os.environ.get("WORLD_SIZE", "1"))


class StoreLineage:
    """An adapter store as the model loader's lineage (``pdbgym.modelload.ModelLineage``): store names,
    hashes and registered adapter folders load as their stack merged in memory; a model folder's parent id
    is its weights' id, the folder registered as a base when new (or the stack a merged folder holds)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.where = f"the adapter store at {store.root}"

    def claims(self, ref: str) -> bool:
        path = Path(ref).expanduser()
        if path.exists():
            return path.is_dir() and is_adapter_folder(path)
        return is_store_ref(ref, self.store)

    def load(self, ref: str, device: str, dtype: Any) -> LoadedModel:
        node_id = lookup(self.store, ref)  # an unregistered adapter folder is refused here, with the register command
        stacked = load_stacked_model(node_id, self.store, device, dtype)
        return LoadedModel(stacked.model, stacked.tokenizer, stacked.node_id, self.store.label(node_id), None)

    def parent_of(self, folder: Path) -> str:
        if not folder.is_dir():
            raise TrainError(f"{folder} is a single file; the adapter store records bases as Hugging Face model "
                             "folders: give the folder (config.json + weights), 'embedded', or a store reference")
        return resolve_parent(self.store, str(folder), [])


def resolve_base(ref: str, store: Any, device: str) -> BaseModel:
    """``embedded``, a HF model folder (registered as a base if new), a registered adapter folder, or a
    store reference (name / hash) whose whole chain is merged in memory: ``pdbgym.modelload.load_model``
    with this store as the lineage; ``parent_id`` is what the trained adapter records as its parent."""
    base = load_model(ref, device, lineage=StoreLineage(store), parent=True)
    if base.path is None:  # a stack merged in memory: PEFT wraps it for training
        base.model.train()
    return base
