"""CPU: ``pdbgym eval`` of the embedded model through the engine against the code before it, in one run.

Both trees (this one, and ``git archive`` of ``--against``, default 226d2f2: the last commit before the
engine) run the same command, ``pdbgym eval --arm e=embedded`` on the same copies of ``--tasks``
built-in tasks, one run each, the same turn budget and tokens per turn, with one shared
``PDBGYM_HOME`` (the de-quantized model is made before timing). The draws differ (the engine's seeds
map to other samples), so the figure compared is generated tokens per second of wall time, with the
episodes' counts. The runs alternate old/new ``--repeats`` times; medians are printed.

    python bench/engine_cpu.py --tasks 3 --repeats 2
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tree_of(commit: str, scratch: Path) -> Path:
    target = scratch / f"tree-{commit}"
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit, "pdbgym"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def eval_once(tree: Path, tasks: Path, out: Path, home: Path, args: argparse.Namespace) -> dict:
    from pdbgym.rollouts.cache import read_cache

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PDBGYM_", "PYTHONPATH"))}
    env.update(PYTHONPATH=str(tree), PDBGYM_HOME=str(home), HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    command = [sys.executable, "-m", "pdbgym.cli", "eval", "--arm", "e=embedded", "--tasks", str(tasks), "--runs", "1",
               "--turn-budget", str(args.turn_budget), "--max-new-tokens", str(args.max_new_tokens),
               "--out", str(out), "--force", "--seed", "1"]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, cwd=out.parent, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{tree}: eval failed:\n{done.stderr[-3000:]}")
    records = read_cache(out / "cache" / "e")
    tokens = sum(sum(r.loss_mask) for r in records)
    return {"seconds": seconds, "episodes": len(records), "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="226d2f2")
    parser.add_argument("--tasks", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--turn-budget", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from pdbgym.modelload import embedded_model_dir
    from pdbgym.tasks.suites import resolve_tasks

    scratch = Path(tempfile.mkdtemp(prefix="pdbgym-engine-cpu-"))
    home = scratch / "home"
    os.environ["PDBGYM_HOME"] = str(home)
    embedded_model_dir()  # de-quantized once, outside the timings
    tasks = scratch / "tasks"
    for task in resolve_tasks("builtin")[:args.tasks]:
        shutil.copytree(task.path, tasks / task.path.name)
    trees = {"before": tree_of(args.against, scratch), "engine": ROOT}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for repeat in range(args.repeats):
        for name, tree in trees.items():
            runs[name].append(eval_once(tree, tasks, scratch / f"{name}-{repeat}", home, args))
    figures: dict = {"against": args.against, "tasks": args.tasks, "repeats": args.repeats,
                     "turn_budget": args.turn_budget, "max_new_tokens": args.max_new_tokens}
    for name, rows in runs.items():
        figures[name] = {"tok_per_wall_s": round(statistics.median(r["tokens"] / r["seconds"] for r in rows), 2),
                         "runs": [{k: round(v, 2) if isinstance(v, float) else v for k, v in r.items()} for r in rows]}
    figures["wall_ratio_engine_vs_before"] = round(figures["engine"]["tok_per_wall_s"]
                                                   / figures["before"]["tok_per_wall_s"], 3)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
