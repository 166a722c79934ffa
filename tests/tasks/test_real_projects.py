"""The hardened grader on released PyPI projects, not only on suites written for pdbgym.

Each release is downloaded as synthesis downloads it (``synth.project.download_sdist``; the archives are
kept in a cache folder shared by test runs, so CI downloads each once) and prepared as synthesis
prepares a source. For each: the clean suite (or a fixed part of it) is run by pytest as a user would,
and by the hardened run (``testrun.run_tests``) through bubblewrap, which must give every test the same
outcome and find no forgery; a one-line bug (by hand, or synthesized with a fixed seed) must grade
unsolved, and its reference fix solved, through ``env.grading.grade``, never tampered.

Between them the releases use: subtests (``unittest``'s ``subTest``, reported by pytest 9 as subtest
reports), ``conftest.py`` in a subfolder only, fixtures from conftest, a conftest fixture filling
``doctest_namespace``, doctests (``--doctest-modules`` with the project's ``doctest_optionflags``) and
parametrization. No small released library found uses pytest's own ``subtests`` fixture without
third-party dependencies; ``test_subtests_and_conftests.py`` covers it (and the rest) on a made-up
project. When PyPI cannot be reached the tests are skipped, saying so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from pdbgym.grading.grader import GradeResult, grade
from pdbgym.grading.testrun import run_tests
from pdbgym.sandbox import Limits, Workspace, get_sandbox, sandbox_env
from pdbgym.tasks.model import Task, load_task
from pdbgym.tasks.patches import apply_patch
from pdbgym.tasks.synth.candidate import reference_patch
from pdbgym.tasks.synth.engine import STATE_DIR, SynthConfig, synthesize_source
from pdbgym.tasks.synth.project import (
    PYPI_PREFIX,
    Project,
    SynthSourceError,
    download_sdist,
    prepare_project,
    slug_for,
)
from pdbgym.tasks.validate import validate_task

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not shutil.which("bwrap"), reason="grading runs under bubblewrap here")]

CACHE_ENV = "PDBGYM_SDIST_CACHE"  # where downloaded sdists are kept; default ~/.cache/pdbgym/sdists


@dataclass(frozen=True)
class Release:
    spec: str                       # NAME==VERSION
    features: str                   # what of pytest its suite uses (for people reading a failure)
    options: tuple[str, ...] = ()   # the task's pytest options (its test_command)
    select: tuple[str, ...] = ()    # the part of the suite the tests run (pytest arguments); (): all of it
    bug: tuple[str, str, str] | None = None  # (file, clean line, buggy line): a one-line bug by hand
    failing: tuple[str, ...] = ()   # the tests that bug fails


SEMVER = Release(
    "semver==3.1.2", "conftest.py in tests/ only, its autouse fixture filling doctest_namespace and its fixture "
    "`version`; parametrization",
    bug=("semver/version.py", "        return cls(self._major, self._minor + 1)\n",
         "        return cls(self._major, self._minor + 1, self._patch)\n"),
    failing=("tests/test_bump.py::test_should_bump_minor",
             "tests/test_bump.py::test_should_versioninfo_bump_minor_and_patch",
             "tests/test_bump.py::test_next_version_ignores_token_for_main_parts[minor-rc+build-1.3.0]",
             "tests/test_parsing.py::test_next_version_with_versioninfo[0.2.5-rc.1-minor-0.3.0]",
             "tests/test_parsing.py::test_next_version_with_versioninfo[1.3.1-minor-1.4.0]",
             "tests/test_pysemver-cli.py::test_should_process_parsed_cli_arguments[cmd_bump-args1-expectation1]"))
BOLTONS = Release(
    "boltons==26.2.0", "doctests (--doctest-modules, the project's doctest_optionflags); conftest.py in tests/ "
    "only, with a collection hook; parametrization",
    options=("--doctest-modules",), select=("boltons/strutils.py", "tests/test_strutils.py"),
    bug=("boltons/strutils.py", "    return ''.join(w.capitalize() or '_' for w in under_string.split('_'))\n",
         "    return '_'.join(w.capitalize() or '_' for w in under_string.split('_'))\n"),
    failing=("boltons/strutils.py::boltons.strutils.under2camel",))
MORE_ITERTOOLS = Release(
    "more-itertools==11.2.1", "unittest subTest: a test whose own call passes while two of its subtests fail",
    select=("tests/test_more.py", "-k", "FirstTests or LastTests or NthOrLastTests or ChunkedTests or IlenTests "
            "or OneTests or StaggerTests or SplitAtTests"),
    bug=("more_itertools/more.py", "        return deque(iterable, maxlen=1)[-1]\n",
         "        return deque(iterable, maxlen=2)[0]\n"),
    failing=("tests/test_more.py::LastTests::test_basic", "tests/test_more.py::NthOrLastTests::test_basic"))
PATHSPEC = Release("pathspec==1.1.1", "unittest subTest (142 subtests passed, 276 skipped); its tasks synthesized")
RELEASES = [SEMVER, BOLTONS, MORE_ITERTOOLS, PATHSPEC]


def sdist_cache() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pdbgym" / "sdists"


_unreachable: list[str] = []  # the first download failure: the other releases are skipped at once


def cached_sdist(spec: str) -> Path:
    """The sdist archive of ``spec``, downloaded once into the cache folder (skips when PyPI cannot be
    reached)."""
    if _unreachable:
        pytest.skip(_unreachable[0])
    folder = sdist_cache() / slug_for(PYPI_PREFIX + spec)
    archives = sorted(p for p in folder.glob("*") if p.name.endswith((".tar.gz", ".zip")))
    if archives:
        return archives[0]
    with tempfile.TemporaryDirectory(prefix="pdbgym-sdist-") as tmp:
        try:
            download_sdist(spec, Path(tmp), timeout_s=120)
        except SynthSourceError as exc:
            _unreachable.append(f"cannot download {spec} from PyPI (no network?): {exc}")
            pytest.skip(_unreachable[0])
        archive = next(p for p in (Path(tmp) / "download").iterdir() if p.name.endswith((".tar.gz", ".zip")))
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{archive.name}.{os.getpid()}"  # another run may be filling the cache too
        shutil.copy2(archive, partial)
        partial.replace(folder / archive.name)
    return folder / archive.name


def place_sdist(spec: str, workdir: Path) -> None:
    """Put the cached archive where ``download_sdist`` looks first, so nothing is downloaded again."""
    (workdir / "download").mkdir(parents=True, exist_ok=True)
    shutil.copy2(cached_sdist(spec), workdir / "download")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Release], Project]:
    """A release prepared as synthesis prepares a source (minimal copy, ``src/`` flattened), once each."""
    done: dict[str, Project] = {}

    def get(release: Release) -> Project:
        if release.spec not in done:
            workdir = tmp_path_factory.mktemp(slug_for(PYPI_PREFIX + release.spec))
            place_sdist(release.spec, workdir)
            done[release.spec] = prepare_project(PYPI_PREFIX + release.spec, workdir)
        return done[release.spec]

    return get


_VERBOSE = re.compile(r"^(?P<node>\S.*?::.*?) (?P<word>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")
_PLAIN_OUTCOME = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                  "XFAIL": "skipped"}


def plain_pytest(root: Path, args: list[str]) -> tuple[int | None, dict[str, str], str]:
    """pytest as a user runs it (``python -m pytest -v``, no pdbgym plugin), in the sandbox: its exit status,
    each test's outcome from its verbose line (an error after a pass wins), and its output."""
    argv = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", *args]
    result = get_sandbox("bwrap").run(argv, root, Limits(wall_time_s=300, output_limit_bytes=8_000_000),
                                      env=sandbox_env(root, {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}))
    outcomes: dict[str, str] = {}
    for line in result.output.splitlines():
        if re.match(r"^=+ (FAILURES|ERRORS|short test summary info|warnings summary) =+$", line):
            break
        if (match := _VERBOSE.match(line)) and outcomes.get(match["node"], "passed") == "passed":
            outcomes[match["node"]] = _PLAIN_OUTCOME[match["word"]]
    return result.returncode, outcomes, result.output


