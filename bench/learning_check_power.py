"""Power of the experiment report's two on-policy learning checks, on simulated GRPO runs.

Each simulated run has the shape of the SmolLM2 ladder experiment: TASKS training tasks whose solve rates
are spread evenly over [0.05, 0.95], STEPS steps that each draw PER_STEP tasks afresh and play G episodes of
each, and a per-task solve rate that rises linearly by RISE from the first step to the last. Both checks
read the same runs:

- baseline, ``learning_check``: the last quarter of steps against the first, steps as clusters;
- ``task_paired_check``: each task against itself, the later half of the steps against the earlier one
  (the report's), and the same over the first and last quarter of the steps.

Prints each check's mean 95% CI half-width, how often its CI excluded no change (its power at this rise),
and the ratio of the baseline's half-width to the halves check's. With ``--rise 0`` the share is the false-positive rate.

    .venv/bin/python bench/learning_check_power.py [--runs 200] [--rise 0.15] [--steps 22]
"""

from __future__ import annotations

import argparse

import numpy as np

from pdbgym.train.experiment.report import learning_check, task_paired_check


def simulate(seed: int, tasks: int, steps: int, per_step: int, group: int, rise: float,
             epochs: bool = False) -> tuple[dict, dict, dict]:
    rng = np.random.default_rng(seed)
    base = np.linspace(0.05, 0.95, tasks)
    rng.shuffle(base)
    outcomes, rows, order = [], [], []
    for step in range(steps):
        episodes = []
        if epochs:  # TRL's sampler: a fresh permutation each epoch, per_step tasks a step, the rest dropped
            if len(order) < per_step:
                order = list(rng.permutation(tasks))
            drawn, order = order[:per_step], order[per_step:]
        else:
            drawn = rng.choice(tasks, per_step, replace=False)
        for task in drawn:
            rate = min(1.0, base[task] + rise * step / max(1, steps - 1))
            episodes += [{"task": f"t{task}", "solved": bool(rng.random() < rate), "replayed": False}
                         for _ in range(group)]
        outcomes.append({"step": step + 1, "episodes": episodes})
        rows.append({"episodes/solve_rate": sum(e["solved"] for e in episodes) / len(episodes),
                     "episodes/replayed": 0})
    return learning_check(rows, per_step * group), task_paired_check(outcomes), task_paired_check(outcomes, 0.25)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=58)
    parser.add_argument("--steps", type=int, default=22)
    parser.add_argument("--per-step", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--rise", type=float, default=0.15)
    parser.add_argument("--epochs", action="store_true",
                        help="draw tasks epoch by epoch (TRL's sampler) instead of afresh each step")
    args = parser.parse_args()
    results = [simulate(seed, args.tasks, args.steps, args.per_step, args.group, args.rise, args.epochs)
               for seed in range(args.runs)]
    print(f"{args.runs} simulated runs: {args.tasks} tasks, {args.steps} steps of {args.per_step} tasks x G = "
          f"{args.group} ({'epochs' if args.epochs else 'drawn afresh'}), per-task solve rate rising by "
          f"{args.rise:g} over the run")
    widths = {}
    for name, index in (("quarter check, steps as clusters (baseline)", 0), ("each task against itself, halves", 1),
                        ("each task against itself, quarters", 2)):
        checks = [run[index] for run in results if run[index] is not None]
        widths[index] = float(np.mean([(c["ci"][1] - c["ci"][0]) / 2 for c in checks]))
        share = float(np.mean([c["learned"] for c in checks]))
        print(f"  {name:44s} CI half-width {widths[index]:.3f}; CI excluded no change in {share:.0%} of runs")
    print(f"  half-width ratio, baseline / paired: {widths[0] / widths[1]:.2f}x")


if __name__ == "__main__":
    main()
