"""The answer key stays out of the sandbox: no task's ``task.json``, reference patch or pristine repo.

pdbgym's package folder holds every built-in and regression task. Bound whole into the sandbox, one pdb
``!`` command printed a task's patch and one ``edit`` applied it. Each test here looks for that data
from inside a real bwrap sandbox, by the paths where pdbgym lives (installed and source checkout), by
import, and by a search of every mounted folder; and checks that what runs in the sandbox (the grading
run, a pdb session) still runs.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pdbgym.errors import SandboxError
from pdbgym.sandbox import Limits, Workspace, bwrap, get_sandbox
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason, package_dir
from pdbgym.tasks.suites import resolve_tasks

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))
CHECKOUT_PACKAGE = Path(__file__).resolve().parents[2] / "pdbgym"
SAMPLE_TASKS = 4  # tasks of each suite whose patch and repo lines are searched for in file contents

SEARCH = r'''
import json, os, sys

paths, needles, names, fallback = json.loads(sys.argv[1])
sys.path.append(fallback)  # where the grading launcher looks too, when pdbgym is not installed
needles = [n.encode() for n in needles]
SUFFIXES = (".py", ".json", ".txt", ".md", ".patch", ".diff", ".toml", ".cfg", ".ini", ".rst")
found = []
for path in paths:
    try:
        with open(path, "rb") as handle:
            handle.read(1)
        found.append("read " + path)
    except OSError:
        pass
import pdbgym.tasks
tasks_dir = os.path.dirname(pdbgym.tasks.__file__)
for name in ("builtin", "regression"):
    if os.path.exists(os.path.join(tasks_dir, name)):
        found.append("imported package holds " + name)
# Names everywhere; contents of the text files a task holds, everywhere but /usr (6 GB: there a task
# would still show by its folder's name or its task.json).
files = 0
for folder, dirs, entries in os.walk("/"):
    if folder == "/":
        dirs[:] = [d for d in dirs if d not in ("proc", "dev", "sys")]
    for name in dirs + entries:
        if name == "task.json" or name in names:
            found.append("named " + os.path.join(folder, name))
    if folder == "/usr" or folder.startswith("/usr/"):
        continue
    for name in entries:
        path = os.path.join(folder, name)
        try:
            if not name.endswith(SUFFIXES) or os.path.islink(path) or os.path.getsize(path) > 256 * 1024:
                continue
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        files += 1
        if any(needle in data for needle in needles):
            found.append("content " + path)
kinds = sorted({hit.split()[0] for hit in found})
print(json.dumps({"found": [[hit for hit in found if hit.split()[0] == kind][:5] for kind in kinds], "files": files}))
'''


def _task_lines(patch: str, sign: str) -> list[str]:
    """The longest line the patch adds (``+``) or removes (``-``: a line of the pristine repo)."""
    lines = [line[1:].strip() for line in patch.splitlines()
             if line.startswith(sign) and not line.startswith(sign * 3)]
    return sorted((line for line in lines if len(line) >= 20), key=len)[-1:]


def _answer_key() -> tuple[list[str], list[str], list[str]]:
    """Paths of task data where pdbgym lives, text of some patches and repos, and the tasks' names."""
    tasks = resolve_tasks("builtin") + resolve_tasks("regression")
    packages = {package_dir(), CHECKOUT_PACKAGE}
    spec = importlib.util.find_spec("pdbgym")
    if spec is not None and spec.origin:
        packages.add(Path(spec.origin).parent)
    paths = []
    for task in tasks:
        inside = task.repo.parent.relative_to(package_dir())
        repo_file = next(p for p in sorted(task.repo.rglob("*.py")) if p.is_file())
        for package in packages:
            paths += [str(package / inside / "task.json"), str(package / inside / repo_file.relative_to(task.repo.parent))]
    sample = resolve_tasks("builtin")[:SAMPLE_TASKS] + resolve_tasks("regression")[:SAMPLE_TASKS]
    needles = [line for task in sample for sign in "+-" for line in _task_lines(task.patch, sign)]
    names = sorted({task.repo.parent.name for task in tasks})
    return paths, needles, names


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    source = tmp_path / "project"
    source.mkdir()
    with Workspace.create(source, parent=tmp_path / "workspaces") as ws:
        yield ws.path


