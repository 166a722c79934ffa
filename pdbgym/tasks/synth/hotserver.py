"""A pytest session that stays open: it imports and collects the clean project once, then tries mutants.

Started once per pool worker inside the sandbox, in a private clean copy of the project. After
collection it serves jobs instead of running the suite: each job names a mutated file and the tests
to run. The server compiles the mutant, finds the one function whose code changed
(:mod:`hotpatch`), forks, and the child swaps that function's code into its live function objects
and runs the job's already-collected test items through pytest's own run protocol (fixtures,
pytest-timeout and the outcome probe all apply). No interpreter start, no pytest start-up, no import
of the project, no collection: a mutant costs a fork and its tests.

A function that runs at import time left its effect in module-level state (rule tables built by
calling it): swapping its code would not rebuild that state. Its mutant is tried by re-executing the
mutated module in the child, in the module's own namespace, when that is known to give what a fresh
import would: the module's top level only imports, defines plain functions, binds names and calls its
own functions (:func:`reexecutable`), re-running it raises nothing, and every name it rebinds held a
value nothing else refers to (or an equal immutable one), so no other module, test or closure keeps
the clean object. A job may carry a ``narrowing`` (:func:`narrowed`): the child then runs only the
tests that can see the names whose value the re-execution changed.

A mutant the server cannot apply either way (code outside a function changed, a function the test
modules never loaded, a test not collected here, a module that cannot be re-executed safely) is
answered ``patched: false`` with the reason, and the caller runs it the ordinary way, from files.

Protocol: after collection one ``READY {json}`` line; then one line per job on stdin, holding the path
of a JSON job file (``file``, ``source_path``, ``tests``, ``timeouts``, ``out``, ``log``,
``wall_time_s``, ``changed`` (a path the child writes the names a re-execution changed to), and
optionally ``narrowing`` (see :func:`narrowed`)); the run stops at the first test past its timeout. One
``RESULT {json}`` line back per job (``patched``, ``reason``, ``returncode``, ``timed_out``, and for a
re-executed module ``changed``, the names whose value changed). The
outcome file ``out`` is the probe's JSON. Functions listed in the file named by ``PDBGYM_HOT_IMPORT_TIME``
(one ``path.py:line`` key per line) ran at import time, so a mutant of them is never hot-applied.

Run as ``python -m pdbgym.tasks.synth.hotserver PYTEST_ARGS...`` in the project folder; this module
runs inside the project's interpreter and imports nothing from pdbgym beyond its stdlib-only siblings.
"""

from __future__ import annotations

import ast
import gc
import json
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FunctionType, ModuleType
from typing import IO

import pytest

from pdbgym.tasks.synth import hotpatch
from pdbgym.tasks.synth.zygote import RESULT_PREFIX, wait_child

READY_PREFIX = "READY "
IMPORT_TIME_ENV = "PDBGYM_HOT_IMPORT_TIME"
PROBE_MODULE = "pdbgym.tasks.synth.probe"
FunctionKey = tuple[str, str, int]  # (file, qualified name, first line)
REEXEC_REFUSED = 98  # a child's exit code: the module could not be re-executed safely (reason in its log)
_IMMUTABLE = (str, bytes, int, float, complex, bool, type(None), re.Pattern)


def reexecutable(tree: ast.Module) -> str:
    """Empty when a module's top level only imports, defines undecorated functions, binds plain names
    and calls functions it defines (so running it again has no effect outside the module's namespace,
    short of what those functions do); else why not."""
    own_functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.decorator_list:
                return f"line {node.lineno}: a decorated function"
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if all(isinstance(t, ast.Name) for t in targets):
                continue
            return f"line {node.lineno}: an assignment to something other than a name"
        if isinstance(node, ast.Expr):
            value = node.value
            if isinstance(value, ast.Constant):
                continue
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in own_functions:
                continue
        return f"line {node.lineno}: a top-level {type(node).__name__}"
    return ""


