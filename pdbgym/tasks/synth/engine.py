"""Synthesis driver: prepare each source, run its baseline, test candidates in a process pool, keep tasks.

Determinism: candidates form one fixed stream per (source, seed); the kept tasks are exactly those a
sequential pass over that stream would keep (first valid candidate per distinct failing-test set,
first ``max_tasks`` of them), whatever the worker count or batch size. Resumption: every candidate's
result is saved in ``<out>/.synth/<slug>/state.json`` (written atomically every few seconds and at
the end), and a rerun with the same seed skips candidates already tried.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic
from pdbgym.interrupts import end_with_parent
from pdbgym.sandbox.pyenv import ensure_environment
from pdbgym.tasks.synth.baseline import Baseline, run_baseline
from pdbgym.tasks.synth.candidate import CandidateResult, build_task, evaluate_candidate
from pdbgym.tasks.synth.hotserver import narrowed
from pdbgym.tasks.synth.operators import OPERATORS, MutationError, MutationSite, enumerate_sites
from pdbgym.tasks.synth.project import PYPI_PREFIX, Project, SynthSourceError, prepare_project, slug_for
from pdbgym.tasks.synth.runner import HOT_DIR, REQUIREMENTS_VAR, stop_servers

STATE_DIR = ".synth"
STATE_FILE = "state.json"


@dataclass
class SynthConfig:
    """Options of ``pdbgym tasks synth``.

    ``select_tests``: "covering" runs only the clean-suite tests that entered the mutated function
    (the fast path); "all" reruns the whole suite for every candidate (the benchmark's baseline).
    ``hot_patch`` (covering only): try each mutant first by swapping its function's code in a
    collected clean session (:mod:`hotserver`), falling back to a run from files. Either way a kept
    task is validated from its written files. ``recheck_fixed``: also rerun a kept task's tests on
    its patched repo (by default the patched repo is shown to be the clean project byte for byte,
    whose tests passed in every baseline run).
    """

    out: Path
    max_tasks: int = 20
    seed: int = 0
    workers: int = max(1, os.cpu_count() or 1)
    baseline_runs: int = 3
    per_test_timeout_s: float = 5.0
    operators: list[str] | None = None
    select_tests: str = "covering"
    max_candidates: int | None = None
    use_fork_server: bool = True
    hot_patch: bool = True
    recheck_fixed: bool = False


@dataclass
class SourceReport:
    """Per-source outcome. ``tried`` counts the candidates a sequential pass would have processed to
    reach the kept tasks (uncovered ones cost no test run); ``tested_ahead`` those tested past them by
    otherwise idle workers."""

    source: str
    error: str = ""
    tried: int = 0
    kept: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    per_operator: dict[str, dict[str, int]] = field(default_factory=dict)
    task_ids: list[str] = field(default_factory=list)
    tests_passing: int = 0
    tests_excluded: int = 0
    tested_ahead: int = 0


def candidate_stream(project: Project, seed: int, operators: list[str] | None) -> list[MutationSite]:
    """All sites, each operator's shuffled by ``seed``, interleaved round-robin so no operator dominates."""
    by_operator: dict[str, list[MutationSite]] = {name: [] for name in (operators or OPERATORS)}
    for relpath in project.source_files:
        try:
            sites = enumerate_sites((project.root / relpath).read_text(errors="replace"), relpath, operators)
        except MutationError:
            continue  # a file that does not parse has no sites; the project's own tests would show it
        for site in sites:
            by_operator[site.operator].append(site)
    for name, sites in by_operator.items():
        random.Random(f"{seed}:{name}").shuffle(sites)
    stream: list[MutationSite] = []
    longest = max((len(s) for s in by_operator.values()), default=0)
    for position in range(longest):
        stream.extend(sites[position] for sites in by_operator.values() if position < len(sites))
    return stream


def source_origin(source: str) -> str:
    """What a state file belongs to: the ``pypi:`` spec, or the resolved project folder."""
    return source if source.startswith(PYPI_PREFIX) else str(Path(source).expanduser().resolve())


def check_state_origin(path: Path, origin: str) -> None:
    """Refuse a state file left by another project that shares this one's folder name (and so its
    state folder and instance ids): resuming from it would reuse that project's candidate results."""
    if not path.is_file():
        return
    recorded = json.loads(path.read_text()).get("origin")
    if recorded not in (None, origin):
        raise SynthSourceError(
            f"{path} holds the synthesis state of {recorded}, a different project with the same folder name as "
            f"{origin}; their task ids would collide too. Synthesize {origin} into another --out folder"
        )


class _State:
    def __init__(self, path: Path, seed: int, select_tests: str, origin: str) -> None:
        self.path = path
        data = json.loads(path.read_text()) if path.is_file() else {}
        same = data.get("seed") == seed and data.get("select_tests") == select_tests
        self.tested: dict[str, dict] = data.get("tested", {}) if same else {}
        self.built: dict[str, dict] = data.get("built", {}) if same else {}
        self.seed, self.select_tests, self.origin = seed, select_tests, origin

    def save(self) -> None:
        write_json_atomic(self.path, {"seed": self.seed, "select_tests": self.select_tests, "origin": self.origin,
                                      "tested": self.tested, "built": self.built}, indent=0)


def _pool(workers: int) -> Executor:
    # a worker whose parent was killed outright exits at once (nothing of it is kept: the rerun redoes it)
    return ThreadPoolExecutor(1) if workers <= 1 else ProcessPoolExecutor(workers, initializer=end_with_parent,
                                                                           initargs=(0.0,))


def synthesize_source(source: str, config: SynthConfig, on_progress: Callable[[str, int, int, int], None]) -> SourceReport:
    """Synthesize tasks from one source into ``config.out``; errors are reported, never raised."""
    report = SourceReport(source)
    try:
        _run_source(source, config, report, on_progress)
    except PdbgymError as exc:
        report.error = str(exc)
    return report


def _run_source(source: str, config: SynthConfig, report: SourceReport,
                on_progress: Callable[[str, int, int, int], None]) -> None:
    if config.select_tests not in ("covering", "all"):
        raise PdbgymError(f"select_tests must be 'covering' or 'all', got {config.select_tests!r}")
    scratch_root = config.out / STATE_DIR
    workdir = scratch_root / slug_for(source if source.startswith("pypi:") else Path(source).name)
    origin = source_origin(source)
    check_state_origin(workdir / STATE_FILE, origin)
    workdir.mkdir(parents=True, exist_ok=True)
    project = prepare_project(source, workdir)
    if project.requirements:
        ensure_environment(project.requirements)  # before the pool: its workers find it in the cache
    inherited = os.environ.get(REQUIREMENTS_VAR)
    os.environ[REQUIREMENTS_VAR] = json.dumps(list(project.requirements))  # the pool's workers inherit it
    try:
        with _pool(config.workers) as pool:
            try:
                _run_project(source, project, workdir, origin, config, report, pool, on_progress)
            except KeyboardInterrupt:  # Ctrl-C: start nothing more; only the candidates running now finish
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    finally:
        if inherited is None:
            os.environ.pop(REQUIREMENTS_VAR, None)
        else:
            os.environ[REQUIREMENTS_VAR] = inherited
        stop_servers(below=workdir)  # pool processes took theirs with them; a thread pool's live here
        shutil.rmtree(workdir / HOT_DIR, ignore_errors=True)


def _run_project(source: str, project: Project, workdir: Path, origin: str, config: SynthConfig, report: SourceReport,
                 pool: Executor, on_progress: Callable[[str, int, int, int], None]) -> None:
    baseline = run_baseline(project, workdir, config.baseline_runs, config.per_test_timeout_s,
                            use_fork_server=config.use_fork_server, pool=pool)
    report.tests_passing = len(baseline.passing)
    report.tests_excluded = len(baseline.flaky) + len(baseline.failing)
    stream = candidate_stream(project, config.seed, config.operators)
    if config.max_candidates is not None:
        stream = stream[:config.max_candidates]
    state = _State(workdir / STATE_FILE, config.seed, config.select_tests, origin)
    state.save()  # records the origin now, even when no batch runs (all tasks already settled)
    (workdir / "scratch").mkdir(exist_ok=True)
    (workdir / "staging").mkdir(exist_ok=True)
    _Scheduler(pool, stream, project, baseline, workdir, config, state).run(
        lambda done, kept: on_progress(source, done, len(stream), kept))
    kept = _kept_ids(stream, state, config.max_tasks) or _kept_so_far(stream, state)[:config.max_tasks]
    _publish(kept, workdir / "staging", config.out, stream, state)
    _fill_report(report, stream, state, kept, config.max_tasks)


class _Scheduler:
    """Keeps every worker busy with candidate tests and task builds until the first ``max_tasks`` are settled.

    Builds come first (they decide the result); free slots test the next candidates in stream order.
    Results are recorded as they arrive, in any order; what is kept is decided on the stream order
    alone (see :func:`_kept_ids`), so it does not depend on timing or worker count.
    """

    SAVE_EVERY_S = 2.0

    def __init__(self, pool: Executor, stream: list[MutationSite], project: Project, baseline: Baseline,
                 workdir: Path, config: SynthConfig, state: _State) -> None:
        self.pool, self.stream, self.project, self.baseline = pool, stream, project, baseline
        self.workdir, self.config, self.state = workdir, config, state
        self.tests: dict[Future, MutationSite] = {}
        self.builds: dict[Future, MutationSite] = {}
        self.position = 0
        self.submitted = 0
        self.narrowings: dict[str, dict | None] = {}

    def run(self, on_progress: Callable[[int, int], None]) -> None:
        try:
            self._run(on_progress)
        except KeyboardInterrupt:  # what was tested so far is kept: a rerun starts from it
            for future in [*self.tests, *self.builds]:
                future.cancel()
            self.state.save()
            raise

    def _run(self, on_progress: Callable[[int, int], None]) -> None:
        saved = time.monotonic()
        while True:
            if _kept_ids(self.stream, self.state, self.config.max_tasks) is None:
                self._submit_builds()
                self._submit_tests()
            if not self.tests and not self.builds:
                break  # settled, or nothing left to try
            done, _ = wait([*self.tests, *self.builds], return_when=FIRST_COMPLETED)
            for future in done:
                if future in self.tests:
                    self.state.tested[self.tests.pop(future).key] = asdict(future.result())
                else:
                    self.state.built[self.builds.pop(future).key] = asdict(future.result())
            if time.monotonic() - saved > self.SAVE_EVERY_S:
                self.state.save()
                saved = time.monotonic()
                on_progress(len(self.state.tested), len(_kept_so_far(self.stream, self.state)))
        self.state.save()
        if self.submitted:
            on_progress(len(self.state.tested), len(_kept_so_far(self.stream, self.state)))

    def _submit_builds(self) -> None:
        building = {site.key for site in self.builds.values()}
        waiting = [s for s in _unresolved_firsts(self.stream, self.state) if s.key not in building]
        # Only as many as could still be kept: more would be surplus if those in flight all validate.
        room = self.config.max_tasks - len(_kept_so_far(self.stream, self.state)) - len(self.builds)
        if waiting and room <= 0 and not self.builds:
            room = 1  # enough are kept, but an earlier candidate must still be decided
        config, baseline, workdir = self.config, self.baseline, self.workdir
        for site in waiting[:max(room, 0)]:
            future = self.pool.submit(build_task, str(self.project.root), self.project.label, self.project.slug,
                                      str(workdir / "staging"), site, self.state.tested[site.key]["failing"],
                                      baseline.passing, config.per_test_timeout_s, _server_root(workdir, config),
                                      config.recheck_fixed, self._validated(site))
            self.builds[future] = site
            self.submitted += 1

    def _selected(self, site: MutationSite) -> list[str] | None:
        """The tests a candidate runs: those that can observe its function, or None (the whole suite)."""
        if self.config.select_tests != "covering":
            return None
        return self.baseline.tests_reaching(f"{site.file}:{site.function_line}")

    def _narrowing(self, site: MutationSite) -> dict | None:
        """For a function run at import time, what lets a re-executed module's run leave out tests
        (:meth:`Baseline.narrowing`), worked out once per function."""
        key = f"{site.file}:{site.function_line}"
        if key not in self.narrowings:
            source = (self.project.root / site.file).read_text(errors="replace")
            self.narrowings[key] = self.baseline.narrowing(key, source)
        return self.narrowings[key]

    def _validated(self, site: MutationSite) -> list[str] | None:
        """The tests a built task's buggy files run (see :func:`build_task`): those its candidate ran."""
        tests = self._selected(site)
        changed = self.state.tested[site.key].get("changed")
        narrowing = self._narrowing(site) if tests is not None and changed is not None else None
        return narrowed(tests, narrowing, changed) if narrowing else tests

    def _submit_tests(self) -> None:
        config, baseline = self.config, self.baseline
        while self.position < len(self.stream) and len(self.tests) + len(self.builds) < 2 * config.workers:
            site = self.stream[self.position]
            self.position += 1
            if site.key in self.state.tested:
                continue
            tests = self._selected(site)
            if tests == []:
                self.state.tested[site.key] = asdict(CandidateResult(site.key, site.operator, "uncovered"))
                continue
            hot = baseline.import_time if tests is not None and config.hot_patch and config.use_fork_server else None
            timeouts = baseline.hang_timeouts(tests if tests is not None else baseline.passing,
                                              config.per_test_timeout_s)
            future = self.pool.submit(evaluate_candidate, str(self.project.root), str(self.workdir / "scratch"),
                                      site, tests, baseline.passing, config.per_test_timeout_s,
                                      _server_root(self.workdir, config), hot, timeouts,
                                      self._narrowing(site) if hot is not None else None)
            self.tests[future] = site
            self.submitted += 1


def _server_root(workdir: Path, config: SynthConfig) -> str | None:
    """Every run of one source happens below its workdir, so one fork server per worker serves them all."""
    return str(workdir.resolve()) if config.use_fork_server else None


def _unresolved_firsts(stream: list[MutationSite], state: _State) -> list[MutationSite]:
    """For each failing-test set not yet claimed by a kept task, its earliest flipped candidate not yet built,
    in stream order; stops at the first tested-but-unknown gap so the result matches a sequential pass."""
    claimed: set[tuple[str, ...]] = set()
    waiting: list[MutationSite] = []
    pending_sets: set[tuple[str, ...]] = set()
    for site in stream:
        result = state.tested.get(site.key)
        if result is None:
            break
        if result["status"] != "flipped":
            continue
        failing = tuple(result["failing"])
        if failing in claimed or failing in pending_sets:
            continue
        built = state.built.get(site.key)
        if built is None:
            waiting.append(site)
            pending_sets.add(failing)
        elif built["status"] == "kept":
            claimed.add(failing)
    return waiting


def _kept_so_far(stream: list[MutationSite], state: _State) -> list[str]:
    return [state.built[s.key]["instance_id"] for s in stream
            if s.key in state.built and state.built[s.key]["status"] == "kept"]


def _kept_ids(stream: list[MutationSite], state: _State, max_tasks: int) -> list[str] | None:
    """The final kept ids once the first ``max_tasks`` are settled: no untested candidate, and no flipped
    candidate still waiting to be built for a failing-test set not yet kept, comes before them."""
    kept: list[str] = []
    claimed: set[tuple[str, ...]] = set()
    for site in stream:
        result = state.tested.get(site.key)
        if result is None:
            return None
        if result["status"] != "flipped":
            continue
        failing = tuple(result["failing"])
        built = state.built.get(site.key)
        if built is None:
            if failing not in claimed:
                return None  # it may yet be kept, ahead of the ones after it
            continue
        if built["status"] == "kept":
            kept.append(built["instance_id"])
            claimed.add(failing)
            if len(kept) >= max_tasks:
                return kept
    return None


def _publish(kept: list[str], staging: Path, out: Path, stream: list[MutationSite], state: _State) -> None:
    """Make ``out`` hold exactly this source's kept tasks: move kept folders from staging into ``out``
    (already-published ones stay), and move back to staging any task of this source published by an
    earlier run but not kept now (a rerun with a smaller ``--max``), ready for a later larger one."""
    kept_set = set(kept)
    for built in state.built.values():
        instance_id = built.get("instance_id", "")
        if built["status"] == "kept" and instance_id not in kept_set and (out / instance_id).is_dir():
            shutil.rmtree(staging / instance_id, ignore_errors=True)
            (out / instance_id).rename(staging / instance_id)
    for instance_id in kept:
        source, target = staging / instance_id, out / instance_id
        if source.is_dir():
            if target.exists():
                shutil.rmtree(target)
            source.rename(target)


def _fill_report(report: SourceReport, stream: list[MutationSite], state: _State, kept: list[str],
                 max_tasks: int) -> None:
    statuses: Counter[str] = Counter()
    per_operator: dict[str, Counter[str]] = {}
    kept_set = set(kept)
    # What a sequential pass would have tried: the stream up to the last kept task once --max is
    # reached. Candidates tested beyond it (ahead, by idle workers) are counted apart, so the yield
    # does not depend on timing.
    last = len(stream) - 1
    if len(kept) >= max_tasks:
        last = max(i for i, site in enumerate(stream) if state.built.get(site.key, {}).get("instance_id") in kept_set
                   and state.built[site.key]["status"] == "kept")
    for position, site in enumerate(stream):
        result = state.tested.get(site.key)
        if result is None:
            continue
        if position > last:
            report.tested_ahead += 1
            continue
        built = state.built.get(site.key)
        status = result["status"]
        if status == "flipped":
            if built is None:
                status = "duplicate"
            elif built["status"] == "kept":
                status = "kept" if built["instance_id"] in kept_set else "surplus"
            else:
                status = built["status"]
        statuses[status] += 1
        counter = per_operator.setdefault(site.operator, Counter())
        counter["tried"] += 1
        counter["kept"] += status == "kept"
    report.tried = sum(statuses.values())
    report.kept = len(kept)
    report.statuses = dict(statuses)
    report.per_operator = {name: dict(c) for name, c in per_operator.items()}
    report.task_ids = kept
