"""Commands start behind a stopped gate that this process confines from outside: the limits and the
cgroup hold from the command's first instruction, and no spawn forks this (possibly huge) process
while holding the GIL."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from pdbgym.errors import SandboxError
from pdbgym.sandbox import Limits, Workspace, get_sandbox
from pdbgym.sandbox import process as sandbox_process
from pdbgym.sandbox.bwrap import bwrap_unavailable_reason
from pdbgym.sandbox.cgroup import CommandCgroup

needs_bwrap = pytest.mark.skipif(bwrap_unavailable_reason() is not None, reason=str(bwrap_unavailable_reason()))
KINDS = [pytest.param("bwrap", marks=needs_bwrap), "plain"]
PY = sys.executable

# The command's very first act: print its own limits, its cgroup and what it is (no gate left behind).
FIRST_LOOK = ("import os, resource\n"
              "print('limits', *(resource.getrlimit(getattr(resource, n)) for n in "
              "('RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_CORE')))\n"
              "print('cgroup', ';'.join(open('/proc/self/cgroup').read().split()))\n"
              "print('cmdline', open('/proc/self/cmdline', 'rb').read().split(b'\\0')[:2])\n")


@pytest.fixture
def workspace(tmp_path: Path):
    source = tmp_path / "project"
    source.mkdir()
    with Workspace.create(source, parent=tmp_path / "workspaces") as ws:
        yield ws.path


def _recording_cgroups(monkeypatch) -> list[CommandCgroup | None]:
    made: list[CommandCgroup | None] = []
    create = CommandCgroup.create

    def record(cls, *args, **kwargs):
        made.append(create(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(CommandCgroup, "create", classmethod(record))
    return made


@pytest.mark.parametrize("kind", KINDS)
def test_limits_and_cgroup_hold_from_the_first_instruction(workspace, kind, monkeypatch):
    made = _recording_cgroups(monkeypatch)
    limits = Limits(cpu_time_s=7, memory_bytes=1536 * 1024**2, file_size_bytes=3 * 1024**2)
    result = get_sandbox(kind).run([PY, "-S", "-c", FIRST_LOOK], workspace, limits)
    assert result.returncode == 0, result.output
    assert f"limits (7, 7) ({1536 * 1024**2}, {1536 * 1024**2}) ({3 * 1024**2}, {3 * 1024**2}) (0, 0)" in result.output
    cmdline = next(line for line in result.output.splitlines() if line.startswith("cmdline"))
    assert sandbox_process.GATE_NAME not in cmdline and "/bin/sh" not in cmdline  # the gate exec'd the command
    if kind == "plain" and made[0] is not None:  # where a cgroup can be made, the command starts inside it
        cgroup_line = next(line for line in result.output.splitlines() if line.startswith("cgroup"))
        assert made[0].paths[0].name in cgroup_line, (cgroup_line, made[0].paths)


def test_no_spawn_forks_this_process(workspace, monkeypatch):
    """Python runs at-fork hooks only when subprocess forks (a ``preexec_fn`` forces fork()); with none it
    vforks, which neither copies this process nor holds the GIL meanwhile."""
    forks = []
    os.register_at_fork(before=lambda: forks.append(1) if hook_on else None)
    hook_on = True
    try:
        sandbox = get_sandbox("plain")
        assert sandbox.run([PY, "-S", "-c", "print('ran')"], workspace).output == "ran\n"
        spawned = sandbox.spawn([PY, "-S", "-c", "import time; time.sleep(5)"], workspace, Limits())
        spawned.close()
        with sandbox.spawn_pty([PY, "-S", "-c", "print('pty')"], workspace, Limits()) as terminal:
            terminal.popen.wait(10)
        assert forks == []
        import subprocess

        subprocess.run([PY, "-S", "-c", "pass"], preexec_fn=lambda: None, check=True)  # the hook does see a fork
        assert forks == [1]
    finally:
        hook_on = False


def test_a_gate_that_never_stops_is_an_error_and_leaves_no_cgroup(workspace, monkeypatch):
    monkeypatch.setattr(sandbox_process, "GATE", "exit 3")
    made = _recording_cgroups(monkeypatch)
    with pytest.raises(SandboxError, match="exited with 3 before the command started"):
        get_sandbox("plain").spawn([PY, "-S", "-c", "pass"], workspace, Limits())
    assert all(not any(path.exists() for path in c.paths) for c in made if c is not None)


def test_a_relative_program_is_found_from_the_workspace(workspace):
    script = workspace / "run.sh"
    script.write_text("#!/bin/sh\necho from-the-workspace\n")
    script.chmod(0o755)
    assert get_sandbox("plain").run(["./run.sh"], workspace).output == "from-the-workspace\n"
    result = get_sandbox("plain").run(["./missing.sh"], workspace)
    assert result.returncode == 127 and "cannot execute" in result.output
