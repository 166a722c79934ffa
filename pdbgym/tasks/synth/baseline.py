"""The clean suite's behaviour: which tests pass reliably, and which tests reach which functions."""

from __future__ import annotations

import ast
import hashlib
import json
import math
import time
from concurrent.futures import Executor, Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import CodeType

from pdbgym.fileio import write_json_atomic
from pdbgym.tasks.synth.hotserver import code_names, code_objects
from pdbgym.tasks.synth.imports import ImportGraph
from pdbgym.tasks.synth.project import Project, SynthSourceError, is_test_file
from pdbgym.tasks.synth.runner import PASSED, SuiteRun, run_pytest

BASELINE_FILE = "baseline.json"
# A mutant hangs a test when the test runs past max(HANG_FLOOR_S, HANG_FACTOR x its clean duration).
HANG_FACTOR = 10.0
HANG_FLOOR_S = 1.0


@dataclass
class Baseline:
    """Clean-suite facts. ``covering`` maps a function key ``"path.py:first_line"`` to the stable-passing
    tests that entered it; ``import_time`` lists functions entered before any test ran; ``observers``
    maps the file of each of those to the test files that may import it (:mod:`imports`)."""

    fingerprint: str
    passing: list[str]
    flaky: list[str]
    failing: list[str]
    durations: dict[str, float]
    covering: dict[str, list[str]]
    import_time: list[str]
    observers: dict[str, list[str]] = field(default_factory=dict)

    def hang_timeouts(self, tests: list[str], cap_s: float) -> dict[str, float]:
        """Per-test limits for running a mutant: a test taking 10x its clean time (at least 1 s, at most
        ``cap_s``) counts as hung, so a mutant that loops costs about a second, not the full cap."""
        return {t: round(min(cap_s, max(HANG_FLOOR_S, HANG_FACTOR * self.durations.get(t, cap_s))), 3)
                for t in tests}

    def tests_reaching(self, function_key: str) -> list[str]:
        """Stable-passing tests that can observe a bug in this function. For one that runs at import
        time: the tests of every test file that may import its module, and those that entered it
        (all passing tests when its file has no recorded observers)."""
        covering = self.covering.get(function_key, [])
        if function_key not in self.import_time:
            return list(covering)
        files = self.observers.get(function_key.rsplit(":", 1)[0])
        if files is None:
            return list(self.passing)
        observing, entered = set(files), set(covering)
        return [t for t in self.passing if t.split("::", 1)[0] in observing or t in entered]

    def narrowing(self, function_key: str, source: str) -> dict | None:
        """For a function that ran at import time, what lets a hot run that re-executes its module leave
        out tests (see :func:`hotserver.narrowed`), from the module's clean ``source``; None for other
        functions, or when the module reads its namespace dynamically (``globals()``, ``vars()``,
        ``eval``, ``sys.modules``...). Per top-level definition the names its code (nested code
        included) mentions, and the tests that entered it or its nested code. ``readers``: for each name
        the module binds at top level, and the mutated function's own, the tests that entered a
        definition mentioning it. ``everyone``: names mentioned by a definition other than the mutated
        one that also ran at import time (another module may have called it then and kept what it
        gave). ``base``: the tests that entered the mutated definition."""
        if function_key not in self.import_time:
            return None
        relpath = function_key.rsplit(":", 1)[0]
        try:
            tree = ast.parse(source)
            module = compile(source, relpath, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return None
        groups = [(const.co_name, {f"{relpath}:{code.co_firstlineno}" for code in code_objects(const)},
                   code_names(const)) for const in module.co_consts if isinstance(const, CodeType)]
        own = next((group for group in groups if function_key in group[1]), None)
        if own is None or any(names & DYNAMIC_NAMES for _, _, names in groups):
            return None
        bound = {own[0]} | {target.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
                         for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                         if isinstance(target, ast.Name)}
        early = set(self.import_time)
        readers: dict[str, set[str]] = {name: set() for name in bound}
        everyone: set[str] = set()
        for group in groups:
            _, keys, names = group
            entered = set().union(*(self.covering.get(key, ()) for key in keys))
            for name in names & bound:
                readers[name] |= entered
                if group is not own and keys & early:
                    everyone.add(name)
        base = set().union(*(self.covering.get(key, ()) for key in own[1]))
        return {"base": sorted(base), "readers": {n: sorted(t) for n, t in sorted(readers.items())},
                "everyone": sorted(everyone)}


# Names through which code can read a module's namespace without naming the global it reads.
DYNAMIC_NAMES = frozenset({"globals", "vars", "locals", "eval", "exec", "__dict__", "modules", "import_module",
                           "__import__"})


def project_fingerprint(project: Project) -> str:
    """sha256 of every file in the project copy (path + bytes): a baseline is reused only if it matches."""
    digest = hashlib.sha256()
    for path in sorted(p for p in project.root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                       and not any(part.startswith(".") for part in p.relative_to(project.root).parts)):
        digest.update(path.relative_to(project.root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def import_observers(project: Project, import_time: list[str], passing: list[str]) -> dict[str, list[str]]:
    """For each file holding a function that ran at import time, the test files (with passing tests)
    that may import it."""
    graph = ImportGraph({rel.relative_to(project.root).as_posix(): rel.read_text(errors="replace")
                         for rel in project.root.rglob("*.py") if "__pycache__" not in rel.parts})
    test_files = sorted({t.split("::", 1)[0] for t in passing})
    return {module: graph.observers(module, test_files) for module in sorted({k.rsplit(":", 1)[0] for k in import_time})}


def run_baseline(project: Project, workdir: Path, runs: int = 3, per_test_timeout_s: float = 5.0,
                 wall_time_s: float = 600.0, use_fork_server: bool = True, pool: Executor | None = None) -> Baseline:
    """Run the clean suite ``runs`` times (the first with coverage) or reuse a matching saved baseline.

    A test counts as passing only if it passed in every run; tests that changed outcome are flaky and
    tests that never passed are excluded. Raises SynthSourceError when no test passes reliably. The
    runs are independent and go to ``pool`` together when one is given.
    """
    fingerprint = project_fingerprint(project)
    saved = workdir / BASELINE_FILE
    if saved.is_file():
        data = json.loads(saved.read_text())
        if data.get("fingerprint") == fingerprint:
            return Baseline(**data)
    if runs < 1:
        raise SynthSourceError(f"baseline runs must be at least 1, got {runs}")
    server_root = workdir if use_fork_server else None
    # The runs are independent, so they go to the pool at once: the first with coverage, the rest plain.
    # The last one starts in a later second of the clock than the first one ended, so a test whose id holds
    # the time of its collection (a parameter made from now()) is seen in one run only: flaky, left out.
    # Without a pool each run is made here, at once, and handed back as a finished future.
    def start(index: int) -> Future[SuiteRun]:
        if pool is not None:
            return pool.submit(run_pytest, project.root, collect_coverage=index == 0,
                               per_test_timeout_s=per_test_timeout_s, wall_time_s=wall_time_s,
                               server_root=server_root, write_bytecode=True)
        done: Future[SuiteRun] = Future()
        done.set_result(run_pytest(project.root, collect_coverage=index == 0, per_test_timeout_s=per_test_timeout_s,
                                   wall_time_s=wall_time_s, server_root=server_root, write_bytecode=True))
        return done

    results = [start(index) for index in range(max(1, runs - 1))]
    if runs > 1:
        if pool is not None:
            results[0].result()
        now = time.time()
        time.sleep(math.floor(now) + 1.05 - now)
        results.append(start(runs - 1))
    first, *others = [future.result() for future in results]
    if first.timed_out:
        raise SynthSourceError(f"{project.label}: the clean test suite ran past {wall_time_s:.0f} s")
    if first.collect_errors:
        raise SynthSourceError(f"{project.label}: the clean test suite does not collect: "
                               f"{first.collect_errors[0][:600]}")
    # A test missing from any run (collected once, not again) counts that run as "missing": never passing.
    every = [first, *others]
    histories = {node: {run.outcome(node) for run in every} for node in set().union(*(r.outcomes for r in every))}
    # Doctests live in the source files that get mutated, so they cannot be a task's held-out tests.
    tests = {node: seen for node, seen in histories.items() if is_test_file(node.split("::", 1)[0])}
    passing = sorted(node for node, seen in tests.items() if seen == {PASSED})
    flaky = sorted(node for node, seen in tests.items() if PASSED in seen and len(seen) > 1)
    failing = sorted(node for node, seen in tests.items() if PASSED not in seen and "skipped" not in seen)
    if not passing:
        raise SynthSourceError(
            f"{project.label}: no test passes on the clean project ({len(tests)} collected, {len(failing)} "
            f"failing); synthesis needs a passing suite. Output tail:\n{first.output_tail[-800:]}"
        )
    passing_set = set(passing)
    covering: dict[str, list[str]] = {}
    for node, functions in first.coverage.items():
        if node in passing_set:
            for key in functions:
                covering.setdefault(key, []).append(node)
    baseline = Baseline(fingerprint, passing, flaky, failing,
                        {n: first.durations.get(n, 0.0) for n in passing}, covering, first.import_time,
                        import_observers(project, first.import_time, passing))
    write_json_atomic(saved, asdict(baseline), indent=0)
    return baseline
