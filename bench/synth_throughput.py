"""Task synthesis throughput: validated tasks per minute and yield, covering-tests path vs whole-suite baseline.

For each library the sdist is downloaded once (``synth.project.download_sdist``: from the index, never
built), then synthesized twice from the same unpacked folder with the same seed and ``--max``:

* ``covering`` (pdbgym's path): each candidate runs only the clean-suite tests that entered the mutated
  function (per-test function coverage from one profiled clean run), in a collected clean session
  with the function's code swapped (a run from files where that cannot be done); unreached
  candidates cost nothing.
* ``whole-suite`` (the named baseline): each candidate reruns the whole suite, and each kept task's
  buggy files run every listed test.

In the covering path a kept task's buggy files run the tests its candidate ran, and each distinct
task file layout runs all its listed tests once on clean files. Both include the clean-suite
baseline runs, task writing and task validation from the written files, and both run on
``--workers`` processes with the same executor (a sandboxed pytest fork server per worker). Prints
tasks/minute per path and their ratio (end to end), the mean seconds to test one candidate in each
path and their ratio (the candidate phase alone), yield (kept / tried) and whether both paths kept
the same tasks.

    .venv/bin/python bench/synth_throughput.py --max 12 --workers 2
    .venv/bin/python bench/synth_throughput.py --max 1000 --max-candidates 300 --workers 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pdbgym.tasks.synth.engine import STATE_DIR, STATE_FILE, SynthConfig, synthesize_source
from pdbgym.tasks.synth.project import download_sdist

LIBRARIES = ("toolz==1.2.0", "inflection==0.5.1", "boltons==26.2.0")


def measure(spec: str, work: Path, max_tasks: int, workers: int, seed: int, max_candidates: int | None) -> dict:
    folder = download_sdist(spec, work / "sdist")
    row: dict = {"library": spec}
    kept_ids = {}
    for mode in ("covering", "all"):
        out = work / f"out-{mode}"
        shutil.rmtree(out, ignore_errors=True)
        config = SynthConfig(out=out, max_tasks=max_tasks, seed=seed, workers=workers, select_tests=mode,
                             max_candidates=max_candidates)
        started = time.perf_counter()
        report = synthesize_source(str(folder), config, lambda *args: None)
        elapsed = time.perf_counter() - started
        if report.error:
            raise SystemExit(f"{spec} ({mode}): {report.error}")
        kept_ids[mode] = report.task_ids
        state = json.loads(next((out / STATE_DIR).glob(f"*/{STATE_FILE}")).read_text())
        ran = [r["seconds"] for r in state["tested"].values() if r["status"] not in ("uncovered", "unrendered")]
        row[mode] = {"seconds": round(elapsed, 1), "kept": report.kept, "tried": report.tried,
                     "candidate_seconds_mean": round(sum(ran) / max(len(ran), 1), 3), "candidates_run": len(ran),
                     "tasks_per_minute": round(60 * report.kept / elapsed, 2),
                     "yield": round(report.kept / max(report.tried, 1), 3), "statuses": report.statuses,
                     "executors": dict(Counter(r.get("executor") or "none" for r in state["tested"].values()))}
    row["speedup"] = round(row["covering"]["tasks_per_minute"] / max(row["all"]["tasks_per_minute"], 1e-9), 2)
    row["candidate_speedup"] = round(row["all"]["candidate_seconds_mean"]
                                     / max(row["covering"]["candidate_seconds_mean"], 1e-9), 2)
    row["same_tasks"] = kept_ids["covering"] == kept_ids["all"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--libs", nargs="+", default=list(LIBRARIES), help="NAME==VERSION specs")
    parser.add_argument("--max", type=int, default=5, help="tasks to keep per library and path")
    parser.add_argument("--max-candidates", type=int, default=None,
                        help="candidates to try per library and path (the corpus-scale regime: with a large --max,"
                             " both paths try the same candidates and keep what they yield)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="pdbgym-synth-bench-") as tmp:
        for spec in args.libs:
            rows.append(measure(spec, Path(tmp) / spec.replace("==", "-"), args.max, args.workers, args.seed,
                                args.max_candidates))
    total = {mode: (sum(r[mode]["kept"] for r in rows), sum(r[mode]["seconds"] for r in rows))
             for mode in ("covering", "all")}
    overall = (total["covering"][0] / total["covering"][1]) / max(total["all"][0] / total["all"][1], 1e-9)
    if args.json:
        print(json.dumps({"rows": rows, "overall_speedup": round(overall, 2)}, indent=2))
        return
    cap = f", --max-candidates {args.max_candidates}" if args.max_candidates else ""
    table = Table(title=f"synthesis throughput ({args.workers} workers, --max {args.max}{cap}, seed {args.seed})")
    for column in ("library", "covering tasks/min", "whole-suite tasks/min", "speedup", "s per candidate test",
                   "yield (kept/tried)", "same tasks"):
        table.add_column(column)
    for r in rows:
        c, a = r["covering"], r["all"]
        table.add_row(r["library"], f"{c['tasks_per_minute']} ({c['kept']} in {c['seconds']} s)",
                      f"{a['tasks_per_minute']} ({a['kept']} in {a['seconds']} s)", f"{r['speedup']}x",
                      f"{c['candidate_seconds_mean']} vs {a['candidate_seconds_mean']} ({r['candidate_speedup']}x)",
                      f"{c['kept']}/{c['tried']} = {c['yield']:.0%}", str(r["same_tasks"]))
    Console().print(table)
    print(f"overall: covering path {overall:.2f}x the whole-suite baseline in tasks per minute "
          "(end to end: download excluded; clean-suite baseline, candidates, task writing and validation included)")


if __name__ == "__main__":
    main()
