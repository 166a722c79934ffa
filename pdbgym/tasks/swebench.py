"""SWE-bench-style JSONL interchange, so SWE-smith / SWE-Gym / SWE-bench tasks run in pdbgym (and back).

A row holds ``instance_id``, ``patch`` (the reference fix), ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (JSON
lists, or JSON-encoded strings of lists as SWE-bench stores them), and the buggy repository: either
``repo`` (``owner/name``) and ``base_commit`` as SWE-bench, SWE-Gym and SWE-smith publish them (the tree
at that commit, from a local mirror or a cached clone: ``pdbgym.tasks.mirrors``), or ``repo_path``, a
local checkout (or ``<--repos>/<instance_id>``). An optional ``test_patch`` (SWE-bench's tests that expose
the bug) is applied to the tree. The instance's environment comes from ``requirements`` (a list of pinned ``NAME==VERSION``, or
their lines as one string) or ``requirements_file`` (a requirements file, relative to the JSONL's folder,
pinned lines only); it is recorded in task.json and, with ``build_environments``, built at import, so
an instance whose environment cannot be set up is reported then. Other fields are kept in task.json.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pdbgym.errors import PdbgymError, TaskFormatError
from pdbgym.fileio import JSONValue, write_text_atomic
from pdbgym.sandbox.pyenv import check_requirements, ensure_environment
from pdbgym.tasks.mirrors import RepoSource, commit_problem, repo_name_problem
from pdbgym.tasks.model import REPO_DIR, Task, instance_id_problem, load_task, write_task
from pdbgym.tasks.patches import apply_patch
from pdbgym.tasks.synth.deps import DependencyError, declared_requirements, pin_requirements, project_name

_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS")
_DROPPED_ON_IMPORT = {"repo_path", "test_patch", "requirements_file"}


class SwebenchError(PdbgymError):
    """A SWE-bench row cannot become a task (missing field, missing checkout, patch that does not apply)."""


@dataclass
class ImportOutcome:
    """One row's result: the task folder written, or why the row was skipped."""

    line: int
    instance_id: str
    task_dir: Path | None = None
    error: str = ""
    origin: str = ""  # where repo/ came from: a checkout, or a mirror or clone at a commit


def decode_test_list(value: JSONValue, name: str, where: str) -> list[str]:
    """Accept a list of node ids or a JSON-encoded string of one (SWE-bench's storage)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SwebenchError(f"{where}: field '{name}' is a string but not a JSON list ({exc})") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SwebenchError(f"{where}: field '{name}' must be a list of test ids (or a JSON string of one)")
    return [v for v in value if isinstance(v, str)]  # every one, as checked


def _local_checkout(row: Mapping[str, JSONValue], repos_root: Path | None, where: str) -> Path | None:
    """The row's local checkout: ``repo_path``, else ``<repos_root>/<instance_id>`` when that exists or the
    row gives no ``repo``/``base_commit`` to fetch instead; None when the row is to come from git."""
    if row.get("repo_path"):
        path = Path(str(row["repo_path"])).expanduser()
    elif repos_root is not None and ((repos_root / str(row["instance_id"])).is_dir() or not _names_commit(row)):
        path = repos_root / str(row["instance_id"])
    elif _names_commit(row):
        return None
    else:
        raise SwebenchError(f"{where}: no 'repo' and 'base_commit' (as SWE-bench publishes them), no 'repo_path' "
                            "and no --repos folder; give the row 'repo' and 'base_commit' (and pass --mirrors DIR "
                            "holding a clone, or let pdbgym clone it) or a 'repo_path'")
    if not path.is_dir():
        raise SwebenchError(f"{where}: repository checkout {path} not found; clone it locally or fix 'repo_path'")
    return path


def _names_commit(row: Mapping[str, JSONValue]) -> bool:
    return row.get("repo") is not None or row.get("base_commit") is not None


def _export_commit(row: Mapping[str, JSONValue], source: RepoSource, dest: Path, where: str) -> str:
    """Write the tree of the row's ``base_commit`` of ``repo`` into ``dest``; a line saying from where."""
    checks = (("repo", repo_name_problem(row.get("repo"))), ("base_commit", commit_problem(row.get("base_commit"))))
    for name, problem in checks:
        if name not in row or row[name] is None:
            raise SwebenchError(f"{where}: field '{name}' is missing; a row fetched from git needs both 'repo' "
                                "(owner/name) and 'base_commit' (a commit sha)")
        if problem is not None:
            raise SwebenchError(f"{where}: field '{name}' {problem}; fix the row (nothing was fetched)")
    try:
        return source.export(str(row["repo"]), str(row["base_commit"]), dest)
    except PdbgymError as exc:
        raise SwebenchError(f"{where}: field 'repo'/'base_commit': {exc}") from exc


