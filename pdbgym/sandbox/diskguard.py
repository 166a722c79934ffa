"""The workspace's cap on host disk for one episode: what the agent's commands may add, and what happens past it.

The cap is the task's repo as copied (allocated bytes, files and folders) plus ``EnvConfig``'s
``workspace_extra_bytes`` and ``workspace_extra_files``. A ``DiskWatcher`` polls the workspace for the
whole episode (pdb commands, the agent's test runs, and background processes between tool calls) and,
past the cap, kills every sandboxed command running in the workspace; the pdb session then restarts.
After each step the agent is told what happened and what to do. The episode ends (reason ``other``)
when the workspace is still over the cap after the agent's next step, or at once when it is grossly
over: more than twice the allowance above the repo, or nested too deep to measure.
"""

from __future__ import annotations

from pathlib import Path

from pdbgym.sandbox.diskuse import DiskLimit, DiskUsage, DiskWatcher, measure
from pdbgym.sandbox.process import kill_commands_in

# What the agent's commands may add to a workspace (or grading's tree) over the task's repo, by default.
EXTRA_BYTES = 256 * 1024**2
EXTRA_FILES = 20_000
DELETE_HINT = "delete files to get back under it (in pdb: !import os; os.remove('path/to/file'))"


class DiskGuard:
    """Watches one episode's workspace; ``after_step`` says what the agent should hear, and whether the
    episode must end. ``stop()`` ends the watching; safe to call twice."""

    def __init__(self, workspace: Path, extra_bytes: int, extra_files: int, poll_s: float = 0.2) -> None:
        if extra_bytes < 0 or extra_files < 0 or poll_s <= 0:
            raise ValueError(f"workspace_extra_bytes ({extra_bytes}) and workspace_extra_files ({extra_files}) "
                             f"must be >= 0 and disk_poll_s ({poll_s}) > 0")
        self.workspace = workspace
        self.pristine = measure(workspace)
        self.limit = DiskLimit(self.pristine.bytes + extra_bytes, self.pristine.files + extra_files)
        # Past this the excess is gross: the episode ends without waiting for the agent.
        self.gross = DiskLimit(self.limit.bytes + extra_bytes, self.limit.files + extra_files)
        self._extra = (extra_bytes, extra_files)
        self._seen_trips = 0
        self._over_after_last_step = False
        self.watcher = DiskWatcher(workspace, self.limit, self._stop_commands, poll_s).start()

    def _stop_commands(self, usage: DiskUsage) -> None:
        kill_commands_in(self.workspace)

    def stop(self) -> None:
        self.watcher.stop()

    def cap_text(self) -> str:
        extra_bytes, extra_files = self._extra
        return (f"{self.limit.describe()} (the project's own size plus {extra_bytes / 1024**2:,.0f} MiB and "
                f"{extra_files:,} files)")

    def after_step(self) -> tuple[str, str | None]:
        """(note for the observation, or ""; why the episode ends, or None). Costs one ``statvfs`` while
        the watcher saw the workspace under its cap since the last step and the filesystem's free space
        says nothing was written past it since its last walk; else the workspace is walked now, so an
        excess written faster than the watcher polls is stopped and told in the same step."""
        if self.watcher.trips == self._seen_trips and not self._over_after_last_step and self.watcher.looks_over():
            self.watcher.check()  # written faster than the thread polled (or it was starved): walk now
        tripped = self.watcher.trips > self._seen_trips
        self._seen_trips = self.watcher.trips
        if not tripped and not self._over_after_last_step:
            return "", None
        usage = measure(self.workspace, stop_after_files=2 * self.gross.files)
        over = usage.over(self.limit)
        if not tripped and not over:
            self._over_after_last_step = False
            return f"[disk cap] The workspace is back under its disk cap: it holds {usage.describe()}.", None
        stopped = "the commands writing it were stopped (a pdb session restarts at its first prompt). " \
            if tripped else ""
        if usage.too_deep or usage.over(self.gross) or (over and self._over_after_last_step):
            why = "is grossly over" if not self._over_after_last_step else "is still over"
            return (f"[disk cap] The workspace {why} its disk cap: it holds {usage.describe()}; the cap is "
                    f"{self.cap_text()}.",
                    f"workspace over its disk cap: {usage.describe()} against {self.limit.describe()}")
        self._over_after_last_step = over
        if over:
            return (f"[disk cap] The workspace holds {usage.describe()}, over its disk cap of {self.cap_text()}: "
                    f"{stopped}Commands that add to it are stopped; {DELETE_HINT}. If it is still over the "
                    "cap after your next action, the episode ends.", None)
        peak = self.watcher.peak.describe() if self.watcher.peak else "over the cap"
        return (f"[disk cap] The workspace went over its disk cap of {self.cap_text()} (it reached {peak}): "
                f"{stopped}It now holds {usage.describe()}. Keep large or many files out of the project.", None)
