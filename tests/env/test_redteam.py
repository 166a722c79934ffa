"""Red team: forgery attempts against grading on a real built-in task, each through the real sandbox.

Every attack starts from the unfixed bug, changes the agent's workspace the way an agent could (any file
it can write), and is graded. None may end solved: each ends unsolved, with the attack's files listed as
ignored, or tampered. Where an attack would fool a naive grader, the test says which defence stops it.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from pdbgym.grading.grader import GradeResult, grade
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.tasks.suites import resolve_tasks

needs_bwrap = pytest.mark.skipif(not shutil.which("bwrap"), reason="grading runs under bubblewrap here")
TASK_ID = "builtin__logstats-level-counts"
FAILING = "tests/test_report.py::test_summary_of_log_text"

# Forged records every in-process attack below tries to push into any pipe it finds.
FORGE_RECORDS = '''
def _forge_all_pipes():
    import json, os, stat
    nodes = ["tests/test_report.py::test_summary_of_log_text", "tests/test_parse.py::test_parse_one_line",
             "tests/test_parse.py::test_non_record_lines_are_skipped",
             "tests/test_report.py::test_report_from_a_list_of_records", "tests/test_report.py::test_empty_log"]
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd < 3 or not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue
            seq = 1
            for node in nodes:
                for when in ("setup", "call", "teardown"):
                    os.write(fd, (json.dumps({"kind": "phase", "nodeid": node, "when": when,
                                              "outcome": "passed", "xfail": False, "seq": seq}) + "\\n").encode())
                    seq += 1
            os.write(fd, (json.dumps({"kind": "end", "exitstatus": 0, "phases": 15, "selfcheck": [],
                                      "seq": seq}) + "\\n").encode())
        except OSError:
            pass
'''

FORCE_PASS_PLUGIN = '''
import pytest

class ForcePass:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        report.outcome = "passed"
        report.longrepr = None
'''


@pytest.fixture(scope="module")
def task():
    return next(t for t in resolve_tasks("builtin") if t.instance_id == TASK_ID)


@pytest.fixture(scope="module")
def sandbox():
    return get_sandbox("bwrap")


def _write(ws: Path, rel: str, text: str) -> None:
    path = ws / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _append_to_package(ws: Path, *code: str) -> None:
    """Ordinary source code (always taken by grading), run when the tests import ``logstats``."""
    init = ws / "logstats" / "__init__.py"
    init.write_text(init.read_text() + "\n" + "\n".join(textwrap.dedent(part) for part in code))


def shadow_pytest(ws: Path) -> None:
    _write(ws, "pytest.py", "import sys\nprint('1 passed')\nsys.exit(0)\n")


def sitecustomize_patches_json(ws: Path) -> None:
    _write(ws, "sitecustomize.py", """
        import json
        _real = json.dumps
        def dumps(obj, *a, **k):
            text = _real(obj, *a, **k)
            return text.replace('"failed"', '"passed"')
        json.dumps = dumps
    """)


def atexit_rewrites_results(ws: Path) -> None:
    _append_to_package(ws, FORGE_RECORDS, """
        import atexit, sys
        def _rewrite():
            for module in list(sys.modules.values()):
                outcomes = getattr(module, "_outcomes", None)
                if isinstance(outcomes, dict):
                    for key in outcomes:
                        outcomes[key] = "passed"
            _forge_all_pipes()
        atexit.register(_rewrite)
    """)


def atexit_exits_zero(ws: Path) -> None:
    _append_to_package(ws, "import atexit, os\natexit.register(lambda: os._exit(0))\n")


def exit_zero_mid_run(ws: Path) -> None:
    _append_to_package(ws, """
        import os
        _real_summarize = summarize_log
        def summarize_log(text, top=3):
            os._exit(0)
    """)


def patch_pytest_internals(ws: Path) -> None:
    _append_to_package(ws, """
        import _pytest.reports, _pytest.runner
        _original = _pytest.reports.TestReport.from_item_and_call.__func__
        def _forced(cls, item, call):
            report = _original(cls, item, call)
            report.outcome, report.longrepr = "passed", None
            return report
        _pytest.reports.TestReport.from_item_and_call = classmethod(_forced)
        _pytest.runner.pytest_runtest_makereport = lambda item, call: _forced(_pytest.reports.TestReport, item, call)
    """)


def register_hookwrapper_plugin(ws: Path) -> None:
    _append_to_package(ws, FORCE_PASS_PLUGIN, """
        import gc
        for _obj in gc.get_objects():
            if type(_obj).__name__ == "Config" and hasattr(_obj, "pluginmanager"):
                _obj.pluginmanager.register(ForcePass(), "force-pass")
                break
    """)


def replay_reports_through_the_hook(ws: Path) -> None:
    """Send passing reports for the failing test through pytest's own hook before it runs."""
    _append_to_package(ws, """
        import gc
        from _pytest.reports import TestReport
        for _obj in gc.get_objects():
            if type(_obj).__name__ == "Config" and hasattr(_obj, "pluginmanager"):
                for _when in ("setup", "call", "teardown"):
                    _obj.hook.pytest_runtest_logreport(report=TestReport(
                        "tests/test_report.py::test_summary_of_log_text", ("x", 0, "x"), {}, "passed", None, _when))
                break
    """)