def _search(workspace: Path) -> dict:
    paths, needles, names = _answer_key()
    assert paths and len(needles) >= SAMPLE_TASKS and names
    result = get_sandbox("bwrap").run([sys.executable, "-c", SEARCH, json.dumps([paths, needles, names, str(package_dir().parent)])],
                                      workspace, Limits(wall_time_s=300, cpu_time_s=300))
    assert result.ok, result.output[-2000:]
    return json.loads(result.output.strip().splitlines()[-1])


@pytest.mark.slow
@needs_bwrap
def test_no_task_data_is_readable_in_the_sandbox(workspace):
    report = _search(workspace)
    assert report["files"] > 1000  # the search did read the mounted interpreter and packages
    assert report["found"] == [], report["found"]


@needs_bwrap
def test_a_package_inside_a_mounted_prefix_is_hidden_there_too(workspace, tmp_path, monkeypatch):
    """A non-editable install: pdbgym (with its task data) inside a site-packages that is mounted."""
    site = tmp_path / "site"
    shutil.copytree(package_dir(), site / "pdbgym", ignore=shutil.ignore_patterns("__pycache__"))
    assert (site / "pdbgym" / "tasks" / "builtin").is_dir()
    roots = bwrap.python_roots()
    monkeypatch.setattr(bwrap, "package_dir", lambda: site / "pdbgym")
    monkeypatch.setattr(bwrap, "python_roots", lambda: (*roots, str(site)))
    script = textwrap.dedent("""
        import json, os, sys
        sys.path.insert(0, sys.argv[1])
        import pdbgym.grading.protect
        tasks = os.path.join(sys.argv[1], "pdbgym", "tasks")
        grading = os.path.join(sys.argv[1], "pdbgym", "grading")
        print(json.dumps([pdbgym.grading.protect.__file__, sorted(os.listdir(tasks) + os.listdir(grading))]))
    """)
    result = get_sandbox("bwrap").run([sys.executable, "-I", "-c", script, str(site)], workspace,
                                      Limits(wall_time_s=60))
    assert result.ok, result.output[-2000:]
    imported, listed = json.loads(result.output.strip().splitlines()[-1])
    assert imported == str(site / "pdbgym" / "grading" / "protect.py")
    assert "builtin" not in listed and "regression" not in listed and "plugin.py" in listed


def test_the_runtime_copy_holds_what_runs_and_what_it_imports():
    from pdbgym.sandbox.runtime import runtime_files

    files = runtime_files(package_dir())
    for rel in ("__init__.py", "tasks/__init__.py", "grading/__init__.py", "grading/launch.py", "grading/plugin.py",
                "grading/protect.py", "debugger/launcher.py", "tasks/synth/__init__.py", "tasks/synth/zygote.py",
                "tasks/synth/hotserver.py", "tasks/synth/hotpatch.py", "tasks/synth/probe.py"):
        assert rel in files, rel
    assert not any("builtin" in rel or "regression" in rel or not rel.endswith(".py") for rel in files)
    assert "debugger/__init__.py" not in files  # the launcher runs by path: its package never loads
    for rel, data in files.items():
        assert data == (package_dir() / rel).read_bytes(), rel


def test_a_missing_module_that_runs_in_the_sandbox_is_a_loud_error(tmp_path):
    from pdbgym.sandbox.runtime import runtime_files

    fake = tmp_path / "pdbgym"
    shutil.copytree(package_dir(), fake, ignore=shutil.ignore_patterns("__pycache__", "builtin", "regression"))
    report = fake / "grading" / "plugin.py"
    report.write_text(report.read_text() + "\nfrom pdbgym.grading.not_there import X  # noqa\n")
    with pytest.raises(SandboxError, match=r"pdbgym\.grading\.not_there"):
        runtime_files(fake)


@needs_bwrap
def test_grading_and_the_pdb_session_run_from_the_runtime_copy():
    from pdbgym.tasks.validate import validate_task

    sandbox = get_sandbox("bwrap")
    for task in (resolve_tasks("builtin")[0], resolve_tasks("regression")[0]):
        report = validate_task(task, sandbox, check_debugger=True)
        assert report.ok, report.problems
