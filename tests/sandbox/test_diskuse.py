"""Measuring a workspace's host disk, and stopping the commands running in one workspace only."""

from __future__ import annotations

import os
import sys
import threading
import time

from pdbgym.sandbox import Limits, get_sandbox
from pdbgym.sandbox.diskuse import MAX_DEPTH, DiskLimit, DiskWatcher, measure
from pdbgym.sandbox.process import kill_commands_in

MiB = 1024**2


def test_measure_counts_what_the_disk_holds_and_follows_no_link(tmp_path):
    root = tmp_path / "ws"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "data.bin").write_bytes(b"x" * MiB)
    os.link(root / "pkg" / "data.bin", root / "again.bin")  # a second name: stored once
    os.symlink(tmp_path / "outside", root / "out")  # a link to a large host folder: only the link counts
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "big.bin").write_bytes(b"y" * 8 * MiB)
    with open(root / "sparse.bin", "wb") as sparse:  # 1 GiB long, nothing stored
        sparse.truncate(1024 * MiB)
    usage = measure(root)
    assert usage.files == 5 and usage.complete
    assert MiB <= usage.bytes < 2 * MiB


def test_the_walk_stops_past_its_limits(tmp_path):
    for index in range(50):
        (tmp_path / f"f{index}").touch()
    partial = measure(tmp_path, stop_after_files=10)
    assert not partial.complete and partial.files > 10 and partial.over(DiskLimit(10**9, 10))
    deep = tmp_path / "d"
    deep.mkdir()
    folder = deep
    for _ in range(MAX_DEPTH + 2):
        folder = folder / "d"
        folder.mkdir()
    usage = measure(deep)
    assert usage.too_deep and usage.over(DiskLimit(10**12, 10**9))


def test_stopping_one_workspace_leaves_the_others_running(tmp_path):
    sandbox = get_sandbox("auto")
    writing, idle = tmp_path / "writing", tmp_path / "idle"
    writing.mkdir()
    idle.mkdir()
    results = {}

    def run(name, folder):
        results[name] = sandbox.run([sys.executable, "-c", "import time; time.sleep(20)"], folder,
                                    Limits(wall_time_s=30))

    threads = [threading.Thread(target=run, args=(n, f)) for n, f in (("writing", writing), ("idle", idle))]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    assert kill_commands_in(writing) == 1
    threads[0].join(10)
    assert not threads[0].is_alive() and results["writing"].returncode < 0
    assert threads[1].is_alive()
    assert kill_commands_in(idle) == 1
    threads[1].join(10)


def test_the_watcher_lets_a_shrinking_workspace_be_and_stops_growth(tmp_path):
    stops = []
    watcher = DiskWatcher(tmp_path, DiskLimit(8 * MiB, 100), stops.append)
    (tmp_path / "a.bin").write_bytes(b"x" * 10 * MiB)
    watcher.check()
    assert len(stops) == 1  # over the cap
    watcher.check()
    assert len(stops) == 1  # still over, but not growing: a restarted debugger is not stopped again
    (tmp_path / "b.bin").write_bytes(b"x" * 6 * MiB)  # more than the slack
    watcher.check()
    assert len(stops) == 2  # grew again
    (tmp_path / "a.bin").unlink()
    (tmp_path / "b.bin").unlink()
    watcher.check()
    (tmp_path / "c.bin").write_bytes(b"x" * 10 * MiB)
    watcher.check()
    assert len(stops) == 3  # back under, the ceiling is the cap again
