"""What ``--policy`` names, as a picklable spec, and how each worker process builds its turn source.

``scripted`` (the reference-patch policy), ``human`` (a person at the terminal), ``embedded``
(SmolLM2-135M-Instruct), a local model folder, or a server URL (``http://host:port``: SGLang's
``/generate`` when the server has it, else OpenAI chat completions); strings are classified by
``pdbgym.policyname``. Model backends are built once per process and reused across episodes.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from pdbgym.agent.backends.base import Backend, BackendError, SamplingParams
from pdbgym.agent.backends.embedded import load_embedded_backend, load_embedded_tokenizer
from pdbgym.agent.backends.hf import HFBackend, forget_model, loaded_models
from pdbgym.agent.backends.http import ServerUnreachableError, request_json
from pdbgym.agent.backends.openai_text import connect_chat
from pdbgym.agent.backends.sglang import SGLangBackend
from pdbgym.agent.constrained import constrain
from pdbgym.agent.human import HumanPolicy
from pdbgym.agent.policy import Policy
from pdbgym.agent.room import check_context_room
from pdbgym.agent.scripted import ScriptedPolicy
from pdbgym.agent.toolcalls import FORMATS, detect_format
from pdbgym.agent.turns import ActionPolicyTurns, ModelTurns, TurnSource
from pdbgym.engine.shared import release_engine
from pdbgym.modelload import ModelLoadError, is_model_ref, load_tokenizer, model_path
from pdbgym.policyname import (
    ACTION_POLICIES,
    CONSTRAINED_PREFIX,
    POLICY_CHOICES,
    PolicyKind,
    policy_kind,
    runs_in_process,
    split_constrained,
)
from pdbgym.tasks.model import Task

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedTokenizerBase

SERVER_APIS = ("auto", "chat", "sglang")
_BACKENDS: dict[PolicySpec, Backend] = {}
_TOKENIZERS: dict[str, PreTrainedTokenizerBase] = {}
_RELEASE_LOCK = threading.Lock()
_OPEN_BLOCKS = [0]  # models_released_after blocks open in this process
_PENDING: dict[tuple[str, str], Any] = {}  # what the blocks ended so far loaded, released with the last


@dataclass(frozen=True)
class PolicySpec:
    """``kind`` is ``scripted``, ``human``, ``embedded``, ``path`` or ``url``; ``target`` the path or URL.

    ``tokenizer`` (``embedded`` or a folder) tokenizes action policies and server conversations.
    ``api`` picks the server protocol; ``logprob_mode`` states what a chat server's log-probs are.
    """

    kind: PolicyKind
    target: str = ""
    tokenizer: str = "embedded"
    api: str = "auto"
    logprob_mode: str = "raw"
    device: str = "cpu"
    tool_format: str | None = None
    constrained: bool = False  # grammar-constrained tool calls (``constrained:MODEL``; local models only)

    @property
    def generates_tokens(self) -> bool:
        return self.kind not in ACTION_POLICIES

    @property
    def in_process(self) -> bool:
        """A local model: its episodes run one at a time in the process that loaded it."""
        return runs_in_process(self.kind)


def parse_policy(text: str, *, tokenizer: str = PolicySpec.tokenizer, api: str = PolicySpec.api,
                 logprob_mode: str = PolicySpec.logprob_mode, device: str = PolicySpec.device,
                 tool_format: str | None = PolicySpec.tool_format) -> PolicySpec:
    """A spec from a ``--policy`` value, with ``PolicySpec``'s other fields as given; a ``BackendError`` that
    lists the choices otherwise."""
    text, constrained = split_constrained(text)
    if constrained and not runs_in_process(policy_kind(text)):
        raise BackendError(f"{CONSTRAINED_PREFIX}{text}: constrained tool calls need a local model "
                           "('embedded' or a model folder); a server applies its own structured outputs")
    kind = policy_kind(text)

    def spec(target: str = "") -> PolicySpec:
        return PolicySpec(kind=kind, target=target, tokenizer=tokenizer, api=api, logprob_mode=logprob_mode,
                          device=device, tool_format=tool_format, constrained=constrained)

    if kind == "url":
        return spec(text)
    if kind == "path":
        if is_model_ref(text):  # an adapter-store name: its merged lineage, as a folder
            return spec(str(model_path(text)))
        if not Path(text).expanduser().exists():
            raise BackendError(f"--policy {text!r} is not {POLICY_CHOICES}")
        return spec(str(Path(text).expanduser().resolve()))
    return spec()


def tokenizer_named(name: str) -> PreTrainedTokenizerBase:
    """A tokenizer by name (``embedded``: the copy shipped with pdbgym, or a folder), loaded once per
    process by the one tokenizer reader (``pdbgym.modelload.load_tokenizer``)."""
    if name not in _TOKENIZERS:
        _TOKENIZERS[name] = _read_tokenizer(name)
    return _TOKENIZERS[name]


def _read_tokenizer(name: str) -> PreTrainedTokenizerBase:
    if name == "embedded":
        return load_embedded_tokenizer()
    folder = Path(name).expanduser()
    if not folder.is_dir():
        raise BackendError(f"tokenizer folder {folder} does not exist; pass --tokenizer embedded or a folder")
    try:
        return load_tokenizer(folder)
    except ModelLoadError as exc:
        raise BackendError(str(exc)) from exc


def build_backend(spec: PolicySpec) -> Backend:
    """The spec's model backend, built (and checked) once per process."""
    if spec in _BACKENDS:
        return _BACKENDS[spec]
    if spec.kind == "embedded":
        backend: Backend = load_embedded_backend(spec.device)
    elif spec.kind == "path":
        backend = HFBackend.from_path(spec.target, spec.device)
    elif spec.kind == "url":
        backend = _connect(spec)
    else:
        raise BackendError(f"policy kind {spec.kind!r} has no model backend")
    _BACKENDS[spec] = backend
    return backend


