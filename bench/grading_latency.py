"""Grading latency: the hardened grader against a plain one, on a built-in task with its reference fix.

The hardened grader (``pdbgym.grading.grader.grade``) builds the grading tree without following links,
starts an isolated interpreter through ``pdbgym.grading.launch`` and judges the streamed records.
The baseline, measured in the same run and the same sandbox, is the plain way: ``shutil.copytree`` of the
workspace and ``python -m pytest -p no:cacheprovider -p pytest_timeout -q NODES`` with the repo on
``PYTHONPATH`` (outcomes not even read). A third arm prices the read-only binds of the tree's test files
(``Sandbox.run(readonly_paths=...)``): the hardened grader on the same sandbox with binds turned off (it
then relies on the after-run hash checks alone). With ``--against REV`` a fourth arm is the grader of
an earlier revision of pdbgym (checked out with ``git worktree`` into a scratch folder and timed around its
own ``grade`` call in a child process), so a change to grading is priced against the code it replaced on
the same machine in one run. Runs alternate between the arms; figures are p50 and p95 in ms.

    python bench/grading_latency.py [--task builtin__logstats-level-counts] [--runs 7] [--against REV] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pdbgym.grading.grader import grade
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


_EARLIER = """
import json, sys, time
from pathlib import Path
try:
    from pdbgym.grading.grader import grade
except ImportError:  # a revision from before pdbgym/grading/
    from pdbgym.env.grading import grade
from pdbgym.sandbox import get_sandbox
from pdbgym.tasks.suites import resolve_tasks
task = next(t for t in resolve_tasks("builtin") if t.instance_id == sys.argv[1])
sandbox = get_sandbox()
started = time.perf_counter()
result = grade(task, Path(sys.argv[2]), sandbox)
print(json.dumps({"s": time.perf_counter() - started, "solved": result.final_test_passed}))
"""


def earlier_grade(checkout: Path, task: Task, workspace: Path) -> float:
    """Seconds the grader of ``checkout`` (an earlier revision) takes on ``workspace``, timed in a child."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", _EARLIER, task.instance_id, str(workspace)], cwd=checkout,
                          env=env, capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if not figures["solved"]:
        raise SystemExit(f"the earlier grader did not grade the reference fix solved: {done.stdout[-500:]}")
    return float(figures["s"])


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
    parser.add_argument("--against", metavar="REV", help="also time the grader of this git revision")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    earlier_dir = tempfile.mkdtemp(prefix="pdbgym-bench-earlier-") if args.against else None
    if earlier_dir is not None:
        repo = Path(__file__).resolve().parent.parent
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", earlier_dir, args.against],
                       check=True, capture_output=True)
    try:
        return _measure(args, Path(earlier_dir) if earlier_dir else None)
    finally:
        if earlier_dir is not None:
            subprocess.run(["git", "-C", str(Path(__file__).resolve().parent.parent), "worktree", "remove",
                            "--force", earlier_dir], capture_output=True)


def _measure(args: argparse.Namespace, earlier: Path | None) -> int:
    task = next(t for t in resolve_tasks("builtin") if t.instance_id == args.task)
    sandbox = get_sandbox()
    unbound_sandbox = without_binds(sandbox) if sandbox.binds_readonly else None
    hardened, plain, unbound, before = [], [], [], []
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
            if earlier is not None:
                before.append(earlier_grade(earlier, task, ws.path))
    figures = {"task": task.instance_id, "sandbox": sandbox.name, "runs": args.runs,
               "hardened": _ms(hardened), "plain": _ms(plain)}
    figures["ratio_p50"] = round(figures["hardened"]["p50_ms"] / figures["plain"]["p50_ms"], 2)
    if unbound:
        figures["unbound"] = _ms(unbound)
        figures["binds_ratio_p50"] = round(figures["hardened"]["p50_ms"] / figures["unbound"]["p50_ms"], 2)
    if before:
        figures["earlier"] = {"revision": args.against, **_ms(before)}
        figures["vs_earlier_p50"] = round(figures["hardened"]["p50_ms"] / figures["earlier"]["p50_ms"], 2)
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"grading {task.instance_id} ({sandbox.name}, {args.runs} runs each)")
        for name in ("hardened", "unbound", "plain", "earlier"):
            if name in figures:
                print(f"  {name:>8}: p50 {figures[name]['p50_ms']:7.1f} ms   p95 {figures[name]['p95_ms']:7.1f} ms")
        print(f"  hardened / plain at p50: {figures['ratio_p50']:.2f}x")
        if "vs_earlier_p50" in figures:
            print(f"  hardened / the grader of {args.against} at p50: {figures['vs_earlier_p50']:.2f}x")
        if "binds_ratio_p50" in figures:
            print(f"  with / without read-only test binds at p50: {figures['binds_ratio_p50']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
