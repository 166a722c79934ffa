"""False positives and power of the experiment report's on-policy learning checks, on simulated GRPO runs.

A simulated run has TASKS training tasks whose solve rates are spread evenly over [0.05, 0.95], STEPS steps
that each draw PER_STEP tasks (afresh, or epoch by epoch as GRPO's sampler deals them: ``--epochs``) and
play G episodes of each, and a per-task solve rate that rises linearly by RISE from the first step to the
last. ``--step-sd S`` adds a per-step effect shared by every task of the step, N(0, S) on the solve rate
(clipped to [0, 1]): the whole policy swinging from one update to the next. Every check reads the same runs
(``pdbgym/train/experiment/checks.py``):

- ``learning_check``: the last quarter of steps against the first, steps as clusters (Newcombe);
- ``task_paired_check``: each task against itself, quarters and halves, the sign-flip interval over tasks
  (``--before`` adds the Student t it replaced and the percentile bootstrap before that, on the same runs);
- ``step_centred_check``: the same parts with steps as clusters and each task's difficulty taken out (Welch).

Prints, per check, the mean 95% CI half-width and the share of runs whose CI excluded no change, two-sided
(at ``--rise 0``: the false-positive rate, nominal 5%; else the power, counting only rises), with a 95% Wilson
interval for the simulation's own noise (1,000 runs: about +-1.4 points around 5%).

    .venv/bin/python bench/learning_check_power.py --short [--before] [--rise 0.15]   # the short file's shapes
    .venv/bin/python bench/learning_check_power.py [--runs 1000] [--tasks 16] [--steps 12] [--epochs] \\
        [--rise 0] [--step-sd 0]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from pdbgym.evaluate.stats import wilson_interval
from pdbgym.train.experiment.checks import learning_check, step_centred_check, task_paired_check

CHECKS = (("quarter check, steps as clusters (Newcombe)", "pooled"),
          ("each task against itself, quarters (sign-flip)", "task-q"),
          ("each task against itself, halves (sign-flip)", "task-h"),
          ("steps as clusters, task mix out, quarters (Welch)", "step-q"),
          ("steps as clusters, task mix out, halves (Welch)", "step-h"))
BEFORE = (("each task against itself, quarters (Student t, before)", "t-q"),
          ("each task against itself, halves (Student t, before)", "t-h"),
          ("each task against itself, quarters (bootstrap, before that)", "boot-q"),
          ("each task against itself, halves (bootstrap, before that)", "boot-h"))


def simulate(seed: int, tasks: int, steps: int, per_step: int, group: int, rise: float, epochs: bool = False,
             step_sd: float = 0.0, before: bool = False) -> dict[str, dict | None]:
    """One simulated run's checks, by the keys of ``CHECKS``."""
    rng = np.random.default_rng(seed)
    base = np.linspace(0.05, 0.95, tasks)
    rng.shuffle(base)
    shared = rng.normal(0.0, step_sd, steps) if step_sd > 0 else np.zeros(steps)
    outcomes, rows, order = [], [], []
    for step in range(steps):
        episodes = []
        if epochs:  # GRPO's sampler: a fresh permutation each epoch, per_step tasks a step, the rest dropped
            if len(order) < per_step:
                order = list(rng.permutation(tasks))
            drawn, order = order[:per_step], order[per_step:]
        else:
            drawn = rng.choice(tasks, per_step, replace=False)
        for task in drawn:
            rate = min(1.0, max(0.0, base[task] + rise * step / max(1, steps - 1) + shared[step]))
            episodes += [{"task": f"t{task}", "solved": bool(rng.random() < rate), "replayed": False}
                         for _ in range(group)]
        outcomes.append({"step": step + 1, "episodes": episodes})
        rows.append({"episodes/solve_rate": sum(e["solved"] for e in episodes) / len(episodes),
                     "episodes/replayed": 0})
    return {"pooled": learning_check(rows, per_step * group),
            "task-q": task_paired_check(outcomes, 0.25), "task-h": task_paired_check(outcomes),
            "step-q": step_centred_check(outcomes, 0.25), "step-h": step_centred_check(outcomes),
            **({"t-q": task_paired_check(outcomes, 0.25, "t"), "t-h": task_paired_check(outcomes, 0.5, "t"),
                "boot-q": task_paired_check(outcomes, 0.25, "bootstrap"),
                "boot-h": task_paired_check(outcomes, 0.5, "bootstrap")} if before else {})}


def rates(runs: int, tasks: int, steps: int, per_step: int, group: int, rise: float, epochs: bool,
          step_sd: float, before: bool = False) -> dict[str, tuple[float, float, int]]:
    """Per check: the share of runs whose CI excluded no change (any direction at rise 0, upward otherwise),
    the mean finite CI half-width, and how many runs gave the check at all."""
    results = [simulate(seed, tasks, steps, per_step, group, rise, epochs, step_sd, before) for seed in range(runs)]
    found = {}
    for _, key in CHECKS + (BEFORE if before else ()):
        checks = [run[key] for run in results if run[key] is not None]
        hit = [c["changed"] if rise == 0 else c["learned"] for c in checks]
        widths = [(c["ci"][1] - c["ci"][0]) / 2 for c in checks if math.isfinite(c["ci"][1] - c["ci"][0])]
        found[key] = (float(np.mean(hit)) if hit else float("nan"), float(np.mean(widths)) if widths else float("nan"),
                      len(checks))
    return found


def show(title: str, found: dict[str, tuple[float, float, int]], rise: float) -> None:
    print(title)
    what = "false positives (two-sided)" if rise == 0 else "power (CI above 0)"
    for name, key in CHECKS + BEFORE:
        if key not in found:
            continue
        share, width, count = found[key]
        low, high = wilson_interval(share, count)  # the simulation's own noise: a finite number of runs
        print(f"  {name:60s} {what} {share:6.1%} [{low:.1%}, {high:.1%}]   CI half-width {width:.3f}   "
              f"({count} runs gave it)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--per-step", type=int, default=8)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--rise", type=float, default=0.0)
    parser.add_argument("--step-sd", type=float, default=0.0, help="sd of a per-step effect shared by all tasks")
    parser.add_argument("--epochs", action="store_true",
                        help="draw tasks epoch by epoch (GRPO's sampler) instead of afresh each step")
    parser.add_argument("--before", action="store_true",
                        help="also the Student t and percentile-bootstrap intervals the paired check used before "
                             "(slower)")
    parser.add_argument("--short", action="store_true",
                        help="the short file's shapes (16 tasks, 8 a step, G = 4, epochs; 12 steps and the 11 a "
                             "time cap left), with no step effect and shared step effects of sd 0.05 and 0.10")
    args = parser.parse_args()
    if args.short:
        for steps in (12, 11):
            for step_sd in (0.0, 0.05, 0.10):
                found = rates(args.runs, 16, steps, 8, 4, args.rise, True, step_sd, args.before)
                show(f"{args.runs} runs: 16 tasks, {steps} steps of 8 tasks x G = 4 (epochs), rise {args.rise:g}, "
                     f"shared per-step effect sd {step_sd:g}", found, args.rise)
        return
    found = rates(args.runs, args.tasks, args.steps, args.per_step, args.group, args.rise, args.epochs, args.step_sd,
                  args.before)
    show(f"{args.runs} runs: {args.tasks} tasks, {args.steps} steps of {args.per_step} tasks x G = {args.group} "
         f"({'epochs' if args.epochs else 'drawn afresh'}), rise {args.rise:g}, shared per-step effect sd "
         f"{args.step_sd:g}", found, args.rise)


if __name__ == "__main__":
    main()