@contextmanager
def models_released_after(keep_cpu: bool = True) -> Iterator[None]:
    """Local models that this block loads into this process are released when it ends: their backends
    and loaded copies forgotten, their shared engines closed (with their kept caches), and freed device
    memory handed back. A pipeline's stages each play their own models (SFT candidates, GRPO's gates, the
    evaluated arms); every one kept for the process's life, with its engine's static caches, filled an
    80 GB GPU within one experiment. Only models first loaded inside the block are released: one loaded
    before may have other users. ``keep_cpu``: models on the CPU stay loaded (a later campaign of the same
    model reuses them; host memory holds them). Blocks open at once in one process (campaigns in threads)
    release together, when the last ends: one's models may be in another's use."""
    before = loaded_models()
    with _RELEASE_LOCK:
        _OPEN_BLOCKS[0] += 1
    try:
        yield
    finally:
        with _RELEASE_LOCK:
            _OPEN_BLOCKS[0] -= 1
            _PENDING.update({key: model for key, model in loaded_models().items() if key not in before
                             and not (keep_cpu and next(model.parameters()).device.type == "cpu")})
            fresh = list(_PENDING.values()) if not _OPEN_BLOCKS[0] else []
            if fresh:
                _PENDING.clear()
        if fresh:
            _release(fresh)


def _release(models: list[Any]) -> None:
    cuda = any(next(model.parameters()).device.type == "cuda" for model in models)
    for model in models:
        for spec in [spec for spec, backend in _BACKENDS.items() if getattr(backend, "model", None) is model]:
            del _BACKENDS[spec]
        forget_model(model)
        release_engine(model)
    models.clear()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()  # to the device: the next stage, or another process on the GPU, may need it


def _connect(spec: PolicySpec) -> Backend:
    if spec.api not in SERVER_APIS:
        raise BackendError(f"--api must be one of {SERVER_APIS}, got {spec.api!r}")
    tokenizer = tokenizer_named(spec.tokenizer)
    api = spec.api
    if api == "auto":
        try:
            request_json(spec.target.rstrip("/").removesuffix("/v1") + "/get_model_info", timeout_s=10)
            api = "sglang"
        except ServerUnreachableError:
            raise
        except BackendError:  # it answers, but not SGLang's /get_model_info
            api = "chat"
    if api == "sglang":
        return SGLangBackend.connect(spec.target, tokenizer)
    return connect_chat(spec.target, tokenizer, spec.logprob_mode)  # text-only servers fall back


def tool_format_for(spec: PolicySpec, tokenizer: PreTrainedTokenizerBase) -> str:
    fmt = spec.tool_format or detect_format(getattr(tokenizer, "chat_template", None))
    if fmt not in FORMATS:
        raise BackendError(f"--tool-format must be one of {FORMATS}, got {fmt!r}")
    return fmt


def build_turns(spec: PolicySpec, params: SamplingParams) -> tuple[TurnSource, str]:
    """A fresh turn source for one episode and its tool-call format."""
    if spec.kind in ACTION_POLICIES:
        tokenizer = tokenizer_named(spec.tokenizer)
        fmt = tool_format_for(spec, tokenizer)
        return ActionPolicyTurns(_action_policy(spec.kind), tokenizer, fmt, spec.kind), fmt
    backend = build_backend(spec)
    fmt = tool_format_for(spec, backend.tokenizer)
    if spec.constrained:
        constrain(backend, fmt, params.max_new_tokens)
    return ModelTurns(backend, params), fmt


def check_policy(spec: PolicySpec, params: SamplingParams, tasks: Sequence[Task] = (),
                 max_context_tokens: int | None = None, label: str = "the policy") -> PreTrainedTokenizerBase:
    """Build now what every episode of ``spec`` builds with ``params``: the model or server connection, the
    tokenizer, the tool-call format and, for a constrained policy, its grammar at ``params.max_new_tokens``;
    with ``max_context_tokens``, check that the first prompt of each of ``tasks`` leaves room for a turn
    (``room.check_context_room``; ``label`` names the policy there).

    A setting that would fail each episode (a missing model, a tokenizer that does not load, a turn cap
    below the grammar's minimum, a context cap below the first prompt plus a turn) so fails once, before
    the first. Returns the policy's tokenizer.
    """
    turns, tool_format = build_turns(spec, params)
    if max_context_tokens is not None:
        turn_tokens = params.max_new_tokens if spec.generates_tokens else 0  # action policies write their turns
        check_context_room(turns.tokenizer, tool_format, tasks, max_context_tokens, turn_tokens, label)
    return turns.tokenizer


def _action_policy(kind: str) -> Policy:
    if kind == "human":
        return HumanPolicy()

    return ScriptedPolicy()