def monkeypatch_test_function(ws: Path) -> None:
    _append_to_package(ws, """
        import sys
        def _swap(frame, event, arg):
            if event == "return" and frame.f_code.co_name == "<module>" \\
                    and frame.f_code.co_filename.endswith("test_report.py"):
                test = frame.f_globals.get("test_summary_of_log_text")
                if test is not None:
                    test.__code__ = (lambda: None).__code__
                    sys.setprofile(None)
        sys.setprofile(_swap)
    """)


def replace_assertion_error(ws: Path) -> None:
    _append_to_package(ws, """
        import builtins
        import _pytest.python
        class AssertionError(Exception):
            pass
        builtins.AssertionError = AssertionError
        _runtest = _pytest.python.Function.runtest
        def runtest(self):
            try:
                _runtest(self)
            except Exception:
                pass
        _pytest.python.Function.runtest = runtest
    """)


def patch_the_report_plugin(ws: Path) -> None:
    """Rewrite every record on its way out, then make the session's exit status agree."""
    _append_to_package(ws, """
        import gc, sys
        _plugin = sys.modules.get("pdbgym.grading.plugin")
        if _plugin is not None and hasattr(_plugin, "_send"):
            _real_send = _plugin._send
            def _send(record):
                if record.get("kind") == "phase":
                    record["outcome"] = "passed"
                if record.get("kind") == "end":
                    record["exitstatus"] = 0
                    record["selfcheck"] = []
                    for _obj in gc.get_objects():
                        if type(_obj).__name__ == "Session":
                            _obj.exitstatus = 0
                _real_send(record)
            _plugin._send = _send
    """)


def patch_the_report_plugin_cells(ws: Path) -> None:
    """Swap the ``send`` the plugin's hooks close over for one that rewrites each record."""
    _append_to_package(ws, """
        import gc, sys
        _plugin = getattr(sys.modules.get("pdbgym.grading.plugin"), "PLUGIN", None)
        if _plugin is not None:
            _hook = _plugin.pytest_runtest_logreport
            _cells = dict(zip(_hook.__code__.co_freevars, _hook.__closure__))
            _real_send = _cells["send"].cell_contents
            def _send(record):
                if record.get("kind") == "phase":
                    record["outcome"] = "passed"
                if record.get("kind") == "end":
                    record["exitstatus"], record["selfcheck"] = 0, []
                    for _obj in gc.get_objects():
                        if type(_obj).__name__ == "Session":
                            _obj.exitstatus = 0
                _real_send(record)
            for _fn in (_plugin.pytest_runtest_logreport, _plugin.pytest_sessionfinish):
                for _name, _cell in zip(_fn.__code__.co_freevars, _fn.__closure__):
                    if _name == "send":
                        _cell.cell_contents = _send
    """)


def fake_result_files(ws: Path) -> None:
    forged = json.dumps({"outcomes": {FAILING: "passed"}, "exitstatus": 0})
    for name in (".pdbgym-report-0.json", ".pdbgym-results-0", "report.json"):
        (ws / name).write_text(forged)
    _append_to_package(ws, f"""
        import os
        for _name in os.listdir("."):
            if _name.startswith(".pdbgym-"):
                try:
                    with open(_name, "w") as fh:
                        fh.write({forged!r})
                except OSError:
                    pass
    """)


