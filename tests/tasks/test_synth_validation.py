"""Validation of built tasks from their files: exact test selection, the per-layout clean run, and the
covering path's narrower buggy run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_synth_fixtures import write_shop

from pdbgym.tasks.synth import candidate
from pdbgym.tasks.synth.candidate import build_task, evaluate_candidate, layout_problem
from pdbgym.tasks.synth.operators import enumerate_sites
from pdbgym.tasks.synth.runner import run_pytest

pytestmark = pytest.mark.slow

PREFIXES = """\
def test_merge():
    assert True


def test_merge_with():
    assert False


def test_merge_with_more():
    assert True
"""


def test_named_tests_run_exactly_never_tests_whose_ids_they_prefix(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_prefix.py").write_text(PREFIXES)
    chosen = ["tests/test_prefix.py::test_merge", "tests/test_prefix.py::test_merge_with_more"]
    run = run_pytest(tmp_path, chosen, per_test_timeout_s=5.0, wall_time_s=60.0, server_root=tmp_path)
    assert run.outcomes == {node: "passed" for node in chosen}


def _site(project: Path, function: str, operator: str):
    source = (project / "shop" / "__init__.py").read_text()
    return next(s for s in enumerate_sites(source, "shop/__init__.py") if s.function == function
                and s.operator == operator)


def _passing(project: Path) -> list[str]:
    run = run_pytest(project, None, per_test_timeout_s=5.0, wall_time_s=60.0, write_bytecode=True)
    return sorted(node for node, outcome in run.outcomes.items() if outcome == "passed")


def _failing(project: Path, site, tests: list[str]) -> list[str]:
    result = evaluate_candidate(str(project), str(project.parent), site, tests, tests, 5.0)
    assert result.status == "flipped", result
    return result.failing


def test_covering_validation_runs_the_reaching_tests_and_each_layout_once(tmp_path: Path, monkeypatch) -> None:
    project = write_shop(tmp_path)
    passing = _passing(project)
    clamp_tests = [t for t in passing if "clamp" in t]
    site = _site(project, "clamp", "inverted_if")
    failing = _failing(project, site, clamp_tests)
    ran: list[list[str]] = []
    real = candidate.run_pytest

    def recording(workspace, node_ids, **kwargs):
        ran.append(sorted(node_ids))
        return real(workspace, node_ids, **kwargs)

    monkeypatch.setattr(candidate, "run_pytest", recording)
    monkeypatch.setattr(candidate, "_layouts", {})
    for _ in range(2):
        result = build_task(str(project), "shop", "shop", str(tmp_path / "staging"), site, failing, passing, 5.0,
                            str(tmp_path), reaching=clamp_tests)
        assert result.status == "kept", result.reason
        shutil.rmtree(tmp_path / "staging")
    assert ran.count(passing) == 1, "the clean layout of one test file is run once, however many tasks share it"
    assert [r for r in ran if r != passing] == [clamp_tests] * 2, "the buggy repo runs only what reaches clamp"


def test_a_test_file_that_needs_a_file_the_task_leaves_out_is_invalid(tmp_path: Path) -> None:
    project = write_shop(tmp_path)
    (project / "tests" / "test_helpers.py").write_text("LIMIT = 10\n\n\ndef test_limit():\n    assert LIMIT == 10\n")
    test_file = project / "tests" / "test_shop.py"
    test_file.write_text("from tests.test_helpers import LIMIT\n" + test_file.read_text().replace(
        "clamp(50, 0, 10) == 10", "clamp(50, 0, LIMIT) == LIMIT"))
    (project / "tests" / "__init__.py").write_text("")
    passing = _passing(project)
    shop_tests = [t for t in passing if t.startswith("tests/test_shop.py")]
    problem = layout_problem(project, ["tests/test_shop.py"], shop_tests, 5.0, tmp_path)
    assert "do not pass" in problem
    site = _site(project, "clamp", "inverted_if")
    reaching = [t for t in shop_tests if "clamp" in t]
    failing = _failing(project, site, reaching)
    covering = build_task(str(project), "shop", "shop", str(tmp_path / "staging"), site, failing, passing, 5.0,
                          str(tmp_path), reaching=reaching)
    assert covering.status == "invalid" and "do not pass" in covering.reason
    whole = build_task(str(project), "shop", "shop", str(tmp_path / "staging"), site, failing, passing, 5.0,
                       str(tmp_path))
    assert whole.status == "invalid", "the whole-file run on the buggy repo sees it too"
    assert not list((tmp_path / "staging").iterdir()), "an invalid task leaves no folder behind"
