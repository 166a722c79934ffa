"""Task validation: does a task folder describe a real, fixable bug?

Checks, all inside the sandbox on a fresh copy of ``repo/``: each FAIL_TO_PASS test fails on the buggy
repo and passes once the reference patch is applied; each PASS_TO_PASS test passes on both; the patch
leaves test files alone; the patch's paths and repo/'s symlinks stay inside repo/ (else nothing runs);
a live pdb session reaches its prompt on the first failing test.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pdbgym.errors import PdbgymError
from pdbgym.grading.subject import test_command_problem
from pdbgym.grading.testrun import SuiteRun, failure_reason, run_tests
from pdbgym.sandbox import Sandbox, Workspace, get_sandbox
from pdbgym.sandbox.workspace import escaping_links
from pdbgym.tasks.model import Task
from pdbgym.tasks.patches import PatchEditsTestsError, UnsafePatchError, apply_patch, check_patch
from pdbgym.tasks.suites import resolve_tasks_lenient
from pdbgym.tasks.taskenv import task_sandbox, task_session
from pdbgym.tasks.wrongsite import has_wrong_site_info, wrong_sites


@dataclass
class ValidationReport:
    instance_id: str
    problems: list[str] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"instance_id": self.instance_id, "ok": self.ok, "problems": self.problems,
                "checks": self.checks, "duration_s": round(self.duration_s, 3)}


def _unreported(run: SuiteRun, nodes: list[str], when: str) -> str | None:
    """A hint when pytest gave no outcome for some tests: usually a wrong node id, which makes pytest
    run nothing at all, so every other test of the run reads as failed too."""
    missing = [n for n in nodes if n not in run.outcomes]
    if not missing:
        return None
    lines = [line for line in run.output.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("ERROR")][:3] or lines[-4:]
    return (f"pytest reported no outcome {when} for {len(missing)} of {len(nodes)} test(s): check the node ids "
            f"in task.json (one that does not exist stops the whole run) or whether the run crashed. "
            f"pytest said:\n" + "\n".join(said))


def _check_runs(task: Task, sandbox: Sandbox, report: ValidationReport) -> None:
    before, after = _runs(task, sandbox, report)
    if report.problems:
        hint = _unreported(before, task.all_tests, "on the buggy repo")
        if hint is None and after is not None:
            hint = _unreported(after, task.all_tests, "with the patch applied")
        if hint is not None:
            report.problems.append(hint)


def _runs(task: Task, sandbox: Sandbox, report: ValidationReport) -> tuple[SuiteRun, SuiteRun | None]:
    with Workspace.create(task.repo) as ws:
        # Run as grading runs: the whole tree read-only where the sandbox can bind it, so a task whose tests
        # write into their project fails here, where it can be fixed, not in every graded episode.
        readonly = [ws.path] if sandbox.binds_readonly else []
        before = run_tests(sandbox, ws.path, task, task.all_tests, readonly_paths=readonly)
        still_passing = [n for n in task.FAIL_TO_PASS if before.passed(n)]
        report.checks["fail_to_pass_fail_before"] = not still_passing
        if still_passing:
            report.problems.append(f"FAIL_TO_PASS test(s) pass on the buggy repo: {still_passing}")
        report.checks["tests_import_the_repo"] = not before.foreign
        if before.foreign:
            shown = ", ".join(f"{name} from {file}" for name, file in sorted(before.foreign.items())[:5])
            report.problems.append(
                f"the tests imported the project's code from outside the repo ({shown}): a released copy is "
                "installed in the task's environment (often pulled in by a test dependency that requires the "
                "project); drop it from the requirements, or declare the repo's package folder (src layout: "
                "[tool.setuptools.package-dir] in pyproject.toml) so the repo comes first")
        broken = before.failing(task.PASS_TO_PASS)
        report.checks["pass_to_pass_pass_before"] = not broken
        if broken:
            report.problems.append(f"PASS_TO_PASS test(s) fail on the buggy repo: {broken}")
        try:
            apply_patch(ws.path, task.patch)
        except PdbgymError as exc:
            report.checks["patch_applies"] = False
            report.problems.append(str(exc))
            return before, None
        report.checks["patch_applies"] = True
        after = run_tests(sandbox, ws.path, task, task.all_tests, readonly_paths=readonly)
        unfixed = after.failing(task.all_tests)
        report.checks["all_pass_after_patch"] = not unfixed
        if unfixed:
            report.problems.append(f"test(s) fail with the reference patch applied: {failure_reason(after, unfixed)}")
        return before, after


def _check_debugger(task: Task, sandbox: Sandbox, report: ValidationReport) -> None:
    """The pdb session starts on the first FAIL_TO_PASS test, and ``continue`` runs it to the failure the
    graded run sees: pytest under pdb ends with tests failed (status 1), not passed (a copy of the project
    other than the repo imported), nor an import, collection or plugin error (options the session lacks)."""
    node = task.FAIL_TO_PASS[0]
    with Workspace.create(task.repo) as ws:
        try:
            with task_session(task, sandbox, ws.path, command_timeout_s=30.0 + 2 * task.test_timeout_s) as session:
                session.start()
                report.checks["pdb_prompt"] = True
                reply = session.send("c")
        except PdbgymError as exc:
            report.checks["pdb_prompt"] = False
            report.problems.append(f"the pdb session did not reach a prompt on {node}: {exc}")
            return
    reached = reply.program_ended and reply.exit_status == 1 and "failed" in reply.output
    report.checks["pdb_reaches_the_failure"] = reached
    if not reached:
        what = (f"ended with pytest exit status {reply.exit_status}" if reply.program_ended
                else "did not finish (interrupted)" if reply.interrupted else "did not finish")
        report.problems.append(
            f"continuing {node} under pdb {what}, where the graded run fails it; the session runs the task's "
            f"test_command options ({task.test_command!r}), so an import or plugin error here means the session "
            f"needs one it lacks. End of its output:\n{reply.output.strip()[-800:]}")


def _check_containment(task: Task, report: ValidationReport) -> bool:
    """The repo's links and the patch's paths stay inside ``repo/`` (False: stop here) and the patch
    leaves test files alone (the same check ``run`` makes before the scripted policy applies it)."""
    escaping = escaping_links(task.repo)
    report.checks["repo_stays_inside"] = not escaping
    if escaping:
        report.problems.append(f"repo/ holds symlinks that point outside it: {escaping}; "
                               "replace them with the files or with links inside repo/")
    report.checks["patch_stays_inside"] = report.checks["patch_spares_tests"] = True
    try:
        check_patch(task.patch, task.repo, reference=True)
    except UnsafePatchError as exc:
        report.checks["patch_stays_inside"] = False
        report.problems.append(str(exc))
    except PatchEditsTestsError as exc:
        report.checks["patch_spares_tests"] = False
        report.problems.append(str(exc))
    except PdbgymError as exc:  # malformed: the apply step reports it again, with git's words
        report.problems.append(f"patch: {exc}")
    return not escaping and report.checks["patch_stays_inside"]


def _check_wrong_site(task: Task, report: ValidationReport) -> None:
    """A declared wrong site (``wrong_site`` or ``wrong_site_patch``) names code that exists in ``repo/``."""
    if not has_wrong_site_info(task):
        return
    try:
        wrong_sites(task)
        report.checks["wrong_site_resolves"] = True
    except PdbgymError as exc:
        report.checks["wrong_site_resolves"] = False
        report.problems.append(str(exc))


def validate_task(task: Task, sandbox: Sandbox | None = None, *, check_debugger: bool = True) -> ValidationReport:
    started = time.perf_counter()
    sandbox = sandbox or get_sandbox()
    report = ValidationReport(task.instance_id)
    if (problem := test_command_problem(task.instance_id, task.test_command)) is not None:
        # Loading refuses this; a Task built in code is stopped here, before any run.
        report.checks["test_command_runs_pytest"] = False
        report.problems.append(problem)
        report.duration_s = time.perf_counter() - started
        return report
    if not _check_containment(task, report):  # nothing that escapes its folder is copied or applied
        report.duration_s = time.perf_counter() - started
        return report
    _check_wrong_site(task, report)
    try:
        sandbox = task_sandbox(sandbox, task)  # built once per distinct environment, then reused
    except PdbgymError as exc:
        report.checks["environment_builds"] = False
        report.problems.append(str(exc))
        report.duration_s = time.perf_counter() - started
        return report
    _check_runs(task, sandbox, report)
    if check_debugger:
        _check_debugger(task, sandbox, report)
    report.duration_s = time.perf_counter() - started
    return report


def validate_tasks(
    tasks: Iterable[Task],
    *,
    sandbox: Sandbox | None = None,
    workers: int | None = None,
    check_debugger: bool = True,
    on_done: Callable[[ValidationReport], None] | None = None,
) -> list[ValidationReport]:
    """Validate tasks in parallel (the work is in sandboxed subprocesses, so threads suffice); a task whose
    validation raises is a failed report, never the end of the others."""
    sandbox = sandbox or get_sandbox()
    task_list = list(tasks)
    workers = workers or max(1, min(len(task_list), os.cpu_count() or 1))

    def one(task: Task) -> ValidationReport:
        try:
            report = validate_task(task, sandbox, check_debugger=check_debugger)
        except (PdbgymError, OSError, subprocess.SubprocessError) as exc:  # one task's trouble, not the run's
            report = ValidationReport(task.instance_id, problems=[f"validation stopped: {exc}"],
                                      checks={"completes": False})
        if on_done is not None:
            on_done(report)
        return report

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, task_list))


def validate_spec(
    spec: str,
    *,
    sandbox: Sandbox | None = None,
    workers: int | None = None,
    check_debugger: bool = True,
    on_done: Callable[[ValidationReport], None] | None = None,
    on_total: Callable[[int], None] | None = None,
) -> list[ValidationReport]:
    """Validate every task folder of a suite or path; a folder that does not load is one failed report.

    ``on_total`` hears how many folders there are once they are found (for a progress bar).
    """
    tasks, errors = resolve_tasks_lenient(spec)
    if on_total is not None:
        on_total(len(tasks) + len(errors))
    broken = [ValidationReport(folder.name, problems=[str(exc)], checks={"loads": False}) for folder, exc in errors]
    for report in broken:
        if on_done is not None:
            on_done(report)
    return broken + validate_tasks(tasks, sandbox=sandbox, workers=workers, check_debugger=check_debugger,
                                   on_done=on_done)

