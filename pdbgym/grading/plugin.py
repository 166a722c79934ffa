"""The report plugin of the grading run: each test phase's outcome leaves the process as it is reported.

Built by ``plugin_from_env`` and registered by ``pdbgym.grading.launch`` before pytest starts and before
any project module is imported; the launcher then drops pdbgym's modules from ``sys.modules``, so pytest alone
holds the plugin. When built it takes the result channel (the write end of the host's pipe, inherited at the
descriptor ``PDBGYM_RESULT_CHANNEL`` names; the variable is removed) onto a private descriptor, installs
the guard (``pdbgym.grading.guard``: an audit hook refusing interpreter machinery from the lines
the agent wrote, which ``PDBGYM_AGENT_LINES`` lists), and takes a snapshot of what the verdict depends
on: the functions and classes of pytest, ``_pytest``, pluggy and pytest-timeout, and the builtins. Each
record is one JSON line with a sequence number, written with ``os.write`` as pytest reports it, so
nothing the project does later (an exit hook, a patched ``json``) can take a record back.

The hooks are closures over everything they use (the descriptor, ``os.write``, ``json.dumps``, the
snapshot, even ``str`` and ``getattr``), so replacing a name in this module, in ``os``, ``json`` or in
the builtins changes nothing they do; such a replacement is reported by the self-check. At session end
the plugin checks that snapshot, every hook implementation (pytest's, pluggy's, installed packages', a
conftest's pristine code, or project code the agent did not write), every collected test function
against the code compiled from its pristine file, that each test reported passed entered that code
(for a test run through a wrapper the agent wrote, the pristine function it wraps, watched to its end: a
test whose body raised is not passed, whatever the wrapper returned),
the guard's findings, classes of the agent's that call anything equal, and the trace hooks, and sends the end record with the exit status and what the check found. A
collection error (a test module that fails to import) is sent as its own record, and so is each
subtest's report (pytest's ``subtests`` fixture, ``unittest``'s ``subTest``), which pytest gives as
one more ``call`` report of its test. The
host (``pdbgym.grading.verdict``) decides; this file only reports.
"""

from __future__ import annotations

import builtins
import dis
import fcntl
import hashlib
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, NotRequired, TypedDict

import pytest

from pdbgym.grading import seccomp
from pdbgym.grading.guard import (
    AgentCode,
    AgentLines,
    PristineCode,
    agent_lines_from_env,
    always_equal_classes,
    callable_codes,
    install_audit_hook,
    library_dirs,
)
from pdbgym.grading.layout import import_roots, project_names
from pdbgym.grading.protect import is_protected_path, protected_digests

if TYPE_CHECKING:  # annotations only: the sandbox's start-up imports stay few
    from collections.abc import Generator
    from types import CodeType, FrameType

CHANNEL_ENV = "PDBGYM_RESULT_CHANNEL"
KEY_ENV = "PDBGYM_RUN_KEY"  # a secret per run that every record carries (the host checks it)
ROOT_ENV = "PDBGYM_TEST_ROOT"  # set by the launcher: the project folder whose test files are hashed
_PRIVATE_FD_MIN = 850  # the channel's descriptor lives far above what a project usually opens
_WATCHED_PACKAGES = ("_pytest", "pytest", "pluggy", "pytest_timeout")
_WATCHED_HOOKS = (
    "pytest_runtestloop", "pytest_runtest_protocol", "pytest_runtest_setup", "pytest_runtest_call",
    "pytest_runtest_teardown", "pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_pyfunc_call",
    "pytest_report_teststatus",
)
# Replacements pytest makes itself at configure time: (module, names...) -> (module, attribute) of the
# one function allowed in its place.
_PYTEST_OWN_PATCHES = {
    ("_pytest.config", "Config", "_getini_unknown_type"): ("_pytest.legacypath", "Config__getini_unknown_type"),
}


def _open_channel() -> int | None:
    """The write end of the host's pipe, moved to a private descriptor. The variable holds the number
    this process inherited it at, never a path: nothing of the channel is named where the project
    could replace it."""
    import stat  # in the sandbox: this module's start-up imports stay few

    number = os.environ.pop(CHANNEL_ENV, None)
    if not number:
        return None
    fd = int(number)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):  # a wrong number must not write records into a file
        raise RuntimeError(f"{CHANNEL_ENV}={number} is not the inherited result pipe")
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _PRIVATE_FD_MIN)
    os.close(fd)
    # From here the kernel refuses to put anything else under the channel's number (pdbgym.grading.seccomp);
    # ctypes, which installing the filter needed, leaves sys.modules, so a project's import of it is
    # an import the guard sees.
    before = set(sys.modules)
    seccomp.install(private)
    for name in set(sys.modules) - before:
        del sys.modules[name]
    return private


