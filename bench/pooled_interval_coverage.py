"""False positives of the pooled-seeds interval (``stats.two_way_interval``) against tasks as the only clusters.

A simulated pooled experiment: TASKS held-out tasks with solve rates uniform on [0.05, 0.95], SEEDS training
seeds, RUNS runs a task an arm; arm A's rate is the task's plus a per-seed effect N(0, sd) shared by every
task of the seed (a training run's luck), arm B's the task's own. No true difference: every interval that
excludes 0 is a false positive (two-sided, nominal 5%). Prints the share for the two-way interval and for
the t interval over tasks of the seed-averaged differences, at seed effects of sd 0, 0.05 and 0.10.

    .venv/bin/python bench/pooled_interval_coverage.py [--sims 2000] [--tasks 24] [--seeds 3] [--runs 4]
"""

from __future__ import annotations

import argparse

import numpy as np

from pdbgym.evaluate.stats import t_interval, two_way_interval, wilson_interval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=4)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{args.sims} simulated null pooled experiments: {args.tasks} tasks x {args.seeds} seeds, {args.runs} runs")
    for seed_sd in (0.0, 0.05, 0.10):
        two_way = tasks_only = 0
        for _ in range(args.sims):
            base = rng.uniform(0.05, 0.95, args.tasks)[:, None]
            shared = rng.normal(0.0, seed_sd, args.seeds)[None, :]
            a = rng.binomial(args.runs, np.clip(base + shared, 0, 1)) / args.runs
            b = rng.binomial(args.runs, np.broadcast_to(base, a.shape)) / args.runs
            _, low, high, _, _ = two_way_interval(a - b)
            two_way += low > 0 or high < 0
            low, high = t_interval((a - b).mean(axis=1))
            tasks_only += low > 0 or high < 0
        for name, hits in (("two-way, tasks x seeds", two_way), ("tasks only (t)", tasks_only)):
            low, high = wilson_interval(hits / args.sims, args.sims)
            print(f"  seed effect sd {seed_sd:4.2f}  {name:24s} false positives {hits / args.sims:6.1%} "
                  f"[{low:.1%}, {high:.1%}]")


if __name__ == "__main__":
    main()
