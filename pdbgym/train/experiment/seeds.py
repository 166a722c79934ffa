"""One experiment over several training seeds, and one pooled report (``OUT/pooled.md``).

``pdbgym experiment run FILE --seeds 0,1,2`` (or ``seeds = [0, 1, 2]`` in the file) runs the experiment once
per seed, each in ``OUT/seed-N`` (``ExperimentConfig.for_seed``: the seed trains; the tasks and split keep
the file's draw, so every seed is held out on the same tasks). A seed whose folder finished every stage is
not run again; one cut short resumes inside, as a single experiment does.

The pooled report holds a per-seed table (each arm's held-out pass@1 and the paired differences at the
primary temperature) and the pooled differences GRPO - sft-best and GRPO - sft-matched over the tasks every
seed played: the [tasks, seeds] matrix of per-task differences, tasks and seeds as crossed random effects
(``stats.two_way_interval``): a seed's training luck is shared by all its tasks, so tasks alone would make
the interval too narrow, and three seeds alone leave two degrees of freedom.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pdbgym.evaluate.results import ResultsStore
from pdbgym.evaluate.stats import two_way_interval
from pdbgym.fileio import write_text_atomic
from pdbgym.reportkit import md_bullets, md_table, pct
from pdbgym.train.experiment.config import ExperimentConfig, ExperimentError
from pdbgym.train.experiment.run import STAGES

POOLED_FILE = "pooled.md"
PAIRS = (("grpo", "sft-best"), ("grpo", "sft-matched"))


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` as ``[0, 1, 2]``; anything else is refused in one line."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        seeds = []
    if not seeds or any(n < 0 for n in seeds) or len(set(seeds)) < len(seeds):
        raise ExperimentError(f"--seeds {text!r}: give distinct integers >= 0 separated by commas, e.g. --seeds 0,1,2")
    return seeds


def seed_folder(out: Path, seed: int) -> Path:
    return out / f"seed-{seed}"


def recorded(folder: Path) -> set[str]:
    """The stages ``folder``'s ``experiment.json`` records as finished (none without one)."""
    path = folder / "experiment.json"
    return set(json.loads(path.read_text()).get("stages", {})) if path.is_file() else set()


def finished(folder: Path) -> bool:
    """Every stage of the experiment in ``folder`` recorded, the report included (a seed run ``--until eval``
    is not finished: a later run plays its extra temperatures)."""
    return set(STAGES) <= recorded(folder)


def run_seeds(config: ExperimentConfig, out: Path, seeds: list[int], run_one: Callable[..., Path],
              say: Callable[[str], None] = print, **kwargs: Any) -> Path:
    """Each seed's experiment not yet finished (``run_one``: ``run_experiment``), then the pooled report."""
    out.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        folder = seed_folder(out, seed)
        if finished(folder):
            say(f"[seed {seed}] finished earlier: {folder}")
            continue
        say(f"[seed {seed}] {folder}")
        run_one(config.for_seed(seed), folder, say=say, **kwargs)
    return write_pooled_report(config, out, seeds)


def evaluated(folder: Path) -> bool:
    """The seed's eval stage recorded as finished: its primary campaign played every episode."""
    return "eval" in recorded(folder)


def played(folder: Path) -> int:
    """Episodes the seed's primary campaign holds so far (0: none)."""
    return sum(1 for _ in ResultsStore(folder / "eval").rows()) if (folder / "eval").is_dir() else 0


def per_task(folder: Path) -> dict[str, dict[str, float]]:
    """arm -> task -> held-out pass@1 of one seed's primary campaign (``OUT/eval``), once its eval stage
    finished: a campaign cut short holds more runs of some tasks and arms than of others, so its means
    would compare arms on different runs ({} until then)."""
    if not evaluated(folder):
        return {}
    runs: dict[str, dict[str, list[int]]] = {}
    for row in ResultsStore(folder / "eval").rows():
        runs.setdefault(row.arm, {}).setdefault(row.instance_id, []).append(int(row.final_test_passed))
    return {arm: {task: sum(v) / len(v) for task, v in tasks.items()} for arm, tasks in runs.items()}


