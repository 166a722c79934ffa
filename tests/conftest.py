"""Shared fixtures: a tiny real task folder (a calculator whose sub() adds), the embedded tokenizer and a
tiny random-weight Llama over its vocabulary."""

import os

import pytest

from modelfixtures import save_tiny_llama
from taskfixtures import make_task

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def tiny_task(tmp_path):
    from pdbgym.tasks.model import load_task

    return load_task(make_task(tmp_path / "task"))


@pytest.fixture(scope="session")
def smol_tokenizer():
    from pdbgym.agent.backends.embedded import load_embedded_tokenizer

    return load_embedded_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smol_tokenizer):
    """A random-weight 1-layer Llama with SmolLM2's vocabulary, saved as a normal HF folder."""
    return save_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), smol_tokenizer)
