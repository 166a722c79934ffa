"""Local Hugging Face model backend (CPU or GPU): token ids in, sampled ids and log-probs out.

Every turn is a request to the model's shared ``pdbgym.engine.LocalEngine``, which batches the turns of
all episodes of the process that use the same model, and draws each id and its log-prob from the same
processed logits. Models are loaded once per process.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdbgym.agent.backends.base import (
    BackendError,
    Generation,
    GenerationRequest,
    SamplingParams,
    semantics_fields,
    stop_token_ids,
)
from pdbgym.agent.constrained import TurnMask, compile_constraint
from pdbgym.engine import EngineRequest, LocalEngine, engine_for
from pdbgym.modelload import ModelLoadError, load_model
from pdbgym.rollouts.record import LogprobSemantics

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_LOADED: dict[tuple[str, str], tuple[Any, Any]] = {}
_LOAD_LOCK = threading.Lock()


def load_model_and_tokenizer(path: str | Path, device: str = "cpu") -> tuple[Any, Any]:
    """Load (once per process) a causal LM and its tokenizer from a local folder, by the one model loader
    (``pdbgym.modelload``); a folder it refuses is a ``BackendError`` with the loader's message."""
    folder = Path(path).expanduser()
    key = (str(folder.resolve()), device)
    with _LOAD_LOCK:
        if key not in _LOADED:
            try:
                loaded = load_model(folder, device)
            except ModelLoadError as exc:
                raise BackendError(str(exc)) from exc
            _LOADED[key] = (loaded.model, loaded.tokenizer)
    return _LOADED[key]


def loaded_models() -> dict[tuple[str, str], Any]:
    """The models loaded once in this process, by (folder, device)."""
    with _LOAD_LOCK:
        return {key: model for key, (model, _) in _LOADED.items()}


def forget_model(model: Any) -> None:
    """Drop ``model`` from the loaded-once cache (the next load of its folder reads it again)."""
    with _LOAD_LOCK:
        for key in [key for key, (held, _) in _LOADED.items() if held is model]:
            del _LOADED[key]


class HFBackend:
    """A transformers model in this process, served by the model's shared ``LocalEngine``.

    ``constrained_format`` (a tool-call format) makes every turn one grammar-valid tool call of that
    format (``pdbgym.agent.constrained``); the records' semantics then say ``constrained``.
    ``engine``: the engine to use (default: the model's shared one, ``pdbgym.engine.engine_for``).
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str, logprob_mode: str = "tempered",
                 constrained_format: str | None = None, engine: LocalEngine | None = None):
        self.model = model
        self.constrained_format = constrained_format
        self.tokenizer = tokenizer
        self.name = name
        self.logprob_mode = logprob_mode
        self.stops = stop_token_ids(tokenizer, model)
        vocab_rows = model.get_input_embeddings().weight.shape[0]
        if vocab_rows < len(tokenizer):
            raise BackendError(f"model {name} has {vocab_rows} embedding rows but its tokenizer has "
                               f"{len(tokenizer)} tokens: tokenizer and weights do not belong together")
        self.engine = engine or engine_for(model, self.stops, pad_id(tokenizer))

    @classmethod
    def from_path(cls, path: str | Path, device: str = "cpu", constrained_format: str | None = None) -> HFBackend:
        model, tokenizer = load_model_and_tokenizer(path, device)
        return cls(model, tokenizer, name=Path(path).name, constrained_format=constrained_format)

    def semantics(self, params: SamplingParams) -> LogprobSemantics:
        fields = semantics_fields(self.logprob_mode, params.temperature, params.top_p)
        if self.constrained_format is not None:
            grammar = self._constraint(params.max_new_tokens).label
            return LogprobSemantics(engine=f"hf:{self.logprob_mode}", constrained=True, grammar=grammar, **fields)
        return LogprobSemantics(engine=f"hf:{self.logprob_mode}", **fields)

    def _constraint(self, max_new_tokens: int) -> Any:
        vocab = self.model.get_output_embeddings().weight.shape[0]
        return compile_constraint(self.tokenizer, vocab, self.stops, str(self.constrained_format), max_new_tokens)

    def engine_request(self, request: GenerationRequest) -> EngineRequest:
        """``request`` as the engine takes it (a fresh grammar state per turn when constrained)."""
        params = request.params
        mask = TurnMask(self._constraint(params.max_new_tokens)) if self.constrained_format is not None else None
        return EngineRequest(list(request.prompt_ids), params.max_new_tokens, params.temperature, params.top_p,
                             params.seed, self.logprob_mode, mask)

    async def generate(self, request: GenerationRequest) -> Generation:
        result = await asyncio.wrap_future(self.engine.submit(self.engine_request(request)))
        text = self.tokenizer.decode(result.ids, skip_special_tokens=False)
        return Generation(result.ids, result.logprobs, text, result.finish, model_seconds=result.model_seconds)

    async def aclose(self) -> None:
        return None


def pad_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The id padded rows are filled with: the tokenizer's pad token, else its eos, else 0."""
    for value in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if value is not None:
            return int(value)
    return 0
