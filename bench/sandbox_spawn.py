"""What starting sandboxed commands costs the other threads of a big process (a GRPO trainer's engine).

A process holds MEMORY_GB of touched memory, as a trainer holds its model, optimizer and CUDA mappings.
THREADS threads start COMMANDS short commands through the plain sandbox (``/bin/true``, with the
default limits), as GRPO's episodes start pdb sessions and test runs, while a ticker thread wakes every
half millisecond and records how late it woke: the time it could not get the GIL.

- baseline, ``preexec``: the child confined by a ``preexec_fn`` (cgroups joined, limits lowered in
  the child). Python must then fork() the whole process, holding the GIL while its page tables are copied;
- ``gate``: the sandbox's way: the command starts behind a stopped ``/bin/sh`` gate (vfork, the GIL let
  go) and this process confines the gate from outside (``pdbgym.sandbox.process.confine``).

Prints per-spawn time, the ticker's late wake-ups (p99, max, seconds lost past 2 ms), and the ratio of
the baseline's lost seconds to the gate's.

    .venv/bin/python bench/sandbox_spawn.py [--memory-gb 4] [--commands 200] [--threads 4]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from pdbgym.sandbox import Limits, get_sandbox
from pdbgym.sandbox import base as sandbox_base


def forking_sandbox() -> None:
    """Turn the sandbox into the baseline: no gate, and each Popen gets a preexec_fn that joins the
    cgroups and lowers the limits in the child (what ``confine`` does from outside)."""
    opened = threading.local()  # this thread's cgroup.procs fds, opened by _popen just before its Popen
    open_procs_fds = sandbox_base.CommandCgroup.open_procs_fds

    def remember(cgroup) -> list[int]:
        opened.fds = open_procs_fds(cgroup)
        return opened.fds

    def popen(argv, **kwargs):
        fds, rlimits = getattr(opened, "fds", []), sandbox_base.rlimits_for(Limits(), None)
        opened.fds = []

        def setup() -> None:
            for fd in fds:
                os.write(fd, b"0")
            for which, value in rlimits:
                _, hard = resource.getrlimit(which)
                capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.setrlimit(which, (capped, capped))

        return subprocess.Popen(argv, preexec_fn=setup, **kwargs)

    sandbox_base.CommandCgroup.open_procs_fds = remember
    sandbox_base.gated = lambda argv, env, cwd: argv
    sandbox_base.confine = lambda popen, rlimits, fds: None
    sandbox_base.subprocess = SimpleNamespace(Popen=popen, PIPE=subprocess.PIPE, DEVNULL=subprocess.DEVNULL,
                                              STDOUT=subprocess.STDOUT)


def measure(commands: int, threads: int, workspace: Path) -> dict[str, float]:
    sandbox, late, stop = get_sandbox("plain"), [], threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.0005)
            now = time.perf_counter()
            late.append(now - last - 0.0005)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(lambda _: sandbox.run(["/bin/true"], workspace), range(commands)))
    wall = time.perf_counter() - started
    stop.set()
    ticker.join()
    assert all(r.returncode == 0 for r in results), [r.output for r in results if r.returncode][:2]
    gaps = np.array(late)
    return {"ms_per_spawn": wall / commands * 1e3 * threads, "p99_ms": float(np.percentile(gaps, 99) * 1e3),
            "max_ms": float(gaps.max() * 1e3), "lost_s": float(gaps[gaps > 0.002].sum()), "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory-gb", type=float, default=4.0)
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--cuda-gb", type=float, default=0.0,
                        help="also hold this much on the GPU (a CUDA context and its mappings, as a trainer has)")
    args = parser.parse_args()
    held = np.ones(int(args.memory_gb * 1024**3) // 8)  # touched: every page mapped
    on_gpu = None
    if args.cuda_gb:
        import torch  # optional: torch (pdbgym[hf])

        on_gpu = torch.ones(int(args.cuda_gb * 1024**3) // 4, device="cuda")
        torch.cuda.synchronize()
    print(f"{held.nbytes / 1024**3:.1f} GB held" + (f", {on_gpu.nbytes / 1024**3:.1f} GB on the GPU" if on_gpu is not None
                                                     else "") + f"; {args.commands} commands (/bin/true) from "
          f"{args.threads} threads")
    with tempfile.TemporaryDirectory() as folder:
        gate = measure(args.commands, args.threads, Path(folder))
        forking_sandbox()
        baseline = measure(args.commands, args.threads, Path(folder))
    for name, row in (("preexec_fn, fork() (baseline)", baseline), ("gate, vfork()", gate)):
        print(f"  {name:30s} {row['ms_per_spawn']:6.2f} ms a spawn; ticker late: p99 {row['p99_ms']:5.2f} ms, "
              f"max {row['max_ms']:6.2f} ms, {row['lost_s']:.3f} s lost past 2 ms in {row['wall_s']:.1f} s")
    print(f"  GIL time lost, baseline / gate: {baseline['lost_s'] / max(gate['lost_s'], 1e-3):.1f}x; "
          f"ticker p99, baseline / gate: {baseline['p99_ms'] / max(gate['p99_ms'], 1e-3):.1f}x")


if __name__ == "__main__":
    main()
