"""Adapter-store references used where a model is: resolve the lineage, merge the stack in memory.

``load_stacked_model(ref)`` loads the chain's base from its registered folder (its weights re-hashed
against the base's id), then, base first, loads each stored adapter with PEFT and merges it
(``PeftModel.from_pretrained(model, layer).merge_and_unload()``): exactly the weights the top adapter
was trained against, plus its own delta. A chain with a missing or changed layer is refused, never
merged around. The tokenizer is the base folder's. Base and tokenizer are read by the one model loader
(``pdbgym.modelload``).

``StoreLineage`` is how every layer below the store reaches it: the loader's ``ModelLineage``, handed to
``load_model`` by a trainer or registered once (``register_store_refs``) so ``--policy``, ``--arm`` and
``--student`` take store names.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pdbgym.adapters.errors import AdapterError, LineageError
from pdbgym.adapters.fingerprint import weights_hash
from pdbgym.adapters.merge import MANIFEST_FILE, read_manifest
from pdbgym.adapters.operations import lookup, merge_ref, resolve_parent, stack_layers
from pdbgym.adapters.peft_format import is_adapter_folder
from pdbgym.adapters.store import Store
from pdbgym.home import human, size_of
from pdbgym.modelload import DtypeSpec, LoadedModel, load_causal_lm, load_tokenizer, register_lineage
from pdbgym.paths import pdbgym_home
from pdbgym.versions import require

if TYPE_CHECKING:  # annotations only: torch and transformers load with a model
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class StackedModel:
    """A model built from a store reference: the merged model, its tokenizer, the chain's ids (base first)."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    node_id: str
    chain: list[str]
    base_path: Path


def is_store_ref(text: str, store: Store | None = None) -> bool:
    """True when ``text`` names an artifact of the store (a name, or a unique hash prefix) and is not a path."""
    if not text or Path(text).expanduser().exists() or text.startswith(("http://", "https://")):
        return False
    store = store or Store()
    if not (store.root / "nodes").is_dir():
        return False
    try:
        store.resolve(text)
    except AdapterError:
        return False
    return True


def resolve_chain(ref: str, store: Store | None = None) -> tuple[Store, str, list[str], Path]:
    """(store, node id, chain ids base first, base folder) of a servable reference; refuses broken lineage."""
    store = store or Store()
    node_id = store.resolve(ref)
    chain = store.lineage(node_id)
    if not chain.servable:
        raise LineageError(f"{store.label(node_id)} cannot be loaded: " + " ".join(chain.problems))
    base = chain.layers[0].record
    assert base is not None  # servable chains end in a stored base
    if base["kind"] != "model":
        raise LineageError(f"the chain of {store.label(node_id)} starts at {store.label(base['id'])}, an adapter with "
                           "no parent; register the base it was trained against")
    return store, node_id, [layer.node_id for layer in chain.layers], Path(base["model"]["path"])


def load_stacked_model(ref: str, store: Store | None = None, device: str = "cpu", dtype: DtypeSpec = None,
                       verify_base: bool = True) -> StackedModel:
    """The merged model of ``ref``'s whole chain (see the module docstring), in eval mode on ``device``.

    ``verify_base`` re-hashes the base folder's weights against the id the store recorded (a base
    changed in place at the same file sizes would otherwise be merged onto silently)."""
    require("torch", "transformers", "peft")
    from peft import PeftModel  # optional: peft (pdbgym[train])

    store, node_id, chain, base_path = resolve_chain(ref, store)
    if verify_base and weights_hash(base_path) != chain[0]:
        raise LineageError(f"the base folder {base_path} no longer holds the weights {chain[0][:12]} the store "
                           f"recorded for {store.label(chain[0])}; restore it or register the base again")
    layers = stack_layers(store, store.lineage(node_id))  # re-hashes each stored adapter copy
    model = load_causal_lm(base_path, device, dtype)
    for layer in layers:
        model = PeftModel.from_pretrained(model, str(store.object_dir(layer.node_id))).merge_and_unload()
    tokenizer = load_tokenizer(base_path)
    return StackedModel(model.eval(), tokenizer, node_id, chain, base_path)


