"""Workspaces never follow a link out of the repo, and the copies of a killed process are reaped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pdbgym.errors import SandboxError
from pdbgym.sandbox import Workspace
from pdbgym.sandbox.workspace import escaping_links, reap_stale_workspaces


def _repo(tmp_path: Path) -> Path:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("x = 1\n")
    return source


@pytest.mark.parametrize("target", ["/etc", "../../outside", "../pkg/../../outside/secret.txt", "/etc/hostname"])
def test_a_link_out_of_the_repo_is_refused_naming_it(tmp_path, target):
    source = _repo(tmp_path)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("host secret\n")
    (source / "pkg" / "leak").symlink_to(target)
    with pytest.raises(SandboxError, match=r"point outside it: pkg/leak -> "):
        Workspace.create(source, parent=tmp_path / "ws")
    assert not (tmp_path / "ws").exists()  # refused before any copy is made


def test_a_link_escaping_through_another_link_is_refused(tmp_path):
    # Read plainly "inner/../x" stays inside; resolved, "inner" is ../outside/deep, so it leaves.
    source = _repo(tmp_path)
    (tmp_path / "outside" / "deep").mkdir(parents=True)
    (source / "inner").symlink_to("pkg")
    (source / "hop").symlink_to("../outside/deep")
    (source / "via").symlink_to("hop/../x")
    assert [entry.split(" ->")[0] for entry in escaping_links(source)] == ["hop", "via"]


def test_links_inside_the_repo_are_copied_as_links(tmp_path):
    source = _repo(tmp_path)
    (source / "alias.py").symlink_to("pkg/mod.py")
    (source / "pkgdir").symlink_to("pkg")
    with Workspace.create(source, parent=tmp_path / "ws") as ws:
        assert (ws.path / "alias.py").is_symlink() and os.readlink(ws.path / "alias.py") == "pkg/mod.py"
        assert (ws.path / "pkgdir").is_symlink()
        assert (ws.path / "alias.py").read_text() == "x = 1\n"


_HOLDER = """
import sys, time
from pathlib import Path
from pdbgym.sandbox import Workspace
ws = Workspace.create(Path(sys.argv[1]), parent=Path(sys.argv[2]))
print(ws.path, flush=True)
time.sleep(600)
"""


def _start_holder(source: Path, parent: Path) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(source), str(parent)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_workspaces_of_a_killed_process_are_reaped_and_live_ones_kept(tmp_path):
    source, parent = _repo(tmp_path), tmp_path / "tmp"
    killed, stale = _start_holder(source, parent)
    alive, live = _start_holder(source, parent)
    unowned = parent / "pdbgym-ws-legacy"
    unowned.mkdir()
    try:
        os.kill(killed.pid, signal.SIGKILL)  # no cleanup runs: the copy stays, as after an OOM kill
        killed.wait(timeout=30)
        mine = Workspace.create(source, parent=parent)
        assert stale.is_dir() and (stale / "pkg" / "mod.py").is_file()
        assert reap_stale_workspaces(parent) == [stale]
        assert not stale.exists()
        assert live.is_dir() and mine.path.is_dir() and unowned.is_dir()
    finally:
        alive.kill()
        alive.wait(timeout=30)
    assert reap_stale_workspaces(parent) == [live]
    mine.cleanup()


def test_a_campaign_rerun_reaps_its_killed_predecessors_workspaces(tmp_path, tiny_task):
    from pdbgym.env.environment import EpisodeResult
    from pdbgym.evaluate.campaign import Arm, CampaignConfig, run_campaign

    temp = tmp_path / "systemp"
    temp.mkdir()
    killed, stale = _start_holder(tiny_task.repo, temp)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)

    def episode(task, run_index, transcript: Path) -> EpisodeResult:
        transcript.parent.mkdir(parents=True, exist_ok=True)
        transcript.write_text(json.dumps({"task": task.instance_id}))
        return EpisodeResult(task.instance_id, "solved", True, 1, 0.01)

    old, tempfile.tempdir = tempfile.tempdir, str(temp)
    try:
        assert stale.is_dir()
        run_campaign(CampaignConfig(tasks="x", arms=[Arm("a", "scripted")], runs=1), [tiny_task],
                     tmp_path / "c", episode_fns={"a": episode})
    finally:
        tempfile.tempdir = old
    assert not stale.exists()


@pytest.mark.slow
def test_a_cache_build_rerun_reaps_its_killed_predecessors_workspaces(tmp_path, tiny_task):
    temp = tmp_path / "systemp"
    temp.mkdir()
    killed, stale = _start_holder(tiny_task.repo, temp)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    assert stale.is_dir()
    done = subprocess.run([sys.executable, "-m", "pdbgym.cli", "cache", "build", "--policy", "scripted", "--tasks",
                           str(tiny_task.path), "--out", str(tmp_path / "cache"), "--workers", "1", "--json"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "TMPDIR": str(temp)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert not stale.exists()
    assert not list(temp.glob("pdbgym-ws-*"))  # the build's own workspaces were cleaned up as it went
