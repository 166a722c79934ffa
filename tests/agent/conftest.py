"""Agent test fixtures: a backend over the tiny random Llama (tests/conftest.py) and a loopback server."""

import pytest


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir):
    from pdbgym.agent.backends.hf import HFBackend

    return HFBackend.from_path(tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_server(tiny_backend):
    from pdbgym.agent.testing_server import ModelServer

    with ModelServer(tiny_backend.model, tiny_backend.tokenizer, name="tiny-llama") as server:
        yield server