def code_task(root: Path, nodes: list[str], options: tuple[str, ...]) -> Task:
    """A task built in code around ``root``, for a run of ``nodes`` (no patch: nothing is applied)."""
    return Task(instance_id="clean-suite", FAIL_TO_PASS=nodes[:1], PASS_TO_PASS=nodes[1:], patch="", path=root,
                test_command=" ".join(("python -m pytest", *options)))


def grade_bug_and_fix(task: Task) -> tuple[GradeResult, GradeResult]:
    sandbox = get_sandbox("bwrap")
    with Workspace.create(task.repo) as ws:
        buggy = grade(task, ws.path, sandbox)
        apply_patch(ws.path, task.patch)
        fixed = grade(task, ws.path, sandbox)
    return buggy, fixed


def assert_unsolved_then_solved(task: Task, buggy: GradeResult, fixed: GradeResult) -> None:
    assert buggy.tampered == [] and fixed.tampered == [], (buggy.tampered, fixed.tampered, fixed.output[-1500:])
    assert buggy.fail_to_pass == dict.fromkeys(task.FAIL_TO_PASS, "failed"), buggy.output[-2000:]
    assert set(buggy.pass_to_pass.values()) == {"passed"} and not buggy.final_test_passed, buggy.output[-2000:]
    assert fixed.final_test_passed and not fixed.ignored_files, fixed.output[-2000:]


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.spec)
def test_the_clean_suite_passes_as_pytest_itself_says(release: Release, prepared, tmp_path: Path) -> None:
    project = prepared(release)
    with Workspace.create(project.root) as ws:
        status, said, output = plain_pytest(ws.path, [*release.options, *release.select])
        assert status == 0 and len(said) >= 40, output[-2000:]
        nodes = sorted(said)
        run = run_tests(get_sandbox("bwrap"), ws.path, code_task(ws.path, nodes, release.options), nodes)
    assert run.tampered == [], (release.features, run.tampered, run.output[-2000:])
    assert "INTERNALERROR" not in run.output, run.output[-3000:]
    assert run.outcomes == said, (release.features, {n: (o, run.outcomes.get(n)) for n, o in said.items()
                                                     if run.outcomes.get(n) != o})


