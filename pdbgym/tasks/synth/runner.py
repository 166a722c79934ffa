"""Run a project's pytest suite (or some of its tests) confined, and read back per-test outcomes.

Every execution of untrusted project code in synthesis goes through :func:`execute`, which hands the
command to the pdbgym sandbox (bubblewrap where it works, rlimits otherwise).
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.sandbox import Limits, RunResult, Sandbox, get_sandbox, sandbox_env
from pdbgym.tasks.synth import probe

PROBE_FILE = ".pdbgym_probe.json"
PASSED = "passed"
# Outcomes that count as "the test did not pass"; tests absent from a run's report count as failed too.
NOT_PASSED = ("failed", "error", "timeout", "missing")


@dataclass
class SuiteRun:
    """Per-test results of one pytest run. ``outcomes`` maps node id -> passed/failed/error/timeout/skipped."""

    outcomes: dict[str, str]
    durations: dict[str, float] = field(default_factory=dict)
    coverage: dict[str, list[str]] = field(default_factory=dict)
    import_time: list[str] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)
    timed_out: bool = False
    output_tail: str = ""

    def outcome(self, node_id: str) -> str:
        return self.outcomes.get(node_id, "missing")

    def timeouts(self) -> list[str]:
        return sorted(n for n, o in self.outcomes.items() if o == "timeout")


@functools.cache
def _sandbox() -> Sandbox:
    return get_sandbox("auto")


def execute(argv: list[str], workspace: Path, wall_time_s: float, env_extra: dict[str, str]) -> RunResult:
    """The one place synthesis runs project code: in the sandbox, with a wall-clock limit in seconds."""
    limits = Limits(wall_time_s=wall_time_s, cpu_time_s=max(10, int(wall_time_s) + 5))
    return _sandbox().run(argv, workspace, limits, env=sandbox_env(workspace, env_extra))


def run_pytest(
    workspace: Path,
    node_ids: list[str] | None = None,
    *,
    per_test_timeout_s: float = 5.0,
    wall_time_s: float = 300.0,
    collect_coverage: bool = False,
) -> SuiteRun:
    """Run ``python -m pytest`` in ``workspace`` on ``node_ids`` (None = the whole suite).

    Each test is cut after ``per_test_timeout_s`` seconds (pytest-timeout); the whole run after
    ``wall_time_s``. With ``collect_coverage`` the probe records which workspace functions each test
    entered. Nothing is left behind in the workspace except the sandbox's HOME folder.
    """
    workspace = Path(workspace).resolve()
    probe_path = workspace / PROBE_FILE
    probe_path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", probe.__name__,
            "-p", "timeout", "--timeout", f"{per_test_timeout_s:g}", *(node_ids or [])]
    env = {probe.OUT_ENV: str(probe_path), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONHASHSEED": "0"}
    if collect_coverage:
        env[probe.ROOT_ENV] = str(workspace) + "/"
    result = execute(argv, workspace, wall_time_s, env)
    try:
        payload = json.loads(probe_path.read_text())
    except (OSError, json.JSONDecodeError):
        payload = {}
    finally:
        probe_path.unlink(missing_ok=True)
    return SuiteRun(
        outcomes=payload.get("outcomes", {}),
        durations=payload.get("durations", {}),
        coverage=payload.get("coverage", {}),
        import_time=payload.get("import_time", []),
        collect_errors=payload.get("collect_errors", []),
        timed_out=result.timed_out,
        output_tail=result.output[-3000:],
    )