def _subtest_report_types() -> tuple[type, ...]:
    """The report class of subtests: pytest 9 and later report both its ``subtests`` fixture and
    ``unittest``'s ``subTest`` through it. Before pytest 9 there is none, and a failing unittest subtest
    fails its test's own call."""
    try:
        from _pytest.subtests import SubtestReport  # pytest >= 9 only
    except ImportError:
        return ()
    return (SubtestReport,)


class _RunState(TypedDict):
    """What the hooks of one run share: record and phase counters, the collected tests' functions and code,
    the findings so far, the snapshot of pytest's callables (``snap``) and the run's config."""

    seq: int
    phases: int
    collect_errors: int
    subtests: int
    tests: dict[str, tuple[object, CodeType]]
    bodies: dict[str, CodeType]  # a test run through a wrapper the agent wrote: its pristine body's code
    raised: set[str]  # tests whose pristine body (of ``bodies``) ended by raising in some call
    changed: list[str]
    items: list[str]
    entered: set[str]
    snap: NotRequired[dict[tuple[str, ...], object]]
    config: NotRequired[pytest.Config]


class ReportPlugin:
    """The object registered with pytest: its hooks are the closures :func:`_build` makes, held as instance
    attributes (plain functions, so nothing is looked up through a class when pytest calls them).

    It is hashable (by identity), as pluggy needs: a hook called for a node below a folder with its own
    ``conftest.py`` goes through ``subset_hook_caller``, which keeps the plugins in a set. A
    ``types.SimpleNamespace`` (unhashable) ended such runs in an INTERNALERROR.
    """

    def __init__(self, **hooks: Callable[..., object]) -> None:
        vars(self).update(hooks)