@pytest.mark.parametrize("release", [r for r in RELEASES if r.bug], ids=lambda r: r.spec)
def test_a_one_line_bug_grades_unsolved_and_its_reference_fix_solved(release: Release, prepared,
                                                                       tmp_path: Path) -> None:
    project = prepared(release)
    assert release.bug is not None
    file, clean_line, buggy_line = release.bug
    clean = (project.root / file).read_text()
    assert clean.count(clean_line) == 1, f"{release.spec}: the line to break is not in {file}"
    buggy = clean.replace(clean_line, buggy_line)
    repo = tmp_path / "task" / "repo"
    shutil.copytree(project.root, repo)
    (repo / file).write_text(buggy)
    with Workspace.create(repo) as ws:  # the task's repo stays as written
        status, said, output = plain_pytest(ws.path, [*release.options, *release.select])
    assert status == 1, output[-2000:]  # pytest itself fails the session (for a subtest: a SUBFAILED line)
    passing = sorted(n for n, o in said.items() if o == "passed" and n not in release.failing)
    (tmp_path / "task" / "task.json").write_text(json.dumps({
        "instance_id": slug_for(PYPI_PREFIX + release.spec) + "__by-hand", "FAIL_TO_PASS": list(release.failing),
        "PASS_TO_PASS": passing, "patch": reference_patch(file, buggy, clean),
        "test_command": " ".join(("python -m pytest", *release.options))}))
    task = load_task(tmp_path / "task")
    buggy_grade, fixed_grade = grade_bug_and_fix(task)
    assert_unsolved_then_solved(task, buggy_grade, fixed_grade)


def test_synthesized_tasks_validate_and_grade(tmp_path: Path) -> None:
    """Synthesis decides a mutant's outcomes with its own probe; each task it keeps must also pass
    ``tasks validate`` and grade unsolved with the bug, solved with the reference patch."""
    source = PYPI_PREFIX + PATHSPEC.spec
    config = SynthConfig(out=tmp_path / "tasks", max_tasks=1, seed=0, workers=2, baseline_runs=1)
    place_sdist(PATHSPEC.spec, config.out / STATE_DIR / slug_for(source))
    report = synthesize_source(source, config, lambda *args: None)
    assert report.error == "" and len(report.task_ids) == 1, report
    for instance_id in report.task_ids:
        task = load_task(config.out / instance_id)
        validation = validate_task(task, get_sandbox("bwrap"), check_debugger=False)
        assert validation.ok, validation.problems
        buggy, fixed = grade_bug_and_fix(task)
        assert_unsolved_then_solved(task, buggy, fixed)
