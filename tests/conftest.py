"""Shared fixtures: a tiny real task folder (a calculator whose sub() adds)."""

import pytest

from taskfixtures import make_task


@pytest.fixture
def tiny_task(tmp_path):
    from pdbgym.tasks.model import load_task

    return load_task(make_task(tmp_path / "task"))