def pooled_difference(seed_rates: list[dict[str, dict[str, float]]], a: str, b: str) -> dict[str, Any] | None:
    """A - B pooled over seeds on the tasks every seed played with both arms; None when no such task."""
    if not seed_rates or any(a not in rates or b not in rates for rates in seed_rates):
        return None
    tasks = sorted(set.intersection(*(set(r[a]) & set(r[b]) for r in seed_rates)))
    if not tasks:
        return None
    matrix = np.array([[rates[a][t] - rates[b][t] for rates in seed_rates] for t in tasks])
    mean, low, high, df, method = two_way_interval(matrix)
    return {"diff": mean, "ci": [low, high], "df": df, "method": method, "tasks": len(tasks), "seeds": len(seed_rates)}


def _pooled_cell(found: dict[str, Any]) -> str:
    """The difference and its interval; no interval where the cells show no spread to estimate one from."""
    low, high = found["ci"]
    if np.isfinite(low) and np.isfinite(high):
        return f"{pct(found['diff'])} [{pct(low)}, {pct(high)}]"
    return f"{pct(found['diff'])} (no interval: every task's difference is the same under every seed)"


def write_pooled_report(config: ExperimentConfig, out: Path, seeds: list[int]) -> Path:
    """``OUT/pooled.md`` from the seed folders there (a seed not yet evaluated is named and left out)."""
    rates = {seed: per_task(seed_folder(out, seed)) for seed in seeds}
    done = [seed for seed in seeds if rates[seed]]
    arms = list(dict.fromkeys(arm for seed in done for arm in rates[seed]))
    rows = []
    for seed in done:
        means = {arm: float(np.mean(list(rates[seed][arm].values()))) for arm in arms if arm in rates[seed]}
        diffs = [pct(means[a] - means[b]) if a in means and b in means else "-" for a, b in PAIRS]
        rows.append([seed, *(pct(means.get(arm)) for arm in arms), *diffs])
    lines = [f"# Experiment {config.name}: {len(seeds)} seeds pooled", "",
             f"From `{config.source}`; training seeds {', '.join(map(str, seeds))}; tasks and split drawn with seed "
             f"{config.tasks_drawn_with()} in every one (the same held-out tasks). Held-out pass@1 at T = "
             f"{config.eval.temperature:g}, {config.eval.runs} runs a task; each seed's own report is "
             "`seed-N/report.md`.", "", "## Per seed", ""]
    lines += md_table(["seed", *arms, *(f"{a} - {b}" for a, b in PAIRS)], rows) + [""]
    missing = [seed for seed in seeds if seed not in done]
    partial = [f"{seed} ({n} held-out episodes played so far)" for seed in missing
               if (n := played(seed_folder(out, seed)))]
    notes = [f"Seed(s) {', '.join(map(str, missing))} not evaluated yet: left out above and below."] if missing else []
    if partial:
        notes.append(f"Cut short inside the eval stage: seed {', '.join(partial)}; a rerun of the same command plays "
                     "the rest, and only a finished campaign is counted.")
    lines += ["## Pooled over seeds (held-out pass@1, per task)", ""]
    pooled = [(a, b, found) for a, b in PAIRS if (found := pooled_difference([rates[s] for s in done], a, b))]
    lines += md_table(["a - b", "difference [95% CI]", "tasks x seeds", "degrees of freedom", "interval"], [
        [f"{a} - {b}", _pooled_cell(p), f"{p['tasks']} x {p['seeds']}",
         f"{p['df']:.1f}" if p["df"] > 0 else "-", p["method"]] for a, b, p in pooled]) + [""]
    notes.append("The interval takes tasks and seeds as crossed random effects (each cell a task's difference under "
                 "one seed; a seed's training luck shared by all its tasks): Student t on the two-way variance of "
                 "the grand mean, (MS_tasks + MS_seeds - MS_residual) / (tasks x seeds), never below either one-way "
                 "variance, with Satterthwaite's degrees of freedom (pdbgym.evaluate.stats.two_way_interval).")
    lines += md_bullets(notes) + [""]
    path = out / POOLED_FILE
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path