def _build(fd: int | None, root: str | None,  # noqa: C901 - one closure scope
           agent_lines: AgentLines | None = None, key: str | None = None) -> ReportPlugin:
    """The plugin object; every name its hooks use is bound here, once, before project code runs.
    ``agent_lines`` are the lines the agent wrote, by repo-relative file; None: no agent code in this run."""
    write, dumps, getpid, fstat = os.write, json.dumps, os.getpid, os.fstat
    modules, builtin_names = sys.modules, vars(builtins)
    gettrace, getprofile, setprofile = sys.gettrace, sys.getprofile, sys.setprofile
    abspath, dirname, relpath, sep = os.path.abspath, os.path.dirname, os.path.relpath, os.sep
    str_, int_, bool_, list_, len_, tuple_ = str, int, bool, list, len, tuple
    getattr_, isinstance_, callable_, vars_, type_ = getattr, isinstance, callable, vars, type
    descriptors = (property, staticmethod, classmethod)
    protected = is_protected_path
    state: _RunState = {"seq": 0, "phases": 0, "collect_errors": 0, "subtests": 0, "tests": {}, "bodies": {},
                        "raised": set(), "changed": [], "items": [], "entered": set()}
    range_ = range
    returns = frozenset(dis.opmap[n] for n in ("RETURN_VALUE", "RETURN_CONST") if n in dis.opmap)
    yields = frozenset(dis.opmap[n] for n in ("YIELD_VALUE",) if n in dis.opmap)
    sha256, join, isfile = hashlib.sha256, os.path.join, os.path.isfile
    digests = protected_digests(root) if root else {}
    subtest_reports = _subtest_report_types()
    libraries = library_dirs(abspath(root)) if root else ()
    agent = AgentCode(abspath(root), agent_lines, libraries) if root and agent_lines is not None else None
    guard_findings = install_audit_hook(agent) if agent is not None else list_
    always_equal, unwrap = always_equal_classes, callable_codes
    # pytest's internals load with the plugin's set-up, after the guard above holds the run
    from _pytest.assertion.rewrite import _rewrite_test
    from _pytest.python import Function

    pristine = PristineCode(abspath(root), protected, _rewrite_test) if root else None
    roots, module_type = tuple_(r.rstrip(sep) + sep for r in import_roots(root)) if root else (), type_(sys)
    own_names = project_names([r.rstrip(sep) for r in roots])

    def foreign_modules() -> dict[str, str]:
        # Project modules imported from elsewhere than the repo (a released copy in the environment):
        # the tests then ran that copy, not the code under test. Reported, not judged as forgery.
        found: dict[str, str] = {}
        for name, module in list_(modules.items()):
            if type_(module) is not module_type or name.partition(".")[0] not in own_names:
                continue
            filename = vars_(module).get("__file__")
            if isinstance_(filename, str_) and not abspath(filename).startswith(roots):
                found[name] = filename
        return dict(list_(found.items())[:20])

    def digest_now(rel: str) -> str | None:
        path = join(root or "", rel)
        if not isfile(path):
            return None
        with open(path, "rb") as handle:
            return sha256(handle.read()).hexdigest()

    def check_files(rels: list[str], when: str) -> None:
        for rel in rels:
            if rel in digests and digest_now(rel) != digests[rel]:
                state["changed"].append(f"test file {rel} changed {when}")

    def pipe() -> int | None:
        # The inode of what the channel's descriptor names now: the host's pipe, unless it was replaced.
        try:
            return fstat(fd).st_ino if fd is not None else None
        except OSError:
            return None

    def send(record: dict[str, object]) -> None:
        if fd is None:
            return
        record["seq"] = state["seq"]
        record["key"] = key
        state["seq"] += 1
        data = (dumps(record, ensure_ascii=True) + "\n").encode("ascii")
        while data:
            data = data[write(fd, data):]

    def snapshot() -> dict[tuple[str, ...], object]:
        taken: dict[tuple[str, ...], object] = {}
        for name, module in list_(modules.items()):
            if module is None or name.split(".")[0] not in _WATCHED_PACKAGES:
                continue
            taken[(name,)] = module
            for attr, value in list_(vars_(module).items()):
                if not callable_(value):
                    continue
                taken[(name, attr)] = value
                if isinstance_(value, type_) and value.__module__ == name:
                    for member, item in list_(vars_(value).items()):
                        if callable_(item) or isinstance_(item, descriptors):
                            taken[(name, attr, member)] = item
        for attr, value in list_(builtin_names.items()):
            taken[("builtins", attr)] = value
        return taken

    def current_value(key: tuple[str, ...]) -> object:
        if len_(key) == 1:
            return modules.get(key[0])
        owner: object = builtin_names if key[0] == "builtins" else modules.get(key[0])
        for part in key[1:]:
            if owner is None:
                return None
            owner = (owner if isinstance_(owner, dict) else vars_(owner)).get(part)
        return owner

    def allowed_replacement(key: tuple[str, ...], current: object) -> bool:
        allowed = _PYTEST_OWN_PATCHES.get(key)
        module = modules.get(allowed[0]) if allowed else None
        return module is not None and vars_(module).get(allowed[1]) is current

    def check_snapshot() -> list[str]:
        return [f"{'.'.join(key)} was replaced during the run" for key, value in state["snap"].items()
                if (now := current_value(key)) is not value and not allowed_replacement(key, now)]

    def trusted_dirs() -> tuple[str, ...]:
        # Installed packages and the standard library are read-only in the sandbox: a plugin an ini names
        # from there (xdist, hypothesis) is no one's forgery.
        dirs = [dirname(abspath(__file__)), *libraries]
        for name in _WATCHED_PACKAGES:
            module = modules.get(name)
            if module is not None and getattr_(module, "__file__", None):
                dirs.append(dirname(abspath(module.__file__)))
        return tuple_(dirs)

    def hook_problem(hook_name: str, function: object, config: pytest.Config | None, root: str) -> str | None:
        """Why a hook implementation is not trusted: pytest, pluggy, pytest-timeout and this plugin are;
        a conftest or test file only with its pristine code; other project code only when the agent did
        not change it (in a run without agent code, all of it). The implementation is unwrapped (bound
        methods, ``functools.partial``, ``__wrapped__``, a callable object's ``__call__``): every code
        object reached must be trusted, and one that reaches no code at all is not."""
        codes = unwrap(function)
        if not codes:
            return f"hook {hook_name} is implemented by {type_(function)!r:.60}, which holds no code to check"
        for code in codes:
            problem = code_problem(hook_name, code, config, root)
            if problem is not None:
                return problem
        return None

    def code_problem(hook_name: str, code: CodeType, config: pytest.Config | None, root: str) -> str | None:
        filename = abspath(code.co_filename)
        if filename.startswith(trusted_dirs()):
            return None
        if filename.startswith(root + sep):
            rel = relpath(filename, root)
            if protected(rel):
                why = pristine.mismatch(code, config) if pristine is not None else None
                return None if why is None else f"hook {hook_name}: {why}"
            if agent is None or not agent.code_is_agent(code):
                return None
        return f"hook {hook_name} implemented by untrusted code in {filename}"

    def check_hooks(session: pytest.Session, root: str) -> list[str]:
        problems = []
        for hook_name, caller in list_(vars_(session.config.pluginmanager.hook).items()):
            for impl in getattr_(caller, "get_hookimpls", list_)():
                problem = hook_problem(hook_name, impl.function, session.config, root)
                if problem is not None:
                    problems.append(problem)
        return problems

    def pristine_body(function: object, config: pytest.Config) -> CodeType | None:
        """The code of the test function a wrapper wraps (``__wrapped__``, as ``functools.wraps`` leaves it),
        when it is a test file's pristine code; None when the chain reaches none within a few links."""
        for _ in range_(16):
            function = getattr_(function, "__wrapped__", None)
            code = getattr_(function, "__code__", None)
            if code is None:
                return None
            filename = abspath(code.co_filename)
            if root and filename.startswith(abspath(root) + sep) and protected(relpath(filename, abspath(root))) \
                    and pristine is not None and pristine.mismatch(code, config) is None:
                return code
        return None

    def check_tests(root: str) -> list[str]:
        problems = list_(state["items"])
        for nodeid, (function, code) in state["tests"].items():
            # Code from outside the tree (a decorator of the standard library or an installed package,
            # like mock.patch) is not the project's; inside it, test files must hold their pristine code
            # and no test may run code the agent wrote, unless that code is a wrapper of the pristine test
            # (a project decorator the agent fixed, as freezegun's freeze_time): then the test's body must
            # have run and not raised (``pytest_runtest_call`` watches it), which is checked as it reports.
            filename = abspath(code.co_filename)
            if getattr_(function, "__code__", None) is not code:
                problems.append(f"the code of test {nodeid} was replaced during the run")
            elif agent is not None and nodeid not in state["bodies"] and agent.code_is_agent(code) and not (
                    filename.startswith(root + sep) and protected(relpath(filename, root))):
                # (a test file the agent edited runs only in its own workspace run: grading takes none)
                problems.append(f"test {nodeid} runs code from {code.co_filename}, which the agent wrote")
        if gettrace() is not None or getprofile() is not None:
            problems.append("a trace or profile hook was left installed")
        return problems

    @pytest.hookimpl
    def pytest_collection_finish(session: pytest.Session) -> None:
        for item in session.items:
            if not isinstance_(item, Function):
                continue  # doctests and items of a conftest's own collector have no test function
            function = getattr_(item, "obj", None)
            code = getattr_(function, "__code__", None)
            if code is None:
                state["items"].append(f"test {item.nodeid} has no code of its own ({type_(function)!r:.60})")
                continue
            state["tests"][item.nodeid] = (function, code)
            if agent is not None and agent.code_is_agent(code):
                body = pristine_body(function, session.config)
                if body is not None:
                    state["bodies"][item.nodeid] = body
            why = pristine.mismatch(code, session.config) if pristine is not None else None
            if why is None and str_(getattr_(item, "path", "")) == abspath(code.co_filename) \
                    and code.co_name != getattr_(item, "originalname", code.co_name):
                why = f"runs {code.co_name}, another function of its file"
            if why is not None:
                state["items"].append(f"test {item.nodeid}: {why}")
        # Modules pytest imported since load (its lazily loaded parts) are watched from here on too.
        state["snap"] = {**snapshot(), **state["snap"]}

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectstart(collector: pytest.Collector) -> None:
        # A test module or conftest is read right after this; the project's code may have run since.
        path = str_(getattr_(collector, "path", "") or "")
        if root and path.startswith(root + sep):
            rel = relpath(path, root)
            check_files([rel, join(rel, "conftest.py")], "before pytest read it")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(report: pytest.TestReport) -> None:
        if isinstance_(report, subtest_reports):
            # Each subtest is one more "call" report of its test: sent as its own kind, so the test's own
            # phases stay one record each (the verdict counts a failed subtest against its test).
            state["subtests"] += 1
            send({"kind": "subtest", "nodeid": str_(report.nodeid), "outcome": str_(report.outcome),
                  "xfail": bool_(getattr_(report, "wasxfail", False))})
            return
        state["phases"] += 1
        if report.when == "call" and report.outcome == "passed" and report.nodeid in state["tests"] \
                and report.nodeid not in state["entered"]:
            state["items"].append(f"test {report.nodeid} passed, but its collected code never ran")
        if report.when == "call" and report.outcome == "passed" and report.nodeid in state["raised"]:
            state["items"].append(f"test {report.nodeid} passed, but its body raised: the wrapper the agent wrote "
                                  "around it swallowed the failure")
        send({"kind": "phase", "nodeid": str_(report.nodeid), "when": str_(report.when),
              "outcome": str_(report.outcome), "xfail": bool_(getattr_(report, "wasxfail", False))})

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
        # An independent sign that the pristine test body ran: a profile hook that lives only from here
        # until the test's collected code object is entered (pytest calls it a few frames down), then
        # gives the previous hook back. A test reported passed whose code was never entered is forged.
        entry = state["tests"].get(item.nodeid)
        if entry is None:
            yield
            return
        code, previous, nodeid = entry[1], getprofile(), item.nodeid
        body = state["bodies"].get(nodeid)

        def watch(frame: FrameType, event: str, arg: object) -> None:
            if event == "call" and frame.f_code is code:
                state["entered"].add(nodeid)
                setprofile(previous)

        def watch_body(frame: FrameType, event: str, arg: object) -> None:
            # Through a wrapper the agent wrote, the pristine body is watched to its end: entered, and each
            # call's last return either a return or a yield (an await), never the instruction that raised.
            if frame.f_code is not body:
                return
            if event == "call":
                state["entered"].add(nodeid)
            elif event == "return":
                opcode = body.co_code[frame.f_lasti] if 0 <= frame.f_lasti < len_(body.co_code) else -1
                if opcode not in returns and opcode not in yields:
                    state["raised"].add(nodeid)

        if body is not None:
            setprofile(watch_body)
            try:
                yield
            finally:
                if getprofile() is watch_body:
                    setprofile(previous)
                else:
                    state["items"].append(f"test {nodeid}: the watch on its body was removed while it ran")
            return
        setprofile(watch)
        try:
            yield
        finally:
            if getprofile() is watch:
                setprofile(previous)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collectreport(report: pytest.CollectReport) -> None:
        # A test module that fails to import (a syntax error, a name the tests import gone) is an error
        # in pytest's closing line and yields no test phases: its record keeps the two in agreement.
        if report.failed:
            state["collect_errors"] += 1
            send({"kind": "collect", "nodeid": str_(report.nodeid), "outcome": "failed"})

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(config: pytest.Config) -> None:
        state["config"] = config

    @pytest.hookimpl
    def pytest_plugin_registered(plugin: object, manager: pytest.PytestPluginManager) -> None:
        # Checked as it arrives: a plugin that unregisters itself before the end is seen here. (Its name
        # is asked of the manager: pytest 7's hook has no ``plugin_name`` argument.)
        plugin_name = manager.get_name(plugin)
        config = state.get("config")
        root_now = abspath(root) if root else ""
        for name in dir(plugin) if plugin is not None else ():
            if name.startswith("pytest_"):
                problem = hook_problem(name, getattr_(plugin, name, None), config, root_now)
                if problem is not None:
                    state["items"].append(f"plugin {plugin_name!r} registered during the run: {problem}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(session: pytest.Session) -> None:
        root = str_(session.config.rootpath)
        check_files(list_(digests), "during the run")
        problems = state["changed"] + check_snapshot() + check_hooks(session, root) + check_tests(root) + \
            guard_findings() + (always_equal(agent) if agent is not None else [])
        problems = list_(dict.fromkeys(problems))  # one line per distinct finding
        send({"kind": "end", "exitstatus": int_(session.exitstatus), "phases": state["phases"], "pipe": pipe(),
              "collect_errors": state["collect_errors"],
              "subtests": state["subtests"], "selfcheck": problems[:20], "foreign": foreign_modules()})

    state["snap"] = snapshot()
    send({"kind": "start", "pid": getpid(), "pipe": pipe()})
    return ReportPlugin(pytest_collection_finish=pytest_collection_finish,
                        pytest_collectstart=pytest_collectstart,
                        pytest_collectreport=pytest_collectreport,
                        pytest_runtest_logreport=pytest_runtest_logreport,
                        pytest_sessionfinish=pytest_sessionfinish,
                        pytest_plugin_registered=pytest_plugin_registered,
                        pytest_configure=pytest_configure,
                        pytest_runtest_call=pytest_runtest_call)


def plugin_from_env() -> ReportPlugin:
    """The plugin for this run, from what the launcher put in the environment (the channel's descriptor,
    the project folder, the agent's lines; each variable is removed as it is read). Called once per run,
    after the launcher set them and before any project code runs; importing this module builds nothing,
    so a pytest fork server (``pdbgym.grading.server``) can import it ahead of the run."""
    key = os.environ.pop(KEY_ENV, None)
    return _build(_open_channel(), os.environ.pop(ROOT_ENV, None), agent_lines_from_env(), key)
