"""What ``--policy`` names, as a picklable spec, and how each worker process builds it.

``scripted`` (the reference-patch policy), ``embedded`` (SmolLM2-135M-Instruct), a local model folder,
or a server URL (``http://host:port``: SGLang's ``/generate`` when the server has it, else OpenAI chat
completions). Model backends are built once per process and reused across episodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdbgym.agent.backends.base import Backend, BackendError, SamplingParams
from pdbgym.agent.toolcalls import FORMATS, detect_format
from pdbgym.agent.turns import ActionPolicyTurns, ModelTurns, TurnSource

ACTION_POLICIES = ("scripted",)
SERVER_APIS = ("auto", "chat", "sglang")
_BACKENDS: dict[PolicySpec, Backend] = {}
_TOKENIZERS: dict[str, Any] = {}


@dataclass(frozen=True)
class PolicySpec:
    """``kind`` is ``scripted``, ``embedded``, ``path`` or ``url``; ``target`` the path or URL.

    ``tokenizer`` (``embedded`` or a folder) tokenizes action policies and server conversations.
    ``api`` picks the server protocol; ``logprob_mode`` states what a chat server's log-probs are.
    """

    kind: str
    target: str = ""
    tokenizer: str = "embedded"
    api: str = "auto"
    logprob_mode: str = "raw"
    device: str = "cpu"
    tool_format: str | None = None

    @property
    def generates_tokens(self) -> bool:
        return self.kind not in ACTION_POLICIES


def parse_policy(text: str, **options: Any) -> PolicySpec:
    """A spec from a ``--policy`` value; a ``BackendError`` that lists the choices otherwise."""
    if text in ACTION_POLICIES or text == "embedded":
        return PolicySpec(kind=text, **options)
    if text.startswith(("http://", "https://")):
        return PolicySpec(kind="url", target=text, **options)
    if Path(text).expanduser().exists():
        return PolicySpec(kind="path", target=str(Path(text).expanduser().resolve()), **options)
    raise BackendError(f"--policy {text!r} is not 'scripted', 'embedded', an http(s):// server URL, or an "
                       "existing model folder")


def load_tokenizer(name: str) -> Any:
    """A tokenizer by name (``embedded`` or a folder), loaded once per process."""
    if name not in _TOKENIZERS:
        _TOKENIZERS[name] = _load_tokenizer(name)
    return _TOKENIZERS[name]


def _load_tokenizer(name: str) -> Any:
    if name == "embedded":
        from pdbgym.agent.backends.embedded import load_embedded_tokenizer

        return load_embedded_tokenizer()
    folder = Path(name).expanduser()
    if not folder.is_dir():
        raise BackendError(f"tokenizer folder {folder} does not exist; pass --tokenizer embedded or a folder")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def build_backend(spec: PolicySpec) -> Backend:
    """The spec's model backend, built (and checked) once per process."""
    if spec in _BACKENDS:
        return _BACKENDS[spec]
    if spec.kind == "embedded":
        from pdbgym.agent.backends.embedded import load_embedded_backend

        backend: Backend = load_embedded_backend(spec.device)
    elif spec.kind == "path":
        from pdbgym.agent.backends.hf import HFBackend

        backend = HFBackend.from_path(spec.target, spec.device)
    elif spec.kind == "url":
        backend = _connect(spec)
    else:
        raise BackendError(f"policy kind {spec.kind!r} has no model backend")
    _BACKENDS[spec] = backend
    return backend


def _connect(spec: PolicySpec) -> Backend:
    from pdbgym.agent.backends.http import ServerUnreachableError, request_json
    from pdbgym.agent.backends.openai_text import connect_chat
    from pdbgym.agent.backends.sglang import SGLangBackend

    if spec.api not in SERVER_APIS:
        raise BackendError(f"--api must be one of {SERVER_APIS}, got {spec.api!r}")
    tokenizer = load_tokenizer(spec.tokenizer)
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


def tool_format_for(spec: PolicySpec, tokenizer: Any) -> str:
    fmt = spec.tool_format or detect_format(getattr(tokenizer, "chat_template", None))
    if fmt not in FORMATS:
        raise BackendError(f"--tool-format must be one of {FORMATS}, got {fmt!r}")
    return fmt


def build_turns(spec: PolicySpec, params: SamplingParams) -> tuple[TurnSource, str]:
    """A fresh turn source for one episode and its tool-call format."""
    if spec.kind == "scripted":
        from pdbgym.agent.scripted import ScriptedPolicy

        tokenizer = load_tokenizer(spec.tokenizer)
        fmt = tool_format_for(spec, tokenizer)
        return ActionPolicyTurns(ScriptedPolicy(), tokenizer, fmt, "scripted"), fmt
    backend = build_backend(spec)
    return ModelTurns(backend, params), tool_format_for(spec, backend.tokenizer)

