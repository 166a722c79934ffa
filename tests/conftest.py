"""Shared fixtures: a tiny real task folder (a calculator whose sub() adds), the embedded tokenizer and a
tiny random-weight Llama over its vocabulary; each session (each xdist worker) its own PDBGYM_HOME."""

import os

import pytest
from homefixtures import fresh_home

from modelfixtures import save_tiny_llama
from taskfixtures import make_task

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """pytest-xdist (controller): hand each worker the COLUMNS this run was started with."""
    node.workerinput["pdbgym_columns"] = os.environ.get("COLUMNS")


def pytest_configure(config):
    """An xdist worker starts with COLUMNS=80 set; a rich Console made at import time (the CLI's) would keep
    that width for good, so a worker takes back the COLUMNS of the run itself, as a plain pytest run has it."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    # The workers share the cores: torch (and BLAS) in each takes its share instead of every core, which
    # oversubscribes them (a subprocess a test starts inherits the share through the environment).
    share = max(1, (os.cpu_count() or 1) // int(workerinput.get("workercount", 1)))
    os.environ.setdefault("OMP_NUM_THREADS", str(share))
    columns = workerinput.get("pdbgym_columns")
    if columns is None:
        os.environ.pop("COLUMNS", None)
    else:
        os.environ["COLUMNS"] = columns


@pytest.fixture(scope="session", autouse=True)
def session_home(tmp_path_factory):
    """A PDBGYM_HOME of this session's own, so no test writes the user's ~/.pdbgym (store, ledger, merged
    folders) and two xdist workers never share one; the model caches are the user's (homefixtures)."""
    with pytest.MonkeyPatch.context() as patch:
        home = fresh_home(tmp_path_factory.mktemp("pdbgym-home"))
        patch.setenv("PDBGYM_HOME", str(home))
        yield home


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
