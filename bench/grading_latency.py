"""Grading latency: the hardened grader against a plain one, on a built-in task with its reference fix.

The hardened grader (``pdbgym.env.grading.grade``) builds the grading tree without following links,
starts an isolated interpreter through ``pdbgym.tasks.pytest_launch`` and judges the streamed records.
The baseline, measured in the same run and the same sandbox, is the plain way: ``shutil.copytree`` of the
workspace and ``python -m pytest -p no:cacheprovider -p pytest_timeout -q NODES`` with the repo on
``PYTHONPATH`` (outcomes not even read). A third arm prices the read-only binds of the tree's test files
(``Sandbox.run(readonly_paths=...)``): the hardened grader on the same sandbox with binds turned off (it
then relies on the after-run hash checks alone). Runs alternate between the arms; figures are p50 and p95
in ms.

    python bench/grading_latency.py [--task builtin__logstats-level-counts] [--runs 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pdbgym.env.grading import grade
from pdbgym.sandbox import Limits, Sandbox, Workspace, get_sandbox, sandbox_env
from pdbgym.tasks.model import Task
from pdbgym.tasks.patches import apply_patch
from pdbgym.tasks.suites import resolve_tasks


def plain_grade(task: Task, workspace: Path, sandbox: Sandbox) -> bool:
    """The baseline: copy the workspace and run pytest in it the plain way; True when it exited 0."""
    with tempfile.TemporaryDirectory(prefix="pdbgym-bench-") as tmp:
        tree = Path(tmp) / "repo"
        shutil.copytree(workspace, tree, symlinks=True)
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "pytest_timeout",
                f"--timeout={task.test_timeout_s:g}", "-q", *task.all_tests]
        return sandbox.run(argv, tree, Limits(wall_time_s=120), env=sandbox_env(tree)).returncode == 0


def without_binds(sandbox: Sandbox) -> Sandbox:
    """The same backend with ``binds_readonly`` off, so grading binds nothing read-only."""
    return type(f"{type(sandbox).__name__}NoBinds", (type(sandbox),), {"binds_readonly": False})()


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="builtin__logstats-level-counts")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    task = next(t for t in resolve_tasks("builtin") if t.instance_id == args.task)
    sandbox = get_sandbox()
    unbound_sandbox = without_binds(sandbox) if sandbox.binds_readonly else None
    hardened, plain, unbound = [], [], []
    with Workspace.create(task.repo) as ws:
        apply_patch(ws.path, task.patch)
        for _ in range(args.runs):
            for box, samples in ((sandbox, hardened), (unbound_sandbox, unbound)):
                if box is None:
                    continue
                started = time.perf_counter()
                result = grade(task, ws.path, box)
                samples.append(time.perf_counter() - started)
                if not result.final_test_passed:
                    raise SystemExit(f"the reference fix did not grade solved: "
                                     f"{result.tampered or result.output[-500:]}")
            started = time.perf_counter()
            if not plain_grade(task, ws.path, sandbox):
                raise SystemExit("the plain baseline run failed")
            plain.append(time.perf_counter() - started)
    figures = {"task": task.instance_id, "sandbox": sandbox.name, "runs": args.runs,
               "hardened": _ms(hardened), "plain": _ms(plain)}
    figures["ratio_p50"] = round(figures["hardened"]["p50_ms"] / figures["plain"]["p50_ms"], 2)
    if unbound:
        figures["unbound"] = _ms(unbound)
        figures["binds_ratio_p50"] = round(figures["hardened"]["p50_ms"] / figures["unbound"]["p50_ms"], 2)
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"grading {task.instance_id} ({sandbox.name}, {args.runs} runs each)")
        for name in ("hardened", "unbound", "plain"):
            if name in figures:
                print(f"  {name:>8}: p50 {figures[name]['p50_ms']:7.1f} ms   p95 {figures[name]['p95_ms']:7.1f} ms")
        print(f"  hardened / plain at p50: {figures['ratio_p50']:.2f}x")
        if "binds_ratio_p50" in figures:
            print(f"  with / without read-only test binds at p50: {figures['binds_ratio_p50']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
