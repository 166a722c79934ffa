"""The clean-suite baseline of synthesis: which tests count as passing."""

from __future__ import annotations

from pathlib import Path

from pdbgym.tasks.synth.baseline import run_baseline
from pdbgym.tasks.synth.project import prepare_project

CLOCK_TESTS = '''import time

import pytest

from clock import double


@pytest.mark.parametrize("now", [time.strftime("%H:%M:%S")])
def test_collected_at(now):
    assert double(2) == 4 and now


def test_double():
    assert double(3) == 6
'''


def test_a_test_whose_id_holds_the_time_of_collection_is_flaky_not_passing(tmp_path: Path) -> None:
    """Its id differs between runs a second apart (marshmallow's datetime parameters): seen in one run only,
    it is flaky whichever run saw it, and a task never lists it."""
    root = tmp_path / "clock-project"
    (root / "clock").mkdir(parents=True)
    (root / "clock" / "__init__.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_clock.py").write_text(CLOCK_TESTS)
    workdir = tmp_path / "work"
    project = prepare_project(str(root), workdir)
    # Fresh interpreters: a fork server collects once and its forks keep that collection's ids.
    baseline = run_baseline(project, workdir, runs=3, per_test_timeout_s=10.0, use_fork_server=False)
    assert baseline.passing == ["tests/test_clock.py::test_double"]
    stamped = [node for node in baseline.flaky if "test_collected_at" in node]
    assert len(stamped) >= 2  # the first run's id and the last one's, a second later
