"""A whole scripted episode against one plain ``python -m pytest`` of the same task's suite, in one run.

The episode is what ``pdbgym run --policy scripted`` plays (``play_policy`` with the task's scripted
policy: reset, breakpoint, ``c``, inspect, view, edit, ``run_tests``, submit and grading), with the
pytest fork server (``EnvConfig.zygote``, the default) and, as the earlier path, with a fresh interpreter
for every run (``zygote=False``). The baseline is ``python -m pytest -q -p no:cacheprovider`` of the task's
tests (FAIL_TO_PASS + PASS_TO_PASS) in a copy of its repo, in the same sandbox with the environment every
sandboxed command gets. The three are measured in turn, rep by rep, so they share the machine's load.
Figures are p50 and p95 in milliseconds; the ratio is episode p50 over plain p50 (goal: at most 1.5).
Beside them, the machine's CPU seconds over each episode (busy time in ``/proc/stat``, every process
counted: the server, its forks, the sessions' spares) and their p50 ratio, fresh over fork server: what a
CPU-bound campaign of many episodes at once gains. Run it on a quiet machine.

    python bench/episode_latency.py                  # builtin__billing-invoice-totals, 15 reps
    python bench/episode_latency.py --task builtin__logstats-level-counts --reps 30 --json

The first episode of a process starts its fork server; it is played before the reps and reported apart.
Run against an older tree (``PYTHONPATH=OLD_TREE python bench/episode_latency.py``) where ``EnvConfig``
has no ``zygote``, only the fresh-interpreter arm is measured: the figures before the fork server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from pdbgym.agent.play import play_policy
from pdbgym.agent.scripted import ScriptedPolicy
from pdbgym.env import EnvConfig
from pdbgym.sandbox import Limits, Sandbox, Workspace, get_sandbox, sandbox_env
from pdbgym.tasks.model import Task
from pdbgym.tasks.suites import resolve_task

GOAL_RATIO = 1.5
HAS_ZYGOTE = "zygote" in {f.name for f in fields(EnvConfig)}  # False on a tree from before the fork server


@dataclass
class Figure:
    name: str
    samples: int
    p50_ms: float
    p95_ms: float


def summarize(name: str, seconds: list[float]) -> Figure:
    """p50 and nearest-rank p95 of durations in seconds, in milliseconds."""
    ordered = sorted(seconds)
    p95 = ordered[max(0, min(len(ordered) - 1, round(0.95 * len(ordered)) - 1))]
    return Figure(name, len(ordered), statistics.median(ordered) * 1000, p95 * 1000)


def plain_pytest(sandbox: Sandbox, task: Task) -> float:
    """Seconds for one ``python -m pytest`` of the task's tests, in a fresh copy of its repo (copy not timed)."""
    with Workspace.create(task.repo) as workspace:
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *task.all_tests]
        env = sandbox_env(workspace.path)
        started = time.perf_counter()
        result = sandbox.run(argv, workspace.path, Limits(wall_time_s=120), env=env)
        elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1) or "passed" not in result.output + "failed":
        raise SystemExit(f"the plain pytest run failed: {result.output[-1500:]}")
    return elapsed