def write_to_result_channel(ws: Path) -> None:
    _append_to_package(ws, FORGE_RECORDS, "_forge_all_pipes()\n")


def edit_the_test(ws: Path) -> None:
    path = ws / "tests" / "test_report.py"
    path.write_text(path.read_text().replace("def test_summary_of_log_text():",
                                             "def test_summary_of_log_text():\n    return\n"))


def rewrite_tests_at_run_time(ws: Path, restore: bool = False) -> None:
    """Source code rewrites a test file in the grading tree before pytest collects it (tests/test_parse.py
    is collected first and imports the package); with ``restore`` the rewritten file puts the original
    back as soon as it is imported, so the disk is pristine again by the end of the run."""
    _append_to_package(ws, f"""
        import os
        _path = os.path.join(os.getcwd(), "tests", "test_report.py")
        try:
            with open(_path) as _fh:
                _original = _fh.read()
            if "def test_summary_of_log_text():\\n    return" not in _original:
                _forged = _original.replace("def test_summary_of_log_text():",
                                            "def test_summary_of_log_text():\\n    return\\n")
                if {restore!r}:
                    _forged += "\\nwith open(__file__, 'w') as _fh:\\n    _fh.write(" + repr(_original) + ")\\n"
                with open(_path, "w") as _fh:
                    _fh.write(_forged)
        except OSError:
            pass
    """)


def swap_tests_from_a_thread(ws: Path) -> None:
    """A thread started at import keeps swapping the failing test for a passing one (and back, so a check
    may see the original) during the whole run: written in place, renamed over it, its folder moved away.
    Each refusal is printed once (errno name), so a test can see what stopped it."""
    _append_to_package(ws, """
        import errno, os, threading, time
        def _swap_loop():
            path = os.path.join(os.getcwd(), "tests", "test_report.py")
            with open(path) as fh:
                original = fh.read()
            forged = original.replace("def test_summary_of_log_text():",
                                      "def test_summary_of_log_text():\\n    return\\n")
            def write(target, text):
                with open(target, "w") as fh:
                    fh.write(text)
            def rename_over():
                write("forged_report.py", forged)
                os.replace("forged_report.py", path)
            def move_folder():
                os.rename("tests", "tests_moved")
                os.makedirs("tests")
                write(path, forged)
            moves = {"write": lambda: write(path, forged), "rename": rename_over, "move-folder": move_folder}
            seen = set()
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                for name, move in moves.items():
                    try:
                        move()
                        time.sleep(0.0005)
                        write(path, original)
                    except OSError as exc:
                        if name not in seen:
                            seen.add(name)
                            os.write(2, f"swap {name} refused: {errno.errorcode[exc.errno]}\\n".encode())
        threading.Thread(target=_swap_loop, daemon=True).start()
    """)


def new_conftests(ws: Path) -> None:
    for rel in ("conftest.py", "logstats/conftest.py", "tests/conftest.py"):
        _write(ws, rel, FORCE_PASS_PLUGIN + "\ndef pytest_configure(config):\n"
                        "    config.pluginmanager.register(ForcePass())\n")


def ini_adds_options(ws: Path) -> None:
    _write(ws, "logstats/_force.py", FORCE_PASS_PLUGIN + "\nplugin = ForcePass()\n"
                                    "def pytest_configure(config):\n    config.pluginmanager.register(plugin)\n")
    _write(ws, "pytest.ini", f"[pytest]\naddopts = -p logstats._force --deselect {FAILING}\n")


def pth_file(ws: Path) -> None:
    _write(ws, "zz_evil.pth", "import os; os.environ['PDBGYM_RESULT_CHANNEL'] = '/dev/null'\n")


def stdlib_shadows(ws: Path) -> None:
    _write(ws, "json.py", "def dumps(*a, **k):\n    return '{}'\ndef loads(*a, **k):\n    return {}\n")
    _write(ws, "unittest.py", "import os\nos._exit(0)\n")


