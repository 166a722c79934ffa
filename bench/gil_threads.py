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


def summarize(lines: list[str], rate: float, top: int) -> tuple[dict[str, float], dict[str, list[tuple[str, float]]]]:
    """Seconds holding the lock by thread, and each thread's ``top`` frames with their seconds."""
    held: collections.Counter[str] = collections.Counter()
    frames: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts = stack.split(";")
        owner = [p for p in parts if p.startswith(("process ", "thread "))]
        code = [p for p in parts if not p.startswith(("process ", "thread "))]
        thread = " / ".join(owner) or "?"
        held[thread] += int(count)
        ours = [p for p in code if OURS.search(p)]
        frames[thread][(ours or code or ["(no frame)"])[-1]] += int(count)
    seconds = {thread: n / rate for thread, n in held.most_common()}
    return seconds, {thread: [(f, n / rate) for f, n in frames[thread].most_common(top)] for thread in seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's --rate (samples a second)")
    parser.add_argument("--seconds", type=float, default=None, help="the recording's length (py-spy's -d)")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--threads", type=int, default=12)
    args = parser.parse_args()
    seconds, frames = summarize(args.raw.read_text().splitlines(), args.rate, args.top)
    total = sum(seconds.values())
    span = args.seconds or total
    print(f"{total:.2f} s holding the lock in all, over {span:.1f} s recorded ({total / span:.0%} of it)")
    for thread in list(seconds)[:args.threads]:
        print(f"{seconds[thread]:8.2f} s  {seconds[thread] / span:5.1%}  {thread}")
        for frame, value in frames[thread]:
            print(f"{'':12}{value:7.2f} s  {frame[:150]}")


if __name__ == "__main__":
    main()
