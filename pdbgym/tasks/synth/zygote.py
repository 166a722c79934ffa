"""A pytest fork server: started once per pool worker inside the sandbox, it forks a child per job.

Importing pytest and its plugins costs most of a small test run (about 0.3 s of 0.5 s idle, more under
load). The server pays it once; each job's child starts from that warm state, runs ``pytest.main`` in
the job's folder with the job's environment, and exits. The server never imports project code, so
each child imports the (mutated) project fresh. Protocol: one JSON object per line on stdin
(``cwd``, ``args``, ``env``, ``log``, ``wall_time_s``); one ``RESULT {json}`` line back per job with
``returncode`` and ``timed_out``.

Run as ``python -m pdbgym.tasks.synth.zygote``; it imports only the stdlib, pytest, pytest-timeout,
the outcome probe (itself stdlib and pytest only) and ``pdbgym.grading.launch`` (stdlib only at import),
whose ``import_pytest`` it shares with the episode's fork server (``pdbgym.grading.server``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
import traceback

import pytest

from pdbgym.grading.launch import import_pytest

import_pytest()  # what every job's configuration imports, once here for all of them

PRELOADED: dict[str, object] = {}  # ``-p`` name -> plugin module, filled by :func:`preload_plugins`


def preload_plugins() -> None:
    """Import the plugins synthesis jobs name with ``-p`` (pytest-timeout, the outcome probe) once, to
    hand them to pytest as plugin objects (:func:`plugin_args`): pytest marks a plugin named with ``-p``
    for assertion rewriting and warns (an error, in projects that turn warnings into errors) when its
    module was imported before; a plugin passed as an object is never marked. Called when serving only:
    the hot server imports this module for its protocol and loads its plugins the ordinary way."""
    for name, module in (("timeout", "pytest_timeout"), ("pdbgym.tasks.synth.probe", "pdbgym.tasks.synth.probe")):
        try:
            PRELOADED[name] = __import__(module, fromlist=["_"])
        except ImportError:
            pass


def plugin_args(args: list[str]) -> tuple[list[str], list[object]]:
    """``args`` without the ``-p NAME`` pairs naming preloaded plugins, and those plugins' modules."""
    kept: list[str] = []
    plugins: list[object] = []
    position = 0
    while position < len(args):
        if args[position] == "-p" and position + 1 < len(args) and args[position + 1] in PRELOADED:
            plugins.append(PRELOADED[args[position + 1]])
            position += 2
            continue
        kept.append(args[position])
        position += 1
    return kept, plugins

RESULT_PREFIX = "RESULT "
_POLL_S = 0.005


def _run_child(job: dict) -> None:
    """In the forked child: become the job's pytest process. Never returns."""
    try:
        os.setpgid(0, 0)
        os.chdir(job["cwd"])
        log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.environ.update(job["env"])
        # The server started without writing bytecode; a job may allow it (clean baseline runs do).
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        sys.path.insert(0, job["cwd"])  # what ``python -m pytest`` does for the working directory
        args, plugins = plugin_args(job["args"])
        code = pytest.main(args, plugins=plugins)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(int(code))
    except BaseException:  # noqa: BLE001  (a child must never fall back into the server loop)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(99)


def wait_child(pid: int, wall_time_s: float) -> tuple[int, bool]:
    """Wait for a forked job; past ``wall_time_s`` kill its process group. Returns (exit code, timed out).

    Sleeps on a pidfd (Linux 5.3+), waking the moment the child exits; polls where there is none."""
    deadline = time.monotonic() + wall_time_s
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status), False
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status = os.waitpid(pid, 0)
                return os.waitstatus_to_exitcode(status), True
            if pidfd is not None:
                select.select([pidfd], [], [], remaining)
            else:
                time.sleep(_POLL_S)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def serve() -> None:
    preload_plugins()
    out = sys.stdout
    out.write("READY\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _run_child(job)
        returncode, timed_out = wait_child(pid, float(job["wall_time_s"]))
        out.write(RESULT_PREFIX + json.dumps({"returncode": returncode, "timed_out": timed_out}) + "\n")
        out.flush()


if __name__ == "__main__":
    serve()
