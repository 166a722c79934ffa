"""Grading as a security boundary: the verdict on the result stream, which files grading takes, the
grading tree's copy that never follows a link out, output floods, and the episode's ``tampered`` end."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from pdbgym.env import DebugEnv, EnvConfig
from pdbgym.grading.grader import grade
from pdbgym.grading.protect import ignore_reason
from pdbgym.grading.tree import build_tree, read_agent_change
from pdbgym.grading.verdict import judge
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.tasks.model import load_task
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.termination import TERMINATION_REASONS

needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="grading runs under bubblewrap here")
NODES = ["t.py::a", "t.py::b"]


def _stream(*records: dict) -> bytes:
    return b"".join(json.dumps({**r, "seq": i}).encode() + b"\n" for i, r in enumerate(records))


def _phases(node: str, outcome: str = "passed") -> list[dict]:
    return [{"kind": "phase", "nodeid": node, "when": w, "outcome": outcome if w == "call" else "passed"}
            for w in ("setup", "call", "teardown")]


def _honest(call_b: str = "passed", status: int = 0) -> list[dict]:
    return [{"kind": "start"}, *_phases("t.py::a"), *_phases("t.py::b", call_b),
            {"kind": "end", "exitstatus": status, "phases": 6, "selfcheck": []}]


PASSED_2 = "..\n2 passed in 0.01s\n"
FAILED_1 = ".F\n1 failed, 1 passed in 0.01s\n"


def test_an_honest_stream_is_judged_by_its_phases():
    assert judge(_stream(*_honest()), NODES, 0, False, PASSED_2) == \
        ({"t.py::a": "passed", "t.py::b": "passed"}, [], [], {})
    outcomes, tampered, refused, _ = judge(_stream(*_honest("failed", 1)), NODES, 1, False, FAILED_1)
    assert outcomes["t.py::b"] == "failed" and not tampered and not refused


@pytest.mark.parametrize("forge, why", [
    (lambda r: r[:5] + [r[2] | {"outcome": "passed"}] + r[5:], "second report"),  # duplicate phase
    (lambda r: r + [_phases("t.py::a")[1]], "after the end record"),
    (lambda r: r[:1] + [{"kind": "phase", "nodeid": "t.py::zzz", "when": "call", "outcome": "passed"}] + r[1:],
     "not asked for"),
    (lambda r: r[:-1] + [r[-1] | {"phases": 9}], "phase records"),
    (lambda r: r[:-1] + [r[-1] | {"selfcheck": ["_pytest.runner.x was replaced"]}], "self-check"),
    (lambda r: r + [r[-1]], "after the end record"),
])
def test_forged_streams_are_tampered(forge, why):
    _, tampered, *_ = judge(_stream(*forge(_honest())), NODES, 0, False, PASSED_2)
    assert any(why in t for t in tampered), tampered


def test_sequence_numbers_status_and_a_cut_session_are_checked():
    records = _honest()
    raw = _stream(*records).replace(b'"seq": 3', b'"seq": 30')
    assert any("sequence number" in t for t in judge(raw, NODES, 0, False)[1])
    assert any("exited 0" in t for t in judge(_stream(*_honest()), NODES, 0, False)[1]) is False
    assert any("process exited 0" in t for t in judge(_stream(*_honest("failed", 1)), NODES, 0, False)[1])
    assert any("without its end record" in t for t in judge(_stream(*records[:-1]), NODES, 0, False)[1])
    # Killed by the wall clock or a signal: refused (nothing passes), not forged.
    cut = judge(_stream(*records[:3]), NODES, -9, True)
    assert cut.tampered == [] and cut.refused and "passed" not in cut.outcomes.values()
    assert judge(b"not json\n", NODES, 1, False)[1]


def test_protection_rules():
    def flat(folder: str) -> bool:
        return folder == "pkg"

    assert ignore_reason("pkg/mod.py", flat) is None
    assert ignore_reason("pkg/json.py", flat) is None  # inside a package: pkg.json, shadows nothing
    for path in ("json.py", "unittest.py", "pytest.py", "_pytest/runner.py", "pdbgym/__init__.py",
                 "pluggy.py", "scripts/json.py", "sitecustomize.py", "pkg/usercustomize.py", "x.pth",
                 "pkg/conftest.py", "pytest.ini", "tests/test_x.py", "pkg/__pycache__/mod.cpython-311.pyc",
                 "typing.cpython-311-x86_64-linux-gnu.so"):
        assert ignore_reason(path, flat), path


def test_no_original_source_file_of_the_corpus_is_ignored():
    """The rules must not cost a real fix: every non-test file of the built-in and regression repos passes."""
    hits = []
    for task in resolve_tasks("builtin") + resolve_tasks("regression"):
        files = [str(p.relative_to(task.repo)) for p in task.repo.rglob("*") if p.is_file()]

        def is_package(folder: str, repo: Path = task.repo) -> bool:
            return (repo / folder / "__init__.py").is_file()

        hits += [(task.instance_id, f) for f in files
                 if "__pycache__" not in f and (why := ignore_reason(f, is_package)) and "test" not in why]
    assert not hits


def test_grading_tree_copies_no_link_out_and_says_what_it_left(tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "mod.py").write_text("X = 1\n")
    (repo / "tests").mkdir()
    (repo / "tests" / "test_m.py").write_text("def test_x(): pass\n")
    os.symlink("/etc", repo / "etc")  # a repo link out: neither copied nor a crash
    ws = tmp_path / "ws"
    shutil.copytree(repo, ws, symlinks=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST ONLY")
    (ws / "pkg" / "mod.py").write_text("X = 2\n")
    (ws / "pkg" / "new.py").write_text("Y = 1\n")
    os.symlink(secret, ws / "pkg" / "data.txt")
    os.symlink("mod.py", ws / "pkg" / "alias.py")
    os.mkfifo(ws / "pkg" / "pipe")
    (ws / "tests" / "test_m.py").unlink()
    (ws / "conftest.py").write_text("raise SystemExit\n")
    tree = tmp_path / "tree"
    plan = build_tree(repo, read_agent_change(repo, ws), tree)
    assert plan.changed == ["pkg/mod.py", "pkg/new.py"]  # source text only: no link the agent made
    assert (tree / "pkg" / "mod.py").read_text() == "X = 2\n" and not (tree / "pkg" / "alias.py").exists()
    assert (tree / "tests" / "test_m.py").is_file() and not (tree / "conftest.py").exists()
    assert not (tree / "etc").exists() and not (tree / "pkg" / "data.txt").exists()
    assert set(plan.ignored) == {"etc", "pkg/alias.py", "pkg/data.txt", "pkg/pipe", "tests/test_m.py", "conftest.py"}
    assert "source text only" in plan.ignored["pkg/data.txt"] and "outside the project" in plan.ignored["etc"]
    assert not any("HOST ONLY" in p.read_text() for p in tree.rglob("*") if p.is_file() and not p.is_symlink())


FLOOD_TEST = """
import sys

