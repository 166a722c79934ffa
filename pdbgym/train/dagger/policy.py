"""The models of a DAgger run, student and teacher alike: a backend to generate with, its tokenizer and a
display label, loaded from an SGLang URL or through the one model loader (``pdbgym.modelload``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdbgym.adapters.stacked import StoreLineage
from pdbgym.adapters.store import Store
from pdbgym.agent.backends.hf import HFBackend
from pdbgym.agent.backends.sglang import SGLangBackend
from pdbgym.agent.policies import tokenizer_named
from pdbgym.modelload import EMBEDDED, EMBEDDED_NAME, load_model
from pdbgym.policyname import is_server_url
from pdbgym.train.dagger.config import DaggerConfig
from pdbgym.train.errors import DaggerError

if TYPE_CHECKING:  # annotations only: transformers loads with a tokenizer
    from transformers import PreTrainedTokenizerBase


@dataclass
class Policy:
    """A model to roll out or label with: its backend (``generate``), tokenizer and display label."""

    backend: HFBackend | SGLangBackend
    label: str

    @property
    def tokenizer(self) -> PreTrainedTokenizerBase:
        return self.backend.tokenizer


def load_policy(ref: str, config: DaggerConfig, device: str, name: str | None = None) -> Policy:
    """A backend for ``ref``: an SGLang URL, or a model through the one model loader (``pdbgym.modelload``:
    ``embedded``, a model folder, a name or hash in the run's adapter store, its stack merged in memory)."""
    if ref == "scripted":
        raise DaggerError("the scripted policy replays the task's reference fix whatever state it is in, so it "
                          "cannot label the student's states; give --teacher a model ('embedded', a folder, an "
                          "adapter-store reference) or an SGLang server URL")
    if is_server_url(ref):
        return Policy(SGLangBackend.connect(ref, tokenizer_named(config.tokenizer)), ref)
    loaded = load_model(ref, device, lineage=StoreLineage(Store(config.store)))
    if ref == EMBEDDED:
        return Policy(HFBackend(loaded.model, loaded.tokenizer, EMBEDDED_NAME), EMBEDDED)
    if loaded.path is None:  # a store reference: its label names the artifact
        return Policy(HFBackend(loaded.model, loaded.tokenizer, name or ref), loaded.label)
    return Policy(HFBackend(loaded.model, loaded.tokenizer, name or loaded.path.name), loaded.path.name)