def machine_busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (``/proc/stat``: all but idle and iowait)."""
    with open("/proc/stat") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def scripted_episode(sandbox: Sandbox, task: Task, zygote: bool, scratch: Path) -> tuple[float, float, dict[str, float]]:
    """Seconds for one whole scripted episode, the machine's CPU seconds over it, and the seconds of each of
    its steps (from its transcript)."""
    transcript = scratch / f"episode-{time.monotonic_ns()}.json"
    busy = machine_busy_s()
    started = time.perf_counter()
    config = EnvConfig(zygote=zygote) if HAS_ZYGOTE else EnvConfig()
    result = play_policy(task, ScriptedPolicy(task), config, sandbox=sandbox, transcript_path=transcript)
    elapsed = time.perf_counter() - started
    cpu = machine_busy_s() - busy
    if not result.final_test_passed:
        raise SystemExit(f"the scripted policy failed on {task.instance_id}: the benchmark is void")
    steps: dict[str, float] = {}
    for step in json.loads(transcript.read_text())["env"]["steps"]:
        name = step["tool"] if step["tool"] != "pdb" else f"pdb {step['args']['command'].split()[0]}"
        steps[name] = steps.get(name, 0.0) + step["duration_s"]
    transcript.unlink()
    return elapsed, cpu, steps


def run_benchmark(task_id: str = "builtin__billing-invoice-totals", reps: int = 15, kind: str = "bwrap",
                  fresh_arm: bool = True) -> dict[str, object]:
    sandbox = get_sandbox(kind)
    task = resolve_task(task_id)
    plain: list[float] = []
    arms: dict[str, list[float]] = {"zygote": [], "fresh": []} if fresh_arm else {"zygote": []}
    if not HAS_ZYGOTE:
        arms = {"fresh": []}
    steps: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    cpu: dict[str, list[float]] = {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory(prefix="pdbgym-bench-episode-") as scratch:
        first, _, _ = scripted_episode(sandbox, task, HAS_ZYGOTE, Path(scratch))  # starts this process's fork server
        plain_pytest(sandbox, task)  # the page cache warm for the baseline too
        for rep in range(reps):
            order = ["plain", *arms] if rep % 2 == 0 else [*reversed(arms), "plain"]
            for what in order:
                if what == "plain":
                    plain.append(plain_pytest(sandbox, task))
                else:
                    elapsed, cpu_s, by_step = scripted_episode(sandbox, task, what == "zygote", Path(scratch))
                    arms[what].append(elapsed)
                    cpu[what].append(cpu_s)
                    steps[what].append(by_step)
    figures = {"plain": summarize(f"plain `python -m pytest` of the suite ({len(task.all_tests)} tests)", plain)}
    if "zygote" in arms:
        figures["zygote"] = summarize("whole scripted episode, fork server (default)", arms["zygote"])
    if "fresh" in arms:
        label = "fresh interpreter per run (zygote=False)" if HAS_ZYGOTE else "this tree (no fork server)"
        figures["fresh"] = summarize(f"whole scripted episode, {label}", arms["fresh"])
    ratios = {f"{arm}_over_plain_p50": figures[arm].p50_ms / figures["plain"].p50_ms for arm in arms}
    step_means = {arm: {name: 1000 * statistics.mean(s.get(name, 0.0) for s in runs) for name in runs[0]}
                  for arm, runs in steps.items()}
    cpu_p50 = {arm: statistics.median(values) for arm, values in cpu.items()}
    cpu_ratio = cpu_p50["fresh"] / cpu_p50["zygote"] if {"fresh", "zygote"} <= set(cpu_p50) else None
    return {"sandbox": sandbox.name, "task": task.instance_id, "reps": reps, "first_episode_ms": first * 1000,
            "cpu_p50_s": cpu_p50, "cpu_fresh_over_zygote_p50": cpu_ratio,
            "figures": {key: asdict(value) for key, value in figures.items()}, "ratios": ratios,
            "step_means_ms": step_means, "goal_ratio": GOAL_RATIO,
            "goal_met": min(ratios.values()) <= GOAL_RATIO}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", default="builtin__billing-invoice-totals", help="a task id or folder")
    parser.add_argument("--reps", type=int, default=15, help="episodes per arm (and plain runs)")
    parser.add_argument("--sandbox", default="bwrap", help="bwrap (the fork server needs it), auto or plain")
    parser.add_argument("--no-fresh", action="store_true", help="skip the fresh-interpreter arm")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    args = parser.parse_args(argv)
    result = run_benchmark(args.task, args.reps, args.sandbox, not args.no_fresh)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Scripted episode against plain pytest ({result['sandbox']} sandbox, {result['task']})")
    for column in ("what", "n", "p50 ms", "p95 ms"):
        table.add_column(column, justify="left" if column == "what" else "right")
    for figure in result["figures"].values():  # type: ignore[union-attr]
        table.add_row(figure["name"], str(figure["samples"]), f"{figure['p50_ms']:.0f}", f"{figure['p95_ms']:.0f}")
    console = Console()
    console.print(table)
    for arm, ratio in result["ratios"].items():  # type: ignore[union-attr]
        console.print(f"{arm.replace('_over_plain_p50', '')}: episode p50 / plain pytest p50 = {ratio:.2f} "
                      f"(goal <= {GOAL_RATIO})")
    for arm, means in result["step_means_ms"].items():  # type: ignore[union-attr]
        console.print(f"{arm} steps, mean ms: " + ", ".join(f"{k} {v:.0f}" for k, v in means.items()))
    console.print("machine CPU an episode, p50: " + ", ".join(f"{arm} {s:.2f} s" for arm, s in result["cpu_p50_s"].items()))
    if result["cpu_fresh_over_zygote_p50"] is not None:
        console.print(f"CPU, fresh interpreter / fork server (p50): {result['cpu_fresh_over_zygote_p50']:.2f}x")
    console.print(f"first episode of the process (starts the fork server): {result['first_episode_ms']:.0f} ms")


if __name__ == "__main__":
    main()
