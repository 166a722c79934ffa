"""Bad synthesis inputs are reported per source, never crash the run, and never leave a task behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from test_synth_fixtures import write_shop
from typer.testing import CliRunner

from pdbgym.tasks.synth.candidate import evaluate_candidate
from pdbgym.tasks.synth.commands import register
from pdbgym.tasks.synth.engine import SynthConfig, candidate_stream, synthesize_source
from pdbgym.tasks.synth.operators import enumerate_sites
from pdbgym.tasks.synth.project import prepare_project


def _synth(source: str, out: Path) -> str:
    report = synthesize_source(source, SynthConfig(out=out, baseline_runs=1, workers=1), lambda *a: None)
    assert not [p for p in out.iterdir() if not p.name.startswith(".")], "no task may be written"
    return report.error


def test_missing_folder_and_malformed_pypi_spec_are_reported(tmp_path: Path) -> None:
    assert "no such folder" in _synth(str(tmp_path / "nowhere"), tmp_path / "out1")
    assert "pypi:NAME==VERSION" in _synth("pypi:toolz", tmp_path / "out2")


def test_project_without_tests_is_reported(tmp_path: Path) -> None:
    project = write_shop(tmp_path, with_tests=False)
    assert "no test files" in _synth(str(project), tmp_path / "out")


@pytest.mark.slow
def test_project_whose_suite_does_not_pass_clean_is_reported(tmp_path: Path) -> None:
    project = write_shop(tmp_path, tests="def test_broken():\n    assert 1 == 2\n")
    assert "no test passes on the clean project" in _synth(str(project), tmp_path / "out")


def test_source_file_that_does_not_parse_yields_no_candidates(tmp_path: Path) -> None:
    project_dir = write_shop(tmp_path)
    (project_dir / "shop" / "legacy.py").write_text("def broken(:\n    return 1\n")
    project = prepare_project(str(project_dir), tmp_path / "work")
    assert "shop/legacy.py" in project.source_files
    stream = candidate_stream(project, seed=0, operators=None)
    assert stream and {s.file for s in stream} == {"shop/__init__.py"}


def test_candidate_order_is_seeded_and_interleaves_operators(tmp_path: Path) -> None:
    project = prepare_project(str(write_shop(tmp_path)), tmp_path / "work")
    first = [s.key for s in candidate_stream(project, 3, None)]
    assert first == [s.key for s in candidate_stream(project, 3, None)]
    assert first != [s.key for s in candidate_stream(project, 4, None)]
    assert sorted(first) == sorted(s.key for s in candidate_stream(project, 4, None))
    operators = [s.operator for s in candidate_stream(project, 3, None)]
    assert len(set(operators[:5])) == 5, "the head of the stream mixes operators"


def test_mutant_that_loops_forever_is_cut_and_rejected(tmp_path: Path) -> None:
    project = prepare_project(str(write_shop(tmp_path)), tmp_path / "work")
    source = (project.root / "shop/__init__.py").read_text()
    loop = next(s for s in enumerate_sites(source, "shop/__init__.py", ["removed_assignment"])
                if s.function == "count_up")
    (tmp_path / "scratch").mkdir()
    result = evaluate_candidate(str(project.root), str(tmp_path / "scratch"), loop,
                                ["tests/test_shop.py::test_count_up"], ["tests/test_shop.py::test_count_up"], 1.0)
    assert result.status == "timeout", result


def test_cli_reports_each_bad_source_and_exits_1_when_all_fail(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["synth", str(tmp_path / "missing"), "pypi:not a spec", "--out",
                                      str(tmp_path / "out"), "--json"])
    assert result.exit_code == 1
    reports = json.loads(result.stdout)
    assert [r["source"] for r in reports] == [str(tmp_path / "missing"), "pypi:not a spec"]
    assert all(r["error"] for r in reports)
    assert json.loads((tmp_path / "out" / "synth_report.json").read_text()) == reports


def test_state_of_another_project_with_the_same_folder_name_is_refused(tmp_path: Path) -> None:
    # /a/shop and /b/shop share OUT/.synth/shop and task ids; resuming one from the other's results is wrong
    project = write_shop(tmp_path)
    state = tmp_path / "out" / ".synth" / project.name / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"seed": 0, "select_tests": "covering", "origin": "/elsewhere/" + project.name,
                                 "tested": {}, "built": {}}))
    error = _synth(str(project), tmp_path / "out")
    assert "/elsewhere/" in error and "another --out" in error