def _folder_name(instance_id: JSONValue, where: str) -> str:
    """The instance id as the name of one folder directly under ``--out`` (never a path that leaves it)."""
    problem = instance_id_problem(instance_id)
    if problem is not None:
        raise SwebenchError(f"{where}: instance_id cannot name a task folder under --out: {problem}; rename it in the JSONL")
    return str(instance_id)


def row_requirements(row: Mapping[str, JSONValue], base: Path, where: str) -> list[str] | None:
    """The instance's pinned requirements from ``requirements`` or ``requirements_file`` (None: neither),
    checked; a file is read only inside ``base`` (the JSONL's folder)."""
    given = row.get("requirements")
    if given is None and row.get("requirements_file"):
        path = (base / str(row["requirements_file"])).resolve()
        if not path.is_relative_to(base.resolve()) or not path.is_file():
            raise SwebenchError(f"{where}: requirements_file {row['requirements_file']!r} is not a file inside "
                                f"{base}; put it beside the JSONL")
        given = path.read_text(errors="replace")
    if given is None:
        return None
    if isinstance(given, str):
        lines = [line.split(" #", 1)[0].strip() for line in given.splitlines()]
        given = [line for line in lines if line and not line.startswith("#")]
    if not isinstance(given, list):
        raise SwebenchError(f"{where}: requirements must be a list of NAME==VERSION, got {type(given).__name__}")
    try:
        return check_requirements(given, f"{where}: ")
    except PdbgymError as exc:
        raise SwebenchError(f"{where}: the instance's environment cannot be set up: {exc}") from exc


def row_to_task(row: Mapping[str, JSONValue], out_dir: Path, repos_root: Path | None = None, where: str = "row",
                base: Path = Path("."), source: RepoSource | None = None) -> Path:
    """Write one row as a task folder under ``out_dir`` (replacing an earlier import of the same id).
    ``source`` finds repositories for rows that name ``repo``/``base_commit`` (default: no mirrors, clone
    when missing)."""
    return _row_to_task(row, out_dir, repos_root, where, base, source or RepoSource())[0]