def usercustomize_and_user_site(ws: Path) -> None:
    code = "import atexit, os\natexit.register(lambda: os._exit(0))\n"
    _write(ws, "usercustomize.py", code)
    _write(ws, ".sandbox_home/.local/lib/python3.11/site-packages/usercustomize.py", code)
    _write(ws, ".sandbox_home/.pythonrc.py", code)


def shadow_test_runner_package(ws: Path) -> None:
    _write(ws, "_pytest/__init__.py", "import os\nos._exit(0)\n")
    _write(ws, "pdbgym/__init__.py", "import os\nos._exit(0)\n")


ATTACKS: dict[str, tuple[Callable[[Path], None], str]] = {
    # name: (attack, what must be seen: "ignored:<path>", "tampered" or "unsolved")
    "pytest.py at the repo root": (shadow_pytest, "ignored:pytest.py"),
    "sitecustomize.py patching json.dumps": (sitecustomize_patches_json, "ignored:sitecustomize.py"),
    "atexit hook rewriting results": (atexit_rewrites_results, "unsolved"),
    "os._exit(0) from an atexit hook": (atexit_exits_zero, "unsolved"),
    "os._exit(0) in the middle of the run": (exit_zero_mid_run, "tampered"),
    "_pytest internals replaced at import": (patch_pytest_internals, "tampered"),
    "hookwrapper plugin registered at import": (register_hookwrapper_plugin, "tampered"),
    "passing reports replayed through the hook": (replay_reports_through_the_hook, "tampered"),
    "test function's code swapped": (monkeypatch_test_function, "tampered"),
    "AssertionError and runtest replaced": (replace_assertion_error, "tampered"),
    "report plugin's functions patched": (patch_the_report_plugin, "unsolved"),
    "report plugin's closure cells rewritten": (patch_the_report_plugin_cells, "tampered"),
    "fake result files": (fake_result_files, "unsolved"),
    "records written to the result channel": (write_to_result_channel, "tampered"),
    "test file edited": (edit_the_test, "ignored:tests/test_report.py"),
    # Under bwrap the tree's test files are read-only for the run: the rewrites fail (EROFS); without
    # the binds the plugin's checks make them tampered (tests/env/test_grading_boundary.py).
    "test file rewritten at run time": (rewrite_tests_at_run_time, "unsolved"),
    "test file rewritten, then restored by itself": (lambda ws: rewrite_tests_at_run_time(ws, restore=True),
                                                     "unsolved"),
    "test file swapped by a thread during the run": (swap_tests_from_a_thread, "unsolved"),
    "new conftest.py files": (new_conftests, "ignored:logstats/conftest.py"),
    "pytest.ini with addopts": (ini_adds_options, "ignored:pytest.ini"),
    ".pth file": (pth_file, "ignored:zz_evil.pth"),
    "json.py and unittest.py shadowing the stdlib": (stdlib_shadows, "ignored:unittest.py"),
    "usercustomize and the user site in HOME": (usercustomize_and_user_site, "ignored:usercustomize.py"),
    "_pytest/ and pdbgym/ packages at the root": (shadow_test_runner_package, "ignored:_pytest/__init__.py"),
}


def _graded(task, sandbox, attack: Callable[[Path], None]) -> GradeResult:
    with Workspace.create(task.repo) as ws:
        attack(ws.path)
        return grade(task, ws.path, sandbox)


@needs_bwrap
@pytest.mark.parametrize("name", list(ATTACKS))
def test_attack_never_grades_solved(task, sandbox, name):
    attack, expected = ATTACKS[name]
    graded = _graded(task, sandbox, attack)
    assert not graded.final_test_passed, f"{name}: graded solved\n{graded.output[-2000:]}"
    if expected == "tampered":
        assert graded.tampered, f"{name}: not detected as tampered: {graded.fail_to_pass}\n{graded.output[-1500:]}"
    elif expected.startswith("ignored:"):
        assert expected.split(":", 1)[1] in graded.ignored_files, graded.ignored_files
    assert graded.fail_to_pass[FAILING] != "passed" or graded.tampered