def materialize_ref(ref: str, store: Store | None = None) -> Path:
    """A model folder holding ``ref``'s merged chain: ``$PDBGYM_HOME/merged/<id>``, merged (lineage-checked,
    streamed, hash-verified by ``pdbgym adapters merge``) on first use and reused while its manifest and
    the store's record of it agree. A base reference is its registered folder."""
    store = store or Store()
    node_id = store.resolve(ref)
    record = store.get(node_id)
    if record["kind"] == "model":
        resolve_chain(node_id, store)  # refuses a base whose files went missing
        return Path(record["model"]["path"])
    resolve_chain(node_id, store)  # a broken lineage is refused even when an old merge is on disk
    target = pdbgym_home() / "merged" / node_id
    if (target / MANIFEST_FILE).is_file():
        manifest = read_manifest(target)
        recorded = {m["weights_hash"] for m in record.get("materializations", []) if m.get("path") == str(target.resolve())}
        if manifest.get("target") == node_id and manifest.get("weights_hash") in recorded:
            return target
    if target.exists():  # our own cache folder, left by a merge that no longer matches the store
        shutil.rmtree(target)
    merge_ref(store, node_id, target)
    return target


class StageCopies:
    """The merged model folders (``$PDBGYM_HOME/merged/<id>``) one stage needs for its own episodes: made
    (or reused) by :meth:`folder`, removed by :meth:`remove` once the stage is done. They are a cache
    ``materialize_ref`` re-merges from the store when a later use asks, so nothing is lost; a base's own
    registered folder is never one of them."""

    def __init__(self, store: Store | None = None) -> None:
        self.store = store or Store()
        self.paths: list[Path] = []

    def folder(self, ref: str) -> Path:
        """``materialize_ref(ref)``, remembered for :meth:`remove` when it is a merged copy."""
        path = materialize_ref(ref, self.store)
        if path.parent == pdbgym_home() / "merged" and path not in self.paths:
            self.paths.append(path)
        return path

    def remove(self) -> str:
        """Remove the copies; one line saying what they were, where and how big ('' when there were none)."""
        if not self.paths:
            return ""
        sizes = {path: size_of(path) for path in self.paths if path.exists()}
        for path in sizes:
            shutil.rmtree(path)
        each = ", ".join(f"{self.store.label(path.name)} {human(size)}" for path, size in sizes.items())
        copies = "copy" if len(sizes) == 1 else "copies"
        self.paths = []
        return (f"{len(sizes)} merged model {copies} written to {pdbgym_home() / 'merged'} for this stage "
                f"({human(sum(sizes.values()))}: {each}), removed after it (re-merged from the store when used)")


class StoreLineage:
    """An adapter store as the model loader's lineage (``pdbgym.modelload.ModelLineage``): store names,
    hashes and registered adapter folders load as their stack merged in memory (``folder``: merged once into
    a model folder); a model folder's parent id is its weights' id, the folder registered as a base when new
    (or the stack a merged folder holds). ``store`` None: the default store, found when asked (so it
    follows ``$PDBGYM_HOME``)."""

    def __init__(self, store: Store | None = None) -> None:
        self._store = store

    @property
    def store(self) -> Store:
        return self._store if self._store is not None else Store()

    @property
    def where(self) -> str:
        return f"the adapter store at {self.store.root}"

    def claims(self, ref: str) -> bool:
        path = Path(ref).expanduser()
        if path.exists():
            return path.is_dir() and is_adapter_folder(path)
        return is_store_ref(ref, self.store)

    def load(self, ref: str, device: str, dtype: torch.dtype | Literal["auto"]) -> LoadedModel:
        node_id = lookup(self.store, ref)  # an unregistered adapter folder is refused here, with the register command
        stacked = load_stacked_model(node_id, self.store, device, dtype)
        return LoadedModel(stacked.model, stacked.tokenizer, stacked.node_id, self.store.label(node_id), None)

    def folder(self, ref: str) -> Path:
        return materialize_ref(ref, self.store)

    def parent_of(self, folder: Path) -> str:
        if not folder.is_dir():
            raise AdapterError(f"{folder} is a single file; the adapter store records bases as Hugging Face model "
                               "folders: give the folder (config.json + weights), 'embedded', or a store reference")
        return resolve_parent(self.store, str(folder), [])


_REGISTERED: dict[str | None, StoreLineage] = {}


def register_store_refs(store_root: Path | None = None) -> None:
    """Let ``--policy``, ``--arm NAME=REF`` and ``--student`` take names and hashes of this store
    (default: ``$PDBGYM_HOME/adapters``), through ``pdbgym.modelload.register_lineage``. Registering one
    store twice is a no-op."""
    key = str(store_root) if store_root is not None else None
    if key not in _REGISTERED:
        _REGISTERED[key] = StoreLineage(Store(store_root) if store_root is not None else None)
    register_lineage(_REGISTERED[key])