from calc.ops import add, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    chunk = "y" * 1_000_000 + "\\n"
    for _ in range(200):
        sys.stdout.write(chunk)
    assert sub(5, 3) == 2
"""


@pytest.fixture
def flood_task(tmp_path):
    from taskfixtures import make_task

    root = make_task(tmp_path / "task", test_timeout_s=60)
    (root / "repo" / "tests" / "test_ops.py").write_text(FLOOD_TEST)
    return load_task(root)


@needs_bwrap
def test_a_test_printing_200_mb_does_not_fail_a_correct_fix(flood_task):
    from pdbgym.tasks.patches import apply_patch

    with Workspace.create(flood_task.repo) as ws:
        apply_patch(ws.path, flood_task.patch)
        graded = grade(flood_task, ws.path, get_sandbox("bwrap"))
    assert graded.final_test_passed and not graded.tampered, graded.output[-1500:]
    assert "File too large" not in graded.output


@needs_bwrap
def test_validate_says_why_the_reference_patch_fails(tmp_path):
    from pdbgym.tasks.validate import validate_task

    from taskfixtures import PATCH, make_task

    wrong = PATCH.replace("+    return a - b", "+    return a - b - 1")
    report = validate_task(load_task(make_task(tmp_path / "task", patch=wrong)), get_sandbox("bwrap"),
                           check_debugger=False)
    problem = next(p for p in report.problems if "reference patch applied" in p)
    assert "tests/test_ops.py::test_sub: failed" in problem
    assert "assert 1 == 2" in problem  # the tail of pytest's output, with the assertion that failed


@needs_bwrap
def test_forgery_ends_the_episode_tampered_and_run_tests_shows_it(tiny_task, tmp_path):
    forge = (
        "import json, os, stat\n"
        "for name in os.listdir('/proc/self/fd'):\n"
        "    fd = int(name)\n"
        "    try:\n"
        "        if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode):\n"
        "            os.write(fd, (json.dumps({'kind': 'phase', 'nodeid': 'tests/test_ops.py::test_sub',\n"
        "                'when': 'call', 'outcome': 'passed', 'seq': 1}) + '\\n').encode())\n"
        "    except OSError:\n"
        "        pass\n"
    )
    with DebugEnv(tiny_task, EnvConfig(sandbox="bwrap", start_debugger=False)) as env:
        env.reset()
        (env.ws / "calc" / "__init__.py").write_text(forge)
        (env.ws / "sitecustomize.py").write_text("")
        observation, _, _ = env.step({"tool": "run_tests", "args": {}})
        assert "TAMPERED" in observation and "sitecustomize.py" in observation
        observation, done, info = env.step({"tool": "submit", "args": {}})
    assert done and info["termination_reason"] == "tampered" and not info["final_test_passed"]
    assert "tampered" in TERMINATION_REASONS
    assert env.result is not None and env.result.grading["tampered"]
    assert "sitecustomize.py" in env.result.grading["ignored_files"]


def test_records_must_agree_with_pytests_own_summary():
    honest = _stream(*_honest("failed", 1))
    assert judge(honest, NODES, 1, False, "F.\n1 failed, 1 passed in 0.10s\n")[1] == []
    forged = _stream(*_honest("passed", 0))
    _, tampered, *_ = judge(forged, NODES, 0, False, "F.\n1 failed, 1 passed in 0.10s\n")
    assert any("summary says 1 failed" in t for t in tampered)
    # A line printed by a test is not pytest's summary unless it is the last one.
    assert judge(forged, NODES, 0, False, "1 failed in 0.1s\nmore\n2 passed in 0.10s\n")[1] == []
    # Without pytest's closing line last, nothing passes, whatever the records say.
    cut = judge(_stream(*_honest()), NODES, 0, False, "..\n2 passed in 0.10s\nprinted after pytest\n")
    assert cut.refused and cut.outcomes == {"t.py::a": "refused", "t.py::b": "refused"}


@needs_bwrap
def test_decorated_and_class_tests_are_not_taken_for_forgery(tmp_path):
    """A test wrapped by a library decorator (mock.patch) runs code from outside the project: honest."""
    from pdbgym.grading.testrun import run_tests

    root = tmp_path / "task"
    repo = root / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "app.py").write_text("import os\n\n\ndef cwd():\n    return os.getcwd()\n")
    (repo / "tests" / "test_m.py").write_text(
        "from unittest import mock\n\nimport app\n\n\n@mock.patch('os.getcwd', return_value='/x')\n"
        "def test_m(m):\n    assert app.cwd() == '/x'\n\n\nclass TestK:\n    def test_k(self):\n        assert 1\n")
    nodes = ["tests/test_m.py::test_m", "tests/test_m.py::TestK::test_k"]
    (root / "task.json").write_text(json.dumps({
        "instance_id": "decorated", "FAIL_TO_PASS": nodes[:1], "PASS_TO_PASS": nodes[1:],
        "patch": "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-import os\n+import os  # noqa\n"}))
    run = run_tests(get_sandbox("bwrap"), repo, load_task(root), nodes)
    assert run.all_passed(nodes) and not run.tampered, (run.tampered, run.output[-800:])


REWRITER = """
import os
_path = os.path.join(os.getcwd(), "tests", "test_ops.py")
with open(_path) as _fh:
    _original = _fh.read()
