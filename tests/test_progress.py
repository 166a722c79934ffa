"""Progress lines when output is not a terminal: timed heartbeats, rate-limited completions, piped CLIs."""

import io
import os
import re
import subprocess
import sys
import time

from rich.console import Console

from pdbgym.progress import PlainProgress, format_elapsed, progress

LINE = re.compile(r"^\[(?P<phase>[^\]]+)\] (?P<done>[\d.]+)/(?P<total>[\d.?]+) elapsed \d+:\d\d:\d\d$")


def _console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=False, width=80), buffer


def test_plain_mode_prints_heartbeats_while_nothing_completes():
    console, buffer = _console()
    with progress(console, heartbeat_s=0.3) as bars:
        assert isinstance(bars, PlainProgress)
        bar = bars.add_task("waiting", total=4)
        time.sleep(1.3)
    lines = buffer.getvalue().splitlines()
    assert all(LINE.match(line) for line in lines), lines
    assert len(lines) >= 1 + 3, "a start line, then one line per 0.3 s with no progress at all"
    assert all(line.startswith("[waiting] 0/4 ") for line in lines)
    assert bar == 0


def test_completions_are_rate_limited_and_the_end_is_always_printed():
    console, buffer = _console()
    with progress(console, heartbeat_s=60, min_interval_s=60) as bars:
        bar = bars.add_task("cases", total=None)
        bars.update(bar, total=100)
        for _ in range(100):
            bars.advance(bar)
    lines = buffer.getvalue().splitlines()
    # the start, the total once it is known (at once, not rate-limited), then the end
    assert [line.split(" elapsed")[0] for line in lines] == ["[cases] 0/?", "[cases] 0/100", "[cases] 100/100"]


def test_disabled_progress_prints_nothing_and_terminals_get_a_bar():
    console, buffer = _console()
    with progress(console, disable=True) as bars:
        bars.update(bars.add_task("quiet"), completed=3)
    assert buffer.getvalue() == ""
    tty = Console(file=io.StringIO(), force_terminal=True)
    with progress(tty) as bars:
        assert not isinstance(bars, PlainProgress)
    assert format_elapsed(3725.9) == "1:02:05"


def test_piped_tasks_validate_prints_progress_lines(tiny_task):
    env = {**os.environ, "PDBGYM_PROGRESS_HEARTBEAT_S": "0.5"}
    done = subprocess.run([sys.executable, "-c", "from pdbgym.cli import main; main()", "tasks", "validate",
                           str(tiny_task.path), "--sandbox", "plain", "--no-debugger"],
                          capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in done.stderr.splitlines() if LINE.match(line)]
    assert lines and lines[0].startswith("[validating] 0/"), done.stderr
    assert lines[-1].startswith("[validating] 1/1 "), done.stderr


def test_a_phase_that_ends_unchanged_prints_no_second_line():
    console, buffer = _console()
    try:
        with progress(console, heartbeat_s=60) as bars:
            bars.add_task("validating", total=None)
            raise RuntimeError("the folder does not load")
    except RuntimeError:
        pass
    assert [line.split(" elapsed")[0] for line in buffer.getvalue().splitlines()] == ["[validating] 0/?"]
    console, buffer = _console()
    with progress(console, heartbeat_s=60, min_interval_s=60) as bars:
        bars.advance(bars.add_task("cases", total=None))  # rate-limited: the end line shows it
    assert [line.split(" elapsed")[0] for line in buffer.getvalue().splitlines()] == ["[cases] 0/?", "[cases] 1/?"]


def test_tasks_validate_of_a_missing_folder_prints_no_progress_line(tmp_path):
    from typer.testing import CliRunner

    from pdbgym.cli import app

    result = CliRunner().invoke(app, ["tasks", "validate", str(tmp_path / "missing"), "--sandbox", "plain"])
    assert result.exit_code != 0
    assert "[validating]" not in result.output and "[validating]" not in (result.stderr or "")


def test_a_resumed_campaign_starts_at_its_episodes_done_and_says_so(tmp_path):
    from pdbgym.evaluate.commands import EpisodeProgress

    console, buffer = _console()
    with progress(console, heartbeat_s=60) as bars:
        EpisodeProgress(bars, tmp_path, console).plan(21, 21)
    lines = buffer.getvalue().splitlines()
    assert lines[0] == f"resuming: 21 of 42 episodes already in {tmp_path}"
    assert [line.split(" elapsed")[0] for line in lines[1:]] == ["[episodes] 21/42"]
    console, buffer = _console()
    with progress(console, heartbeat_s=60) as bars:
        EpisodeProgress(bars, tmp_path, console).plan(0, 42)  # a fresh campaign: no resuming line
    assert [line.split(" elapsed")[0] for line in buffer.getvalue().splitlines()] == ["[episodes] 0/42"]
    tty = Console(file=io.StringIO(), force_terminal=True)
    with progress(tty) as bars:  # a rich bar starts at the episodes done too
        shown = EpisodeProgress(bars, tmp_path, tty)
        shown.plan(21, 21)
        assert bars.tasks[shown.bar].completed == 21 and bars.tasks[shown.bar].total == 42
