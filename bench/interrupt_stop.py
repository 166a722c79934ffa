"""How long Ctrl-C takes to stop a long command, against what waiting for the episode in flight would cost.

``pdbgym cache build --policy scripted --tasks builtin --runs 3 --workers W`` runs in its own session;
once its second episode is saved, SIGINT goes to the whole process group (what a terminal's Ctrl-C
does). Measured in the same run, per rep:

- ``stop``: seconds from the signal to the command's exit (130, its workspaces removed, the finished
  episodes kept);
- baseline, ``episode``: seconds between its first and second saved episode, what one episode takes
  in this run: an executor that let the running episodes end before stopping would take about that.

Prints p50 and max of both and the ratio episode / stop at p50.

    .venv/bin/python bench/interrupt_stop.py [--reps 5] [--workers 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

POLL_S = 0.02


def _saved(out: Path) -> int:
    """Episodes saved so far (each one's transcript is written with its record, atomically)."""
    folder = out / "transcripts"
    return len(list(folder.glob("*.json"))) if folder.is_dir() else 0


def one_rep(workers: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="pdbgym-bench-stop-") as scratch:
        out = Path(scratch) / "cache"
        command = [sys.executable, "-m", "pdbgym.cli", "cache", "build", "--policy", "scripted", "--tasks",
                   "builtin", "--runs", "3", "--out", str(out), "--workers", str(workers)]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True, env={**os.environ, "TMPDIR": scratch})
        marks: list[float] = []
        while len(marks) < 2:
            if process.poll() is not None:
                raise SystemExit(f"the command ended before its second episode: {process.stderr.read()[-2000:]}")
            if _saved(out) > len(marks):
                marks.append(time.monotonic())
            time.sleep(POLL_S)
        sent = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=300)
        stop_s = time.monotonic() - sent
        if process.returncode != 130:
            raise SystemExit(f"exit {process.returncode}, not 130: {stderr[-2000:]}")
        return {"stop_s": stop_s, "episode_s": marks[1] - marks[0], "kept": _saved(out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    reps = [one_rep(args.workers) for _ in range(args.reps)]
    stop = np.array([r["stop_s"] for r in reps])
    episode = np.array([r["episode_s"] for r in reps])
    figures = {"reps": args.reps, "workers": args.workers, "load_average": os.getloadavg(),
               "stop_p50_s": float(np.median(stop)), "stop_max_s": float(stop.max()),
               "episode_p50_s": float(np.median(episode)), "episode_max_s": float(episode.max()),
               "episode_over_stop": float(np.median(episode) / np.median(stop))}
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"{args.reps} reps, --workers {args.workers}, load average {figures['load_average'][0]:.1f}")
    print(f"stop after Ctrl-C        p50 {figures['stop_p50_s']:.2f} s   max {figures['stop_max_s']:.2f} s")
    print(f"baseline: one episode    p50 {figures['episode_p50_s']:.2f} s   max {figures['episode_max_s']:.2f} s")
    print(f"episode / stop at p50: {figures['episode_over_stop']:.2f}x")


if __name__ == "__main__":
    main()