_forged = _original.replace("def test_sub():", "def test_sub():\\n    return\\n")
if RESTORE:
    _forged += "\\nwith open(__file__, 'w') as _fh:\\n    _fh.write(" + repr(_original) + ")\\n"
with open(_path, "w") as _fh:
    _fh.write(_forged)
"""


@needs_bwrap
@pytest.mark.parametrize("restore", [False, True])
@pytest.mark.parametrize("backend", ["plain", "bwrap"])
def test_a_test_file_rewritten_by_the_code_under_test_is_tampered_or_refused(tmp_path, restore, backend):
    """The task's own conftest imports the project, so project code runs before the tests are read: it
    rewrites a test file in the grading tree (and, with ``restore``, the rewritten file puts the original
    back when imported). A plain run passes. Grading under plain (no read-only binds) sees the change and
    ends tampered; under bwrap the tree's test files are read-only, so the write itself fails (EROFS)."""
    import sys

    from pdbgym.sandbox import Limits, sandbox_env

    from taskfixtures import make_task

    root = make_task(tmp_path / "task")
    (root / "repo" / "conftest.py").write_text("import calc.ops  # noqa: F401\n")
    task = load_task(root)
    sandbox = get_sandbox("bwrap")
    with Workspace.create(task.repo) as ws:
        (ws.path / "calc" / "__init__.py").write_text(f"RESTORE = {restore}\n" + REWRITER)
        plain = sandbox.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *task.all_tests],
                            ws.path, Limits(wall_time_s=60), env=sandbox_env(ws.path))
        assert plain.returncode == 0, plain.output[-800:]  # the attack works on a plain run
        (ws.path / "tests" / "test_ops.py").write_text((task.repo / "tests" / "test_ops.py").read_text())
        graded = grade(task, ws.path, get_sandbox(backend))
    assert not graded.final_test_passed
    if backend == "plain":
        assert any("test_ops.py changed" in t for t in graded.tampered), graded.tampered
    else:
        assert "Read-only file system" in graded.output and not graded.tampered, graded.output[-800:]