def _row_to_task(row: Mapping[str, JSONValue], out_dir: Path, repos_root: Path | None, where: str, base: Path,
                 source: RepoSource, derive_requirements: bool = False) -> tuple[Path, str]:
    """``row_to_task``, also saying where repo/ came from (the import's report shows it)."""
    for name in ("instance_id", "patch", *_LIST_FIELDS):
        if name not in row:
            raise SwebenchError(f"{where}: missing required field '{name}'")
    instance_id = _folder_name(row["instance_id"], where)
    checkout = _local_checkout(row, repos_root, where)
    data: dict[str, object] = {k: v for k, v in row.items() if k not in _DROPPED_ON_IMPORT and v is not None}
    requirements = row_requirements(row, base, where)
    if requirements is not None:
        data["requirements"] = requirements
    for name in _LIST_FIELDS:
        data[name] = decode_test_list(row[name], name, where)
    final_dir = out_dir / instance_id
    staging = out_dir / f".importing-{instance_id}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        if checkout is not None:
            shutil.copytree(checkout, staging / REPO_DIR, symlinks=True,
                            ignore=shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache"))
            origin = f"checkout {checkout}"
        else:
            origin = _export_commit(row, source, staging / REPO_DIR, where)
        if row.get("test_patch"):
            _apply(staging / REPO_DIR, str(row["test_patch"]), where)
        if requirements is None and derive_requirements and (derived := _derived_requirements(staging / REPO_DIR, row,
                                                                                           where)):
            data["requirements"] = derived  # nothing declared: the runner alone, as for any task without them
        _write_and_load(staging, data, where)
        if final_dir.exists():
            shutil.rmtree(final_dir)
        staging.rename(final_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final_dir, origin


def _derived_requirements(repo: Path, row: Mapping[str, JSONValue], where: str) -> list[str]:
    """A published row names no environment (SWE-bench keeps its install specs apart): the project's own
    declared runtime and test dependencies at this commit, resolved to exact pins for this interpreter as
    synthesis does (``pdbgym.tasks.synth.deps``); a pytest the project needs (``<9``) is kept."""
    name = project_name(repo) or str(row.get("repo", "")).rpartition("/")[2] or str(row["instance_id"])
    try:
        return check_requirements(pin_requirements(declared_requirements(repo, name), name), f"{where}: ")
    except DependencyError as exc:
        raise SwebenchError(f"{where}: the project's declared dependencies cannot be installed here: {exc}; "
                            "give the row 'requirements' (pinned NAME==VERSION) instead") from exc


def _write_and_load(staging: Path, data: Mapping[str, object], where: str) -> None:
    """task.json written and the folder loaded as a task; a problem is named with the row, not with the
    staging folder it was found in (a name the user never sees again)."""
    try:
        write_task(staging, data)
        load_task(staging)
    except TaskFormatError as exc:
        raise SwebenchError(f"{where}: {str(exc).replace(str(staging), '<task>')}; fix the row") from exc


def _apply(repo: Path, patch: str, where: str) -> None:
    try:  # checked, inside the repo, without git's repository discovery (see tasks/patches.py)
        apply_patch(repo, patch)
    except PdbgymError as exc:
        raise SwebenchError(f"{where}: field 'test_patch' does not apply to the repository: {str(exc)[:300]}; "
                            "check 'base_commit' (the tree the patch was made against)") from exc


def import_swebench(jsonl: str | Path, out_dir: str | Path, repos_root: str | Path | None = None,
                    build_environments: bool = False, mirrors: str | Path | None = None, clone: bool = True,
                    on_done: Callable[[ImportOutcome], None] | None = None,
                    derive_requirements: bool = True) -> list[ImportOutcome]:
    """Import every row of ``jsonl``; a bad row is reported in its outcome and never stops the rest.
    Rows naming ``repo``/``base_commit`` take their tree from ``mirrors`` (``mirror_candidates``) or a
    clone cached under ``$PDBGYM_HOME/repos`` (made when missing, unless ``clone`` is off).
    With ``build_environments`` each instance's environment is built (or found in the cache) too: one
    that cannot be is that row's error, and its folder is not kept. ``on_done`` hears each outcome. A row
    without ``requirements`` gets the project's declared dependencies, pinned (``derive_requirements``;
    off: the runner alone)."""
    source = Path(jsonl)
    if not source.is_file():
        raise SwebenchError(f"{source}: no such JSONL file")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    repos = RepoSource(Path(mirrors) if mirrors else None, clone=clone)
    outcomes: list[ImportOutcome] = []
    for number, line in enumerate(source.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        outcome = _import_line(line, f"{source}:{number}", number, out, repos_root, repos, build_environments,
                               source.parent, derive_requirements)
        outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)
    return outcomes


def _import_line(line: str, where: str, number: int, out: Path, repos_root: str | Path | None, repos: RepoSource,
                 build_environments: bool, base: Path, derive_requirements: bool = False) -> ImportOutcome:
    """One row's outcome; every error names the row by its line and, once known, its instance id."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return ImportOutcome(number, "", error=f"{where}: not valid JSON ({exc})")
    if not isinstance(row, dict):
        return ImportOutcome(number, "", error=f"{where}: a row must be a JSON object")
    instance_id = str(row.get("instance_id", ""))
    if instance_id:
        where = f"{where} ({instance_id[:80]})"
    try:
        task_dir, origin = _row_to_task(row, out, Path(repos_root) if repos_root else None, where, base, repos,
                                        derive_requirements)
        if build_environments:
            _set_up(task_dir, where)
        return ImportOutcome(number, instance_id, task_dir, origin=origin)
    except PdbgymError as exc:
        return ImportOutcome(number, instance_id, error=str(exc))
    except (OSError, subprocess.SubprocessError) as exc:  # an unreadable checkout, a full disk, a hung git
        return ImportOutcome(number, instance_id, error=f"{where}: {exc}")


def _set_up(task_dir: Path, where: str) -> None:
    """Build the imported task's environment; on failure the folder goes and the row reports why."""
    task = load_task(task_dir)
    if not task.requirements:
        return
    try:
        ensure_environment(task.requirements)
    except PdbgymError as exc:
        shutil.rmtree(task_dir, ignore_errors=True)
        raise SwebenchError(f"{where}: the instance's environment could not be set up: {exc}") from exc


def task_to_row(task: Task, lists_as_strings: bool = True) -> dict[str, object]:
    """A SWE-bench-style row for ``task`` (its ``task.json``, the test lists as JSON text unless
    ``lists_as_strings`` is off); ``repo_path`` points at the task's own buggy repo."""
    data = task.to_json()
    row: dict[str, object] = dict(data)
    for name in _LIST_FIELDS:
        tests = data["FAIL_TO_PASS"] if name == "FAIL_TO_PASS" else data["PASS_TO_PASS"]
        row[name] = json.dumps(tests) if lists_as_strings else list(tests)
    row["repo_path"] = str(task.repo)
    return row


def export_swebench(tasks: list[Task], out_file: str | Path, lists_as_strings: bool = True) -> int:
    """Write ``tasks`` as JSONL (atomically); returns the number of rows."""
    rows = [json.dumps(task_to_row(task, lists_as_strings)) + "\n" for task in tasks]
    write_text_atomic(Path(out_file), "".join(rows))
    return len(rows)