def _same_immutable(a: object, b: object) -> bool:
    """Equal values nobody can change: a holder of the clean one sees what a fresh import gives."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(map(_same_immutable, a, b))  # type: ignore[arg-type]
    if isinstance(a, frozenset):
        return a == b and all(isinstance(x, _IMMUTABLE) for x in a)
    return isinstance(a, _IMMUTABLE) and a == b


def code_objects(code: CodeType) -> list[CodeType]:
    """``code`` and every code object nested in it."""
    found = [code]
    for const in code.co_consts:
        if isinstance(const, CodeType):
            found.extend(code_objects(const))
    return found


def code_names(code: CodeType) -> set[str]:
    """Every global and attribute name a code object and the code nested in it mention."""
    return set().union(*(nested.co_names for nested in code_objects(code)))


def _unchanged(before: object, after: object) -> bool:
    if before is after:
        return True
    if isinstance(before, FunctionType) and isinstance(after, FunctionType):
        return hotpatch.same_tree(before.__code__, after.__code__)
    try:
        return type(before) is type(after) and bool(before == after)
    except Exception:  # noqa: BLE001  (a value that cannot be compared counts as changed)
        return False


def reexecute(module: ModuleType, code: CodeType, others: dict[str, set[str]]) -> tuple[str, set[str]]:
    """Run ``code`` (the mutated module) in ``module``'s namespace. Returns (why the result may not be
    what a fresh import would give, or empty; the names whose value changed). Call with no other
    reference to the module's values held (the function index cleared): a rebound value still referred
    to elsewhere is refused, and so is a changed value whose name another project module mentions
    (``others``: file -> names), since that module may have derived state from the clean value when it
    was imported."""
    namespace = module.__dict__
    old = dict(namespace)
    try:
        exec(code, namespace)  # noqa: S102  (the project's own module, in the sandboxed child)
    except BaseException as exc:  # noqa: BLE001
        return f"re-running {module.__name__} raised {type(exc).__name__}: {exc}", set()
    for name in list(old):
        before = old[name]
        if namespace.get(name, old) is before or _same_immutable(before, namespace.get(name)):
            continue
        # References: ``old``, ``before`` and getrefcount's argument. Any other holder (a ``from m import
        # name`` elsewhere, a closure, a collected test's parameters) would keep the clean value.
        if sys.getrefcount(before) > 3:
            return f"{module.__name__}.{name} of the clean import is still referred to elsewhere", set()
    changed = {name for name, value in namespace.items() if name not in old or not _unchanged(old[name], value)}
    for path, names in others.items():
        if "*" in names:
            return f"{path} does not compile, so what it mentions is unknown", changed
        if names & changed:
            return f"{path} mentions {sorted(names & changed)[0]}, whose value the mutant changes", changed
    return "", changed


def narrowed(tests: list[str], narrowing: dict, changed: list[str] | set[str]) -> list[str]:
    """The tests of ``tests`` that can see a re-executed module's changed names: those that entered
    the mutated function, and those that entered a function reading a changed name
    (``narrowing``: ``{"base": [tests], "readers": {name: [tests]}, "everyone": [names]}``, from
    :meth:`Baseline.narrowing`). All of ``tests`` when a changed name has no entry in ``readers`` (not
    expected to change), or is one whose readers may have been called by other modules at import time
    (``everyone``)."""
    readers, everyone = narrowing["readers"], set(narrowing["everyone"])
    if any(name in everyone or name not in readers for name in changed):
        return list(tests)
    chosen = set(narrowing["base"]).union(*(readers[name] for name in changed))
    return [t for t in tests if t in chosen]


@dataclass
class Plan:
    """How a mutant is applied in the child: code swaps, or re-executing its module (``reexec``)."""

    swaps: list[tuple[list[FunctionType], CodeType]] = field(default_factory=list)
    reexec: tuple[ModuleType, CodeType, dict[str, set[str]]] | None = None


def index_functions(root: str) -> dict[FunctionKey, list[FunctionType]]:
    """Every live function object defined in a file under ``root``, by where its code comes from."""
    index: dict[FunctionKey, list[FunctionType]] = {}
    for obj in gc.get_objects():
        if isinstance(obj, FunctionType):
            code = obj.__code__
            if code.co_filename.startswith(root):
                index.setdefault((code.co_filename, code.co_qualname, code.co_firstlineno), []).append(obj)
    return index


class HotServer:
    """The pytest plugin that replaces the run loop with the job loop."""

    def __init__(self, channel_in: IO[str], channel_out: IO[str], root: str, import_time: set[str]) -> None:
        self.channel_in, self.channel_out = channel_in, channel_out
        self.root, self.import_time = root, import_time
        self.clean_code: dict[str, CodeType] = {}
        self.reexec_refusal: dict[str, str] = {}
        self.names_by_file: dict[str, set[str]] = {}
        self.others: dict[str, dict[str, set[str]]] = {}
        self.collect_errors: list[str] = []

    def _send(self, prefix: str, payload: dict) -> None:
        self.channel_out.write(prefix + json.dumps(payload) + "\n")
        self.channel_out.flush()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.collect_errors.append(report.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        items = {item.nodeid: item for item in session.items}
        functions = index_functions(self.root)
        self._send(READY_PREFIX, {"tests": len(items), "functions": len(functions),
                                  "collect_errors": self.collect_errors})
        for line in self.channel_in:
            if not line.strip():
                continue
            try:
                job = json.loads(Path(line.strip()).read_text())
                result = self._serve(job, items, functions, session)
            except Exception as exc:  # noqa: BLE001  (one bad job must not end the server)
                result = {"patched": False, "reason": f"server error: {type(exc).__name__}: {exc}"}
            self._send(RESULT_PREFIX, result)
        return True

    def _plan(self, job: dict, items: dict[str, pytest.Item], functions: dict[FunctionKey, list[FunctionType]]
              ) -> Plan:
        """How to apply the job's mutant in a child; raises Unpatchable when it cannot be hot."""
        relpath = job["file"]
        path = os.path.join(self.root, relpath)
        if path not in self.clean_code:
            with open(path, "rb") as handle:
                self.clean_code[path] = compile(handle.read(), path, "exec", dont_inherit=True)
        try:
            with open(job["source_path"], "rb") as handle:
                mutated = compile(handle.read(), path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise hotpatch.Unpatchable(f"the mutant does not compile: {exc}") from exc
        plan = hotpatch.plan_patch(self.clean_code[path], mutated)
        missing = [t for t in job["tests"] if t not in items]
        if missing:
            raise hotpatch.Unpatchable(f"{len(missing)} tests were not collected here, e.g. {missing[0]}")
        for swap in plan.swaps:
            # Code that ran at import time already acted; a changed nested function is fine as long as
            # only the closures it made are stale, since those are swapped too.
            if swap.own_change and f"{relpath}:{swap.clean.co_firstlineno}" in self.import_time:
                module = self._module_to_reexecute(path, swap.clean.co_qualname)
                return Plan(reexec=(module, mutated, self._other_modules_names(path)))
        targets = []
        for swap in plan.swaps:
            qualname, first_line = swap.key
            live = [f for f in functions.get((path, qualname, first_line), [])
                    if f.__code__.co_code == swap.clean.co_code]
            if live and swap.clean.co_freevars != swap.mutated.co_freevars:
                raise hotpatch.Unpatchable(f"the free variables of {qualname} changed and it has live closures")
            targets.append((live, swap.mutated))
        if not targets[0][0]:
            raise hotpatch.Unpatchable(f"{plan.outer.clean.co_qualname} is not loaded once the tests are collected")
        return Plan(swaps=targets)

    def _other_modules_names(self, path: str) -> dict[str, set[str]]:
        """file -> names mentioned, for every loaded module of the project but ``path`` (the server
        never imports anything after collection, so this is computed once per path)."""
        if path in self.others:
            return self.others[path]
        others = self.others[path] = {}
        for module in list(sys.modules.values()):
            file = getattr(module, "__file__", None)
            if not file or file == path or not file.startswith(self.root) or not file.endswith(".py"):
                continue
            if file not in self.names_by_file:
                try:
                    with open(file, "rb") as handle:
                        self.names_by_file[file] = code_names(compile(handle.read(), file, "exec", dont_inherit=True))
                except (OSError, SyntaxError, ValueError):
                    self.names_by_file[file] = {"*"}
            others[file] = self.names_by_file[file]
        return others

    def _module_to_reexecute(self, path: str, qualname: str) -> ModuleType:
        if path not in self.reexec_refusal:
            with open(path, "rb") as handle:
                self.reexec_refusal[path] = reexecutable(ast.parse(handle.read()))
        if self.reexec_refusal[path]:
            raise hotpatch.Unpatchable(f"{qualname} runs at import time and its module cannot be re-executed "
                                       f"({self.reexec_refusal[path]})")
        module = next((m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path), None)
        if module is None:
            raise hotpatch.Unpatchable(f"{qualname} runs at import time and its module is not loaded")
        return module

    def _serve(self, job: dict, items: dict[str, pytest.Item], functions: dict[FunctionKey, list[FunctionType]],
               session: pytest.Session) -> dict:
        try:
            plan = self._plan(job, items, functions)
        except hotpatch.Unpatchable as exc:
            return {"patched": False, "reason": str(exc)}
        selected = [items[t] for t in job["tests"]]
        pid = os.fork()
        if pid == 0:
            _run_child(job, plan, selected, session, functions)
        returncode, timed_out = wait_child(pid, float(job["wall_time_s"]))
        if returncode == REEXEC_REFUSED and not timed_out:
            with open(job["log"], errors="replace") as handle:
                return {"patched": False, "reason": handle.read().strip()[-500:]}
        result = {"patched": True, "returncode": returncode, "timed_out": timed_out}
        if plan.reexec is not None:
            try:
                with open(job["changed"]) as handle:
                    result["changed"] = json.load(handle)
                os.unlink(job["changed"])
            except (OSError, ValueError):
                if not timed_out:  # a child cut while re-executing is a timeout like any other
                    return {"patched": False, "reason": "the child re-executed the module but did not say what changed"}
        return result


def _run_child(job: dict, plan: Plan, selected: list[pytest.Item], session: pytest.Session,
               functions: dict[FunctionKey, list[FunctionType]]) -> None:
    """In the forked child: apply the mutant, run the selected items, write outcomes. Never returns."""
    try:
        os.setpgid(0, 0)
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for live, code in plan.swaps:
            for function in live:
                function.__code__ = code
        if plan.reexec is not None:
            functions.clear()  # the index refers to every clean function; the check below counts references
            refusal, changed = reexecute(*plan.reexec)
            if refusal:
                sys.stdout.write(refusal + "\n")
                sys.stdout.flush()
                os._exit(REEXEC_REFUSED)
            if job.get("narrowing"):
                keep = set(narrowed(job["tests"], job["narrowing"], changed))
                selected = [item for item in selected if item.nodeid in keep]
            with open(job["changed"], "w") as handle:  # read by the server, answered to the caller
                json.dump(sorted(changed), handle)
        # The probe as pytest loaded it (-p): importing it here first would stop pytest rewriting its asserts.
        probe = sys.modules[PROBE_MODULE]
        os.environ[probe.OUT_ENV] = job["out"]
        os.environ[probe.STOP_ENV] = "1"
        probe.set_timeouts(selected, job.get("timeouts") or {})
        hook = session.config.hook
        for position, item in enumerate(selected):
            following = selected[position + 1] if position + 1 < len(selected) else None
            hook.pytest_runtest_protocol(item=item, nextitem=following)
            if session.shouldstop:  # a test timed out: the mutant is rejected whatever the rest do
                break
        probe.pytest_sessionfinish(session, 0)
        os._exit(0)
    except BaseException:  # noqa: BLE001  (a child must never fall back into the server loop)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(99)


def main(argv: list[str]) -> int:
    root = os.getcwd() + os.sep
    channel_in = os.fdopen(os.dup(0), "r")
    channel_out = os.fdopen(os.dup(1), "w")
    log = os.open(".hotserver.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)  # pytest's own output must not reach the protocol channel
    os.dup2(log, 2)
    marks = os.environ.get(IMPORT_TIME_ENV)
    import_time = set(Path(marks).read_text().split()) if marks else set()
    sys.path.insert(0, os.getcwd())
    plugin = HotServer(channel_in, channel_out, root, import_time)
    code = pytest.main(argv, plugins=[plugin])
    if not isinstance(code, int) or code not in (0, 5):
        channel_out.write(f"EXIT {int(code)}\n")
        channel_out.flush()
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