def test_a_collection_error_is_an_honest_failure_and_its_count_is_checked():
    collect = {"kind": "collect", "nodeid": "t.py", "outcome": "failed"}
    stream = [{"kind": "start"}, collect, {"kind": "end", "exitstatus": 2, "phases": 0, "collect_errors": 1,
                                            "selfcheck": []}]
    outcomes, tampered, *_ = judge(_stream(*stream), NODES, 2, False, "E\n1 error in 0.05s\n")
    assert outcomes == {} and tampered == []  # both tests missing: graded failed, nothing forged
    hidden = stream[:1] + stream[2:]  # the summary's error with no record of it
    assert any("summary says 1 failed or errored" in t for t in judge(_stream(*hidden), NODES, 2, False,
                                                                       "E\n1 error in 0.05s\n")[1])
    miscounted = stream[:2] + [stream[2] | {"collect_errors": 0}]
    assert any("collection errors" in t for t in judge(_stream(*miscounted), NODES, 2, False)[1])
    malformed = [stream[0], collect | {"outcome": "passed"}, stream[2]]
    assert any("malformed collect record" in t for t in judge(_stream(*malformed), NODES, 2, False)[1])



def test_a_forged_collect_record_cannot_explain_a_failure_away():
    """All tests recorded passed, pytest's line says one failed: a collect record added to square the counts
    is refused, since pytest runs no test after a collection error and never exits 0 with one."""
    collect = {"kind": "collect", "nodeid": "t.py", "outcome": "failed"}
    records = _honest()
    forged = records[:-1] + [collect, records[-1] | {"collect_errors": 1}]
    _, tampered, *_ = judge(_stream(*forged), NODES, 0, False, "F.\n1 failed, 1 passed in 0.10s\n")
    assert any("collection error(s) recorded, yet 6 test phase(s) ran" in t for t in tampered), tampered


HONEST_BREAKAGE = {  # edits an agent makes by mistake: each fails the task, none is forgery
    "syntax error": lambda text: text + "\ndef broken(:\n",
    "exception at import": lambda text: text + "\nraise RuntimeError('half-written edit')\n",
    "a name the tests import renamed": lambda text: text.replace("def summarize_log(", "def summarize(", 1),
    "endless recursion at import": lambda text: text + "\ndef f(n):\n    return f(n + 1)\nf(0)\n",
    "module emptied": lambda text: "",
}


@needs_bwrap
@pytest.mark.parametrize("mistake", list(HONEST_BREAKAGE))
def test_source_that_breaks_the_tests_import_is_unsolved_not_tampered(mistake):
    """pytest reports a module that fails to import only in its closing line ("2 errors"), with no test
    phase: without the collect record that line disagreed with the records and graded honest code tampered."""
    from pdbgym.grading.grader import grade
    from pdbgym.sandbox import Workspace, get_sandbox
    from pdbgym.tasks.suites import resolve_tasks

    task = next(t for t in resolve_tasks("builtin") if t.instance_id == "builtin__logstats-level-counts")
    with Workspace.create(task.repo) as ws:
        source = ws.path / "logstats" / "report.py"
        source.write_text(HONEST_BREAKAGE[mistake](source.read_text()))
        graded = grade(task, ws.path, get_sandbox("bwrap"))
    assert not graded.final_test_passed
    assert graded.tampered == [], graded.output[-1500:]


def test_pytests_passed_count_must_equal_the_records():
    """A forger that prints a closing line after the real one must get the passed count exactly right."""
    honest = _stream(*_honest("passed", 0))
    assert judge(honest, NODES, 0, False, "..\n2 passed in 0.10s\n")[1] == []
    _, tampered, *_ = judge(honest, NODES, 0, False, "..\n3 passed in 0.10s\n")
    assert any("summary says 3 passed, the records say 2" in t for t in tampered)
