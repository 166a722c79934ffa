"""Train test fixtures: the embedded tokenizer, tiny random Llamas over it, and record builders."""

from __future__ import annotations

import os

import pytest
from recordfixtures import save_tiny_llama

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def smol_tokenizer():
    from pdbgym.agent.backends.embedded import load_embedded_tokenizer

    return load_embedded_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smol_tokenizer)
