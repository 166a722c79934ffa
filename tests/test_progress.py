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
        time.sleep(1.1)
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