@needs_bwrap
def test_a_thread_swapping_test_files_is_refused_by_the_read_only_binds(task, sandbox):
    """The race the plugin's hash checks cannot close (a swap between a check and pytest's read) is
    closed by the sandbox: every write, rename over and folder move of the test file fails."""
    graded = _graded(task, sandbox, swap_tests_from_a_thread)
    assert not graded.final_test_passed
    assert graded.fail_to_pass[FAILING] == "failed", (graded.fail_to_pass, graded.output[-1500:])
    assert "swap write refused: EROFS" in graded.output, graded.output[-1500:]
    for move in ("rename", "move-folder"):
        assert f"swap {move} refused: E" in graded.output, graded.output[-1500:]
    assert not graded.tampered, graded.tampered  # nothing changed, so nothing to flag


@needs_bwrap
def test_attack_on_a_fixed_workspace_is_still_caught(task, sandbox):
    """Forgery next to a correct fix still ends tampered: the verdict does not depend on the bug."""
    def fixed_and_forged(ws: Path) -> None:
        from pdbgym.tasks.patches import apply_patch

        apply_patch(ws, task.patch)
        write_to_result_channel(ws)

    graded = _graded(task, sandbox, fixed_and_forged)
    assert graded.tampered and not graded.final_test_passed


@needs_bwrap
def test_symlinks_out_of_the_workspace_never_reach_grading(task, sandbox, tmp_path):
    secret = tmp_path / "host-only" / "secret.py"
    secret.parent.mkdir()
    secret.write_text("print('HOST-SECRET-7f3a')\nVALUE = 1\n")

    def links(ws: Path) -> None:
        os.symlink(secret, ws / "logstats" / "leak.py")
        os.symlink("/etc", ws / "etc_copy")
        os.symlink("../../..", ws / "logstats" / "up")
        _append_to_package(ws, "from logstats import leak\n")

    graded = _graded(task, sandbox, links)
    assert not graded.final_test_passed
    for rel in ("logstats/leak.py", "etc_copy", "logstats/up"):
        assert "source text only" in graded.ignored_files[rel]
    assert "HOST-SECRET-7f3a" not in graded.output


@needs_bwrap
def test_links_the_agent_makes_are_listed_not_taken(task, sandbox):
    """Grading takes the agent's change as source text: a link it made, even one inside the project, is
    listed with the reason and the task's file stays as it was."""
    def fix_through_a_link(ws: Path) -> None:
        from pdbgym.tasks.patches import apply_patch

        apply_patch(ws, task.patch)
        (ws / "logstats" / "report.py").rename(ws / "logstats" / "report_impl.py")
        os.symlink("report_impl.py", ws / "logstats" / "report.py")

    graded = _graded(task, sandbox, fix_through_a_link)
    assert not graded.final_test_passed
    assert "source text only" in graded.ignored_files["logstats/report.py"]
    assert "logstats/report_impl.py" in graded.changed_files


@needs_bwrap
def test_reference_fix_grades_solved_on_every_builtin_task(sandbox):
    """No false tampered: the hardened grading passes every built-in task's own fix."""
    from pdbgym.tasks.patches import apply_patch

    failures = {}
    for task in resolve_tasks("builtin"):
        with Workspace.create(task.repo) as ws:
            apply_patch(ws.path, task.patch)
            graded = grade(task, ws.path, sandbox)
        if not graded.final_test_passed or graded.tampered or graded.ignored_files:
            failures[task.instance_id] = (graded.tampered, graded.ignored_files, graded.output[-800:])
    assert not failures, failures


POTENT = ["pytest.py at the repo root", "_pytest internals replaced at import", "hookwrapper plugin registered at import",
          "test function's code swapped", "AssertionError and runtest replaced", "new conftest.py files",
          "json.py and unittest.py shadowing the stdlib"]


@needs_bwrap
@pytest.mark.parametrize("name", POTENT)
def test_attack_fools_a_plain_pytest_run(task, sandbox, name):
    """The control: each of these attacks does make a plain ``python -m pytest`` in the workspace (the
    repo first on sys.path, the agent's files all present) exit 0 on the unfixed bug."""
    import sys

    from pdbgym.sandbox import Limits, sandbox_env

    with Workspace.create(task.repo) as ws:
        ATTACKS[name][0](ws.path)
        result = sandbox.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *task.all_tests],
                             ws.path, Limits(wall_time_s=60), env=sandbox_env(ws.path))
    assert result.returncode == 0, result.output[-1500:]
