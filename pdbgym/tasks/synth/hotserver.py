"""A pytest session that stays open: it imports and collects the clean project once, then tries mutants.

Started once per pool worker inside the sandbox, in a private clean copy of the project. After
collection it serves jobs instead of running the suite: each job names a mutated file and the tests
to run. The server compiles the mutant, finds the one function whose code changed
(:mod:`hotpatch`), forks, and the child swaps that function's code into its live function objects
and runs the job's already-collected test items through pytest's own run protocol (fixtures,
pytest-timeout and the outcome probe all apply). No interpreter start, no pytest start-up, no import
of the project, no collection: a mutant costs a fork and its tests.

A mutant the server cannot apply that way (code outside a function changed, a function that runs at
import time, a function the test modules never loaded, a test not collected here) is answered
``patched: false`` with the reason, and the caller runs it the ordinary way, from files.

Protocol: after collection one ``READY {json}`` line; then one line per job on stdin, holding the path
of a JSON job file (``file``, ``source_path``, ``tests``, ``timeouts``, ``out``, ``log``,
``wall_time_s``); the run stops at the first test past its timeout. One
``RESULT {json}`` line back per job (``patched``, ``reason``, ``returncode``, ``timed_out``). The
outcome file ``out`` is the probe's JSON. Functions listed in the file named by ``PDBGYM_HOT_IMPORT_TIME``
(one ``path.py:line`` key per line) ran at import time, so a mutant of them is never hot-applied.

Run as ``python -m pdbgym.tasks.synth.hotserver PYTEST_ARGS...`` in the project folder; this module
runs inside the project's interpreter and imports nothing from pdbgym beyond its stdlib-only siblings.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback
from pathlib import Path
from types import CodeType, FunctionType
from typing import IO

import pytest

from pdbgym.tasks.synth import hotpatch
from pdbgym.tasks.synth.zygote import RESULT_PREFIX, wait_child

READY_PREFIX = "READY "
IMPORT_TIME_ENV = "PDBGYM_HOT_IMPORT_TIME"
PROBE_MODULE = "pdbgym.tasks.synth.probe"
FunctionKey = tuple[str, str, int]  # (file, qualified name, first line)


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
              ) -> list[tuple[list[FunctionType], CodeType]]:
        """(live functions, new code) pairs for the job's mutant; raises Unpatchable when it cannot be hot."""
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
        for swap in plan.swaps:
            # Code that ran at import time already acted; a changed nested function is fine as long as
            # only the closures it made are stale, since those are swapped too.
            if swap.own_change and f"{relpath}:{swap.clean.co_firstlineno}" in self.import_time:
                raise hotpatch.Unpatchable(f"{swap.clean.co_qualname} runs at import time")
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
        missing = [t for t in job["tests"] if t not in items]
        if missing:
            raise hotpatch.Unpatchable(f"{len(missing)} tests were not collected here, e.g. {missing[0]}")
        return targets

    def _serve(self, job: dict, items: dict[str, pytest.Item], functions: dict[FunctionKey, list[FunctionType]],
               session: pytest.Session) -> dict:
        try:
            targets = self._plan(job, items, functions)
        except hotpatch.Unpatchable as exc:
            return {"patched": False, "reason": str(exc)}
        selected = [items[t] for t in job["tests"]]
        pid = os.fork()
        if pid == 0:
            _run_child(job, targets, selected, session)
        returncode, timed_out = wait_child(pid, float(job["wall_time_s"]))
        return {"patched": True, "returncode": returncode, "timed_out": timed_out}


def _run_child(job: dict, targets: list[tuple[list[FunctionType], CodeType]], selected: list[pytest.Item],
               session: pytest.Session) -> None:
    """In the forked child: swap in the mutant's code, run the selected items, write outcomes. Never returns."""
    try:
        os.setpgid(0, 0)
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        for live, code in targets:
            for function in live:
                function.__code__ = code
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
