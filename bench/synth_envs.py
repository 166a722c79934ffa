"""Synthesis from released PyPI projects whose tests need third-party packages: tasks kept and the
environment's build time, first and cached, per project (the table of docs/synthesis.md).

For each ``NAME==VERSION``: ``tasks synth pypi:NAME==VERSION`` (declared runtime and test
dependencies pinned, the environment built, the tasks validated in it) into a fresh ``$PDBGYM_HOME``,
then the environment asked for again, as ``tasks validate`` or an episode asks (the cached figure).
Needs PyPI.

    python bench/synth_envs.py freezegun==1.5.1 humanize==4.11.0 --max 5 --workers 2
    python bench/synth_envs.py --json ...
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from pdbgym.sandbox.pyenv import ensure_environment, list_environments
from pdbgym.tasks.model import load_task
from pdbgym.tasks.synth.engine import SynthConfig, synthesize_source


def measure(spec: str, out: Path, max_tasks: int, workers: int) -> dict:
    started = time.monotonic()
    report = synthesize_source(f"pypi:{spec}", SynthConfig(out=out, max_tasks=max_tasks, workers=workers, seed=0),
                               lambda *_: None)
    row: dict = {"project": spec, "kept": len(report.task_ids), "tests_passing": report.tests_passing,
                 "synth_s": round(time.monotonic() - started, 1), "error": (report.error or "")[:300]}
    tasks = [load_task(out / task_id) for task_id in report.task_ids]
    requirements = tasks[0].requirements if tasks else None
    row["requirements"] = len(requirements or [])
    if requirements:
        first = ensure_environment(requirements)
        again = time.monotonic()
        ensure_environment(requirements)
        row.update(build_first_s=first.build_s, build_cached_s=round(time.monotonic() - again, 4),
                   env_mib=round(first.bytes / 2**20, 1),
                   same_env=all(t.requirements == requirements for t in tasks))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("specs", nargs="+", help="NAME==VERSION of released projects")
    parser.add_argument("--max", type=int, default=5, help="tasks kept at most per project")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pdbgym-synth-envs-") as scratch:
        os.environ["PDBGYM_HOME"] = str(Path(scratch, "home"))  # every environment built here first
        rows = [measure(spec, Path(scratch, "out", spec), args.max, args.workers) for spec in args.specs]
        rows_env = len(list_environments())
    if args.json:
        print(json.dumps({"projects": rows, "environments": rows_env}, indent=2))
        return
    print("| project | tests passing | tasks kept | pinned requirements | env build, first | cached | env size |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        first = f"{r['build_first_s']:.1f} s" if "build_first_s" in r else "-"
        cached = f"{r['build_cached_s'] * 1000:.1f} ms" if "build_cached_s" in r else "-"
        size = f"{r['env_mib']} MiB" if "env_mib" in r else "-"
        print(f"| {r['project']} | {r['tests_passing']} | {r['kept']} | {r['requirements']} | {first} | {cached} | "
              f"{size} |" + (f" {r['error'][:120]}" if r["error"] else ""))


if __name__ == "__main__":
    main()
