"""Who holds the interpreter's lock: a ``py-spy record --gil --threads -f raw`` file summarised by thread.

A GRPO step's engine thread waits to take the lock back after each PyTorch call while the episodes' threads
run Python (docs/benchmarks.md, sixth session). ``py-spy --gil`` samples only the thread holding the lock, so
each thread's samples over the rate are its seconds holding it: printed per thread (process and thread name),
with its share of the recording and the frames it held the lock in most (the innermost frame of pdbgym,
transformers, torch or trl code, else the innermost).

    py-spy record --gil --threads --subprocesses --nonblocking -r 100 -d 30 -f raw -o gil.txt --pid PID
    python bench/gil_threads.py gil.txt --rate 100 --seconds 30
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

OURS = re.compile(r"\((pdbgym|transformers|torch|trl|peft)/")


def short(part: str) -> str:
    """A ``process PID:"command line"`` or ``thread`` label cut to its pid and the command's first words."""
    return part if len(part) <= 80 else part[:77] + "..."


def summarize(lines: list[str], rate: float, top: int) -> tuple[dict[str, float], dict[str, list[tuple[str, float]]],
                                                                 dict[str, float]]:
    """Seconds holding the lock by thread, each thread's ``top`` frames with their seconds, and the seconds by
    process. Each process has a lock of its own: the recorded process's threads share one, and each subprocess
    (a grading run, a sandboxed command) holds its own, so only a process's own threads' seconds add up
    against its recording."""
    held: collections.Counter[str] = collections.Counter()
    processes: collections.Counter[str] = collections.Counter()
    frames: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts = stack.split(";")
        chain = [p for p in parts if p.startswith("process ")]
        owner = [short(p) for p in parts if p.startswith(("process ", "thread "))]
        code = [p for p in parts if not p.startswith(("process ", "thread "))]
        thread = " / ".join(owner[-2:] if len(chain) > 1 else owner) or "?"
        held[thread] += int(count)
        if len(chain) > 1:
            processes["its subprocesses (each its own lock)"] += int(count)
        else:  # the recorded process, and its threads by name less a pool's number (pdbgym-rollout_12)
            name = re.sub(r"_\d+$", "", owner[-1].partition("): ")[2]) if owner else ""
            processes["the recorded process"] += int(count)
            processes[f"  its threads named {name or '(none)'}"] += int(count)
        ours = [p for p in code if OURS.search(p)]
        frames[thread][(ours or code or ["(no frame)"])[-1]] += int(count)
    seconds = {thread: n / rate for thread, n in held.most_common()}
    return (seconds, {thread: [(f, n / rate) for f, n in frames[thread].most_common(top)] for thread in seconds},
            {name: n / rate for name, n in processes.most_common()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's --rate (samples a second)")
    parser.add_argument("--seconds", type=float, default=None, help="the recording's length (py-spy's -d)")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--threads", type=int, default=12)
    args = parser.parse_args()
    seconds, frames, processes = summarize(args.raw.read_text().splitlines(), args.rate, args.top)
    span = args.seconds or sum(seconds.values())
    for name, value in sorted(processes.items(), key=lambda item: (item[0].startswith("its sub"), -item[1])):
        if name != "the recorded process" and not name.startswith("its sub") and value < 0.05:
            continue  # a thread of the recorded process that hardly held the lock
        print(f"{value:8.2f} s holding a lock over {span:.1f} s recorded ({value / span:.0%}): {name}")
    for thread in list(seconds)[:args.threads]:
        print(f"{seconds[thread]:8.2f} s  {seconds[thread] / span:5.1%}  {thread}")
        for frame, value in frames[thread]:
            print(f"{'':12}{value:7.2f} s  {frame[:150]}")


if __name__ == "__main__":
    main()
