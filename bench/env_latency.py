"""Environment latency: reset, an instant pdb round trip, and restart, against the common way.

pdbgym's session reads the pty with select and stops at a nonce-tagged prompt record. The baseline,
measured in the same run and the same sandbox, is pdb driven the common way (as debug-gym does):
``python -m pdb -m pytest -s NODE`` on a raw pty, a loop of 0.1 s sleeps and reads until "(Pdb)"
appears. Figures are p50 and p95 in milliseconds.

    python bench/env_latency.py                      # a tiny generated project
    python bench/env_latency.py --task path/to/task  # a task folder (task.json + repo/)
    python bench/env_latency.py --json
    python bench/env_latency.py --environments [--requirement NAME==VERSION ...]

The measurement functions are importable (``measure_reset``, ``measure_round_trip``,
``measure_restart``, ``measure_baseline``) so other benchmarks can reuse them. Environment-level
figures (an ``edit`` step with its session restart, a whole scripted episode) use a built-in task.
With the bwrap sandbox, the cost of hiding the host is measured against bwrap with the whole host
visible read-only (the earlier layout), paired run by run: the interpreter floor and ``true``.
``--environments`` measures only ``DebugEnv.reset`` with a task environment mounted against the same
task without one, interleaved, and what the first and a second task of that environment spend getting it.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from pdbgym.debugger import PdbSession
from pdbgym.sandbox import Limits, Sandbox, Workspace, get_sandbox, sandbox_env

BASELINE_POLL_S = 0.1
TINY_MODULE = "def mean(values):\n    total = sum(values)\n    return total / (len(values) + 1)\n"
TINY_TEST = "from stats import mean\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n"


@dataclass
class Figure:
    """Latency of one operation over ``samples`` repetitions, in milliseconds."""

    name: str
    samples: int
    p50_ms: float
    p95_ms: float


def summarize(name: str, seconds: list[float]) -> Figure:
    """p50/p95 (nearest-rank) of durations given in seconds, reported in milliseconds."""
    ordered = sorted(seconds)
    p95_index = max(0, min(len(ordered) - 1, round(0.95 * len(ordered)) - 1))
    return Figure(name, len(ordered), statistics.median(ordered) * 1000, ordered[p95_index] * 1000)


def make_tiny_project(parent: Path) -> tuple[Path, str]:
    """A one-module project with one failing test; returns (repo folder, test node)."""
    repo = parent / "tiny_repo"
    (repo / "tests").mkdir(parents=True, exist_ok=True)
    (repo / "stats.py").write_text(TINY_MODULE)
    (repo / "tests" / "test_stats.py").write_text(TINY_TEST)
    return repo, "tests/test_stats.py::test_mean"


def resolve_target(task: Path | None, scratch: Path) -> tuple[Path, str]:
    """(repo, failing test node) from a task folder, or a generated tiny project."""
    if task is None:
        return make_tiny_project(scratch)
    from pdbgym.tasks.model import load_task

    loaded = load_task(task)
    return loaded.repo, loaded.FAIL_TO_PASS[0]


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure_reset(sandbox: Sandbox, repo: Path, node: str, reps: int) -> list[float]:
    """Seconds from nothing to the first prompt: Workspace.create + PdbSession.start."""
    durations = []
    for _ in range(reps):
        started = time.perf_counter()
        workspace = Workspace.create(repo)
        session = PdbSession(sandbox, workspace.path, node)
        session.start()
        durations.append(time.perf_counter() - started)
        session.close()
        workspace.cleanup()
    return durations


def measure_round_trip(session: PdbSession, reps: int) -> list[float]:
    """Seconds per instant command (``p i+1``). Every answer is checked against its own command, so
    a session whose replies lag one behind, or a broken one, cannot look fast."""
    durations = []
    for index in range(reps):
        started = time.perf_counter()
        reply = session.send(f"p {index}+1")
        durations.append(time.perf_counter() - started)
        if reply.output.strip() != str(index + 1):
            raise RuntimeError(f"unexpected answer to 'p {index}+1': {reply.output!r}")
    return durations


def measure_restart(session: PdbSession, reps: int, idle_before_s: float = 0.0) -> list[float]:
    """Seconds per restart (kill, fresh process, breakpoints re-applied, first prompt).

    ``idle_before_s`` is the pause before each restart, standing in for the agent's thinking time,
    during which the session's spare process finishes its imports. 0 measures back-to-back restarts.
    """
    session.send("b 2")  # something to re-apply
    durations = []
    for _ in range(reps):
        if idle_before_s:
            time.sleep(idle_before_s)
        durations.append(timed(session.restart))
    return durations


def measure_interpreter_floor(sandbox: Sandbox, workspace: Path, reps: int) -> list[float]:
    """Seconds for the sandbox to run ``python -c 'import pdb; pdb.Pdb()'``: the part of a reset no
    driver can avoid (on a loaded machine it dominates the reset)."""
    argv = [sys.executable, "-P", "-c", "import pdb; pdb.Pdb()"]
    return [timed(lambda: sandbox.run(argv, workspace)) for _ in range(reps)]


class HostViewBwrap(Sandbox):
    """The layout bwrap used before the host was hidden: the whole host read-only, uid 0, /proc
    writable. Only here to price the confinement; never use it to run untrusted code."""

    name = "bwrap-host-view"
    isolated = True

    def wrap(self, argv: list[str], workspace: Path, limits: Limits) -> list[str]:
        from pdbgym.sandbox.bwrap import bwrap_path

        ws = str(workspace)
        return [bwrap_path() or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/tmp", "--tmpfs", "/dev/shm", "--bind", ws, ws, "--chdir", ws, "--unshare-net",
                "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox", "--cap-drop", "ALL",
                "--new-session", "--die-with-parent", "--", *argv]


def measure_confinement_cost(workspace: Path, reps: int,
                             argv: list[str] | None = None) -> tuple[list[float], list[float]]:
    """``argv`` (default: the interpreter floor) under the bwrap sandbox and under the host-view
    layout, interleaved so both see the same machine load: (confined seconds, host-view seconds)."""
    argv = argv or [sys.executable, "-P", "-c", "import pdb; pdb.Pdb()"]
    confined, host_view = get_sandbox("bwrap"), HostViewBwrap()
    pairs = [(timed(lambda: confined.run(argv, workspace)), timed(lambda: host_view.run(argv, workspace)))
             for _ in range(reps)]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _baseline_read_until_prompt(process, deadline_s: float = 60.0) -> str:
    buffer = b""
    deadline = time.monotonic() + deadline_s
    while b"(Pdb)" not in buffer:
        if time.monotonic() > deadline:
            raise RuntimeError(f"baseline pdb gave no prompt; output so far: {buffer[-500:]!r}")
        time.sleep(BASELINE_POLL_S)
        while chunk := process.read(0):
            buffer += chunk
    return buffer.decode(errors="replace")


def measure_baseline(sandbox: Sandbox, workspace: Path, node: str, reps: int) -> tuple[list[float], list[float]]:
    """(first-prompt seconds, round-trip seconds) of pdb driven with sleep-and-read polling."""
    argv = [sys.executable, "-m", "pdb", "-m", "pytest", "-s", "-p", "no:cacheprovider", node]
    env = sandbox_env(workspace)
    starts, trips = [], []
    for _ in range(max(3, reps // 20)):
        started = time.perf_counter()
        process = sandbox.spawn_pty(argv, workspace, Limits(wall_time_s=3600), env)
        _baseline_read_until_prompt(process)
        starts.append(time.perf_counter() - started)
        process.close()
    process = sandbox.spawn_pty(argv, workspace, Limits(wall_time_s=3600), env)
    try:
        _baseline_read_until_prompt(process)
        for index in range(reps):
            started = time.perf_counter()
            process.write(f"p {index}+1\n".encode())
            answer = _baseline_read_until_prompt(process)
            trips.append(time.perf_counter() - started)
            if str(index + 1) not in answer:
                raise RuntimeError(f"unexpected baseline answer: {answer!r}")
    finally:
        process.close()
    return starts, trips


def measure_env_edit_restart(sandbox: Sandbox, env_task: str, reps: int) -> list[float]:
    """``DebugEnv.step(edit)``: write the file, move breakpoints, restart the session to its prompt."""
    from pdbgym.agent.scripted import scripted_actions
    from pdbgym.env import Action, DebugEnv, EnvConfig
    from pdbgym.tasks.suites import resolve_task

    task = resolve_task(env_task)
    edit = next(a for a in scripted_actions(task) if a.tool == "edit")
    undo = Action("edit", {**edit.args, "end": edit.args["start"] + edit.args["new_text"].count("\n") - 1,
                           "new_text": "".join(line + "\n" for line in _lines(task, edit))})
    durations = []
    with DebugEnv(task, EnvConfig(turn_budget=10 * reps + 10), sandbox) as env:
        env.reset()
        env.step(Action("pdb", {"command": f"b {edit.args['path']}:{edit.args['start']}"}))
        for index in range(reps):
            time.sleep(0.5)  # an agent thinks between tool calls; the session uses that time
            durations.append(timed(lambda i=index: env.step(edit if i % 2 == 0 else undo)))
    return durations


def _lines(task, edit) -> list[str]:  # noqa: ANN001
    text = (task.repo / edit.args["path"]).read_text().splitlines()
    return text[edit.args["start"] - 1 : edit.args["end"]]


def measure_scripted_episode(sandbox: Sandbox, env_task: str, reps: int) -> list[float]:
    """A whole scripted episode: reset, breakpoint, inspect, fix, run tests, submit and grade."""
    from pdbgym.agent.play import play_policy
    from pdbgym.agent.scripted import ScriptedPolicy
    from pdbgym.tasks.suites import resolve_task

    task = resolve_task(env_task)
    durations = []
    for _ in range(reps):
        started = time.perf_counter()
        result = play_policy(task, ScriptedPolicy(task), sandbox=sandbox)
        durations.append(time.perf_counter() - started)
        if not result.final_test_passed:
            raise SystemExit(f"the scripted policy failed on {task.instance_id}: the benchmark is void")
    return durations


def _calc_task(folder: Path, instance_id: str, requirements: list[str] | None) -> Path:
    """A one-bug task folder (``sub`` adds), with ``requirements`` or none."""
    (folder / "repo" / "tests").mkdir(parents=True)
    (folder / "repo" / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n")
    (folder / "repo" / "tests" / "test_calc.py").write_text(
        "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_sub():\n    assert sub(5, 3) == 2\n")
    patch = ("--- a/calc.py\n+++ b/calc.py\n@@ -4,3 +4,3 @@\n \n def sub(a, b):\n-    return a + b\n"
             "+    return a - b\n")
    data = {"instance_id": instance_id, "FAIL_TO_PASS": ["tests/test_calc.py::test_sub"],
            "PASS_TO_PASS": ["tests/test_calc.py::test_add"], "patch": patch}
    (folder / "task.json").write_text(json.dumps({**data, **({"requirements": requirements} if requirements else {})}))
    return folder


def measure_task_environments(sandbox: Sandbox, requirements: list[str], reps: int) -> dict[str, object]:
    """``DebugEnv.reset`` (a fresh workspace, a fork server from the pool, pdb to the first prompt) on a
    task whose environment is mounted and on the same task without requirements (the runner's packages
    alone), interleaved rep by rep after one warm-up each; and the time the first and a second task of
    that environment spend getting it (the first builds it unless the cache already holds it)."""
    from pdbgym.env import DebugEnv, EnvConfig
    from pdbgym.sandbox.pyenv import environment_key, envs_home, read_environment
    from pdbgym.tasks.model import load_task
    from pdbgym.tasks.taskenv import task_sandbox

    with tempfile.TemporaryDirectory(prefix="pdbgym-bench-envs-") as scratch:
        plain = load_task(_calc_task(Path(scratch, "plain"), "bench__plain", None))
        first = load_task(_calc_task(Path(scratch, "first"), "bench__first", requirements))
        second = load_task(_calc_task(Path(scratch, "second"), "bench__second", requirements))
        was_cached = read_environment(envs_home() / environment_key(requirements)) is not None
        first_s = timed(lambda: task_sandbox(sandbox, first))
        second_s = timed(lambda: task_sandbox(sandbox, second))
        envs = {"with": DebugEnv(second, EnvConfig(), sandbox), "without": DebugEnv(plain, EnvConfig(), sandbox)}
        samples: dict[str, list[float]] = {"with": [], "without": []}
        try:
            for env in envs.values():
                env.reset()  # warm-up: the pool's first server for each environment
            for _ in range(reps):
                for name, env in envs.items():
                    samples[name].append(timed(env.reset))
        finally:
            for env in envs.values():
                env.close()
    return {"requirements": requirements, "first_task_s": first_s, "first_was_cached": was_cached,
            "second_task_s": second_s,
            "reset_with": summarize(f"reset, environment mounted ({len(requirements)} requirement(s))",
                                    samples["with"]),
            "reset_without": summarize("reset, no requirements (runner packages only)", samples["without"])}


def run_benchmark(task: Path | None = None, reps: int = 200, kind: str = "auto",
                  env_task: str = "builtin__billing-invoice-totals") -> dict[str, object]:
    """All figures and ratios as a dict (what ``--json`` prints)."""
    sandbox = get_sandbox(kind)
    with tempfile.TemporaryDirectory(prefix="pdbgym-bench-") as scratch:
        repo, node = resolve_target(task, Path(scratch))
        resets = measure_reset(sandbox, repo, node, max(5, reps // 10))
        with Workspace.create(repo) as workspace, PdbSession(sandbox, workspace.path, node) as session:
            session.start()
            trips = measure_round_trip(session, reps)
            restarts_idle = measure_restart(session, max(5, reps // 20), idle_before_s=1.5)
            restarts = measure_restart(session, max(5, reps // 20))
            baseline_starts, baseline_trips = measure_baseline(sandbox, workspace.path, node, max(20, reps // 4))
            floor = measure_interpreter_floor(sandbox, workspace.path, max(5, reps // 10))
            if sandbox.name == "bwrap":
                confined, host_view = measure_confinement_cost(workspace.path, max(10, reps // 5))
                start_confined, start_host_view = measure_confinement_cost(workspace.path, max(10, reps // 2),
                                                                           ["true"])
    edits = measure_env_edit_restart(sandbox, env_task, max(6, reps // 20))
    episodes = measure_scripted_episode(sandbox, env_task, max(3, reps // 50))
    figures = {
        "reset": summarize("reset (Workspace.create + start to first prompt)", resets),
        "round_trip": summarize("instant round trip (p i+1)", trips),
        "interpreter_floor": summarize("floor: python -c 'import pdb; pdb.Pdb()' in the sandbox", floor),
        "restart_after_idle": summarize("restart after 1.5 s idle (spare ready)", restarts_idle),
        "restart_back_to_back": summarize("restart back to back (spare still loading)", restarts),
        "baseline_first_prompt": summarize("baseline: first prompt, 0.1 s sleep polling", baseline_starts),
        "baseline_round_trip": summarize("baseline: p i+1, 0.1 s sleep polling", baseline_trips),
        "env_edit_restart": summarize(f"env: edit then restart ({env_task})", edits),
        "scripted_episode": summarize(f"env: whole scripted episode ({env_task})", episodes),
    }
    ratios = {
        "round_trip_speedup_p50": figures["baseline_round_trip"].p50_ms / figures["round_trip"].p50_ms,
        "first_prompt_speedup_p50": figures["baseline_first_prompt"].p50_ms / figures["reset"].p50_ms,
    }
    if sandbox.name == "bwrap":
        figures["floor_confined"] = summarize("confinement: floor, bwrap as shipped (paired)", confined)
        figures["floor_host_view"] = summarize("confinement: floor, bwrap with the whole host visible (paired)",
                                               host_view)
        figures["start_confined"] = summarize("confinement: `true`, bwrap as shipped (paired)", start_confined)
        figures["start_host_view"] = summarize("confinement: `true`, bwrap with the whole host visible (paired)",
                                               start_host_view)
        ratios["confinement_start_cost_p50_ms"] = figures["start_confined"].p50_ms - figures["start_host_view"].p50_ms
        ratios["confinement_cost_p50_ms"] = figures["floor_confined"].p50_ms - figures["floor_host_view"].p50_ms
        ratios["confinement_ratio_p50"] = figures["floor_confined"].p50_ms / figures["floor_host_view"].p50_ms
    return {"sandbox": sandbox.name, "task": str(task) if task else "tiny generated project",
            "figures": {key: asdict(value) for key, value in figures.items()}, "ratios": ratios}


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", type=Path, default=None, help="a task folder (task.json + repo/)")
    parser.add_argument("--reps", type=int, default=200, help="round trips to time (others scale)")
    parser.add_argument("--sandbox", default="auto", help="auto, bwrap or plain")
    parser.add_argument("--env-task", default="builtin__billing-invoice-totals",
                        help="task for the environment-level figures (edit+restart, scripted episode)")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument("--environments", action="store_true",
                        help="only reset with a task environment mounted against the same task without one")
    parser.add_argument("--requirement", action="append", default=None,
                        help="the environment's pinned requirements (default six==1.17.0; repeat)")
    args = parser.parse_args(argv)
    if args.environments:
        report_environments(measure_task_environments(get_sandbox(args.sandbox), args.requirement or ["six==1.17.0"],
                                                      max(10, args.reps // 4)), args.json)
        return
    result = run_benchmark(args.task, args.reps, args.sandbox, args.env_task)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Environment latency ({result['sandbox']} sandbox, {result['task']})")
    for column in ("operation", "n", "p50 ms", "p95 ms"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for figure in result["figures"].values():  # type: ignore[union-attr]
        table.add_row(figure["name"], str(figure["samples"]), f"{figure['p50_ms']:.2f}", f"{figure['p95_ms']:.2f}")
    console = Console()
    console.print(table)
    ratios = result["ratios"]
    console.print(f"round trip: {ratios['round_trip_speedup_p50']:.0f}x faster than the sleep-polling baseline (p50)")  # type: ignore[index]
    console.print(f"first prompt: {ratios['first_prompt_speedup_p50']:.2f}x the baseline's speed (p50; ours includes Workspace.create)")  # type: ignore[index]
    if "confinement_cost_p50_ms" in ratios:  # type: ignore[operator]
        console.print(f"confinement: {ratios['confinement_cost_p50_ms']:+.1f} ms on the interpreter floor at p50 "  # type: ignore[index]
                      f"({ratios['confinement_ratio_p50']:.2f}x the host-view layout), "  # type: ignore[index]
                      f"{ratios['confinement_start_cost_p50_ms']:+.1f} ms on `true`")  # type: ignore[index]


def report_environments(result: dict[str, object], as_json: bool) -> None:
    with_env, without = result["reset_with"], result["reset_without"]
    assert isinstance(with_env, Figure) and isinstance(without, Figure)
    if as_json:
        print(json.dumps({**result, "reset_with": asdict(with_env), "reset_without": asdict(without),
                          "ratio_p50": with_env.p50_ms / without.p50_ms}, indent=2))
        return
    for figure in (with_env, without):
        print(f"{figure.name}: p50 {figure.p50_ms:.1f} ms, p95 {figure.p95_ms:.1f} ms (n={figure.samples})")
    print(f"mounted / without, p50: {with_env.p50_ms / without.p50_ms:.2f}x")
    cached = " (already in the cache)" if result["first_was_cached"] else " (built)"
    print(f"first task of the environment: {result['first_task_s']:.2f} s{cached}; "
          f"second task: {result['second_task_s'] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
