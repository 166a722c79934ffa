"""The experiment's one report (``OUT/report.md``, and the same page in ``OUT/report.html``), from the run
folder alone, built once as a ``reportkit.Page``.

Sections: the GRPO steps (reward, on-policy solve rate, tampered and verdict-refused episodes per step,
the last quarter of steps against the first with a 95% CI of the difference, and each task against
itself across the two quarters and the two halves of the steps), the val gates (every checkpoint's val
pass@1, tampered and verdict-refused episodes), the held-out table (pass@1 and pass@k per arm with
task-clustered CIs, episodes, tampered and verdict-refused ones, valid tool-call rate, KL to the oracle),
the paired comparisons GRPO - SFT and SFT - base, and the stop-at-peak check: the chosen checkpoint's val
score next to its held-out score, and how much choosing on val inflated it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypedDict, TypeVar, cast

import numpy as np

from pdbgym.evaluate.results import ResultsStore
from pdbgym.evaluate.stats import estimate_mean, wilson_interval
from pdbgym.fileio import read_jsonl
from pdbgym.reportkit import Block, Bullets, EstimateDict, Heading, Page, Paragraph, Table, fmt, pct
from pdbgym.tasks.difficulty import demands, rung, source_group
from pdbgym.tasks.model import Task
from pdbgym.tasks.suites import resolve_tasks
from pdbgym.train.experiment.arms import read_matched
from pdbgym.train.experiment.checks import learning_check, quarter_rate, step_centred_check, task_paired_check
from pdbgym.train.experiment.conclusion import what_this_run_shows
from pdbgym.train.experiment.config import SFT_CHOICE_FILE, ExperimentConfig
from pdbgym.train.experiment.heldout import ENTROPY_FILE, campaign_paths, extra_temperatures, label, task_sets
from pdbgym.train.experiment.recipe import departure_rows
from pdbgym.train.gradguard import skipped_steps
from pdbgym.train.grpo.choose import nonfinite_warning
from pdbgym.train.grpo.records import GRPORunRecord, StepOutcomes
from pdbgym.train.grpo.report import read_outcomes
from pdbgym.train.grpo.spread import spread_steps
from pdbgym.train.grpo.valgate import read_gates
from pdbgym.train.records import LogRow

Column = TypeVar("Column", int, str)  # a held-out table's column: a rung, or a task set's label


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _run(out: Path) -> GRPORunRecord | None:
    """The GRPO stage's ``grpo_run.json``; None before the stage has finished."""
    path = out / "grpo" / "grpo_run.json"
    return cast(GRPORunRecord, json.loads(path.read_text())) if path.is_file() else None


class HeldOutCell(EstimateDict):
    """Held-out pass@1 of one arm on one column's tasks, with how many tasks and episodes it is over."""

    tasks: int
    episodes: int


def plural(n: int | str, word: str, many: str = "") -> str:
    """``n`` and ``word``, in the plural unless ``n`` is 1: ``plural(1, "task") == "1 task"``."""
    return f"{n} {word if n == 1 else many or word + 's'}"


def pct0(share: float | None) -> str:
    """:func:`pct` without a negative zero: a difference that rounds to 0 is ``0.0%``, not ``-0.0%``."""
    text = pct(share)
    return text[1:] if text.startswith("-") and float(text[1:-1]) == 0 else text


def _fact_value(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fact_value(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_fact_value(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    return "-" if value is None else str(value)


def facts_text(facts: Mapping[str, object]) -> str:
    """A stage's facts as readable text: ``key: value`` pairs joined by ``; `` (a nested table's pairs as
    ``key value`` joined by commas), the stage's seconds left out (they have their own column)."""
    return "; ".join(f"{k}: {_fact_value(v)}" for k, v in facts.items() if k != "seconds") or "-"


KL_MIN_TASKS = 2  # a task-bootstrap interval from fewer tasks has zero width: it says nothing


def kl_cell(entry: dict[str, Any] | None) -> str:
    """KL to the oracle with its 95% CI; with fewer than ``KL_MIN_TASKS`` tasks the value alone and why there
    is no interval (one task's bootstrap gives the zero-width ``[x, x]``); ``-`` when not available."""
    if not entry or not entry.get("available"):
        return "-"
    value = fmt(entry.get("kl_per_token"), ".4f")
    tasks = entry.get("tasks")
    if tasks is not None and tasks < KL_MIN_TASKS:
        return f"{value} (no interval: it needs at least {KL_MIN_TASKS} tasks, {plural(tasks, 'task')} scored)"
    return f"{value} [{fmt(entry.get('ci_low'), '.4f')}, {fmt(entry.get('ci_high'), '.4f')}]"


def smoke_test_blocks(config: ExperimentConfig) -> list[Block]:
    """The quick profile's warning at the report's top: a smoke test, its counts too small to show learning."""
    if not config.quick:
        return []
    return [Paragraph(f"**Smoke test (quick profile):** tiny counts ({plural(config.grpo.steps, 'GRPO step')}, "
                      f"{plural(config.grpo.tasks_per_step, 'task')} a step, {plural(config.eval.runs, 'held-out run')} "
                      "a task) check that every stage runs end to end; nothing below is evidence about learning, and "
                      "no difference in it is a claim that training helped or hurt.", "warn")]


def by_rung(out: Path) -> dict[str, dict[int, HeldOutCell]]:
    """arm -> rung -> held-out pass@1 (mean, CI over the rung's tasks, episodes) from the eval campaign."""
    return held_out_by(out, lambda tasks: {task.instance_id: rung(demands(task)) for task in tasks})


def by_task_set(out: Path, test_only: list[str]) -> dict[str, dict[str, HeldOutCell]]:
    """arm -> task set -> held-out pass@1, as :func:`by_rung`; a set is a family or suite of ``[tasks]``
    (``OUT/tasks/sets.json``; a folder from before it: the task's source), labelled with its rungs and, when
    ``[split] test_only`` held it out whole, so."""
    sets = task_sets(out)

    def columns(tasks: list[Task]) -> dict[str, str]:
        names = {task.instance_id: sets.get(task.instance_id) or source_group(task) for task in tasks}
        levels: dict[str, set[int]] = {}
        for task in tasks:
            levels.setdefault(names[task.instance_id], set()).add(rung(demands(task)))
        labels = {}
        for name, found in levels.items():
            span = f"rung {min(found)}" if len(found) == 1 else f"rungs {min(found)}-{max(found)}"
            labels[name] = f"{name} ({span}{'; held out whole' if name in test_only else ''})"
        return {instance_id: labels[name] for instance_id, name in names.items()}

    return held_out_by(out, columns)


def held_out_by(out: Path, columns: Callable[[list[Task]], dict[str, Column]]) -> dict[str, dict[Column, HeldOutCell]]:
    """arm -> column -> held-out pass@1 (mean, CI over the column's tasks, episodes) from the eval campaign,
    ``columns`` giving each test task's column (instance id -> column)."""
    folder = out / "tasks" / "test"
    if not (out / "eval").is_dir() or not folder.is_dir():
        return {}
    rungs = columns(resolve_tasks(folder))
    outcomes: dict[str, dict[Column, dict[str, list[int]]]] = {}
    for row in ResultsStore(out / "eval").rows():
        if row.instance_id in rungs:
            tasks = outcomes.setdefault(row.arm, {}).setdefault(rungs[row.instance_id], {})
            tasks.setdefault(row.instance_id, []).append(int(row.final_test_passed))
    table: dict[str, dict[Column, HeldOutCell]] = {}
    for arm, per_rung in outcomes.items():
        for level, tasks in sorted(per_rung.items()):
            rates = np.array([sum(v) / len(v) for v in tasks.values()])
            episodes = sum(len(v) for v in tasks.values())
            estimate = cast(EstimateDict, estimate_mean(rates, max_n=episodes).to_dict())
            table.setdefault(arm, {})[level] = {**estimate, "tasks": len(tasks), "episodes": episodes}
    return table


class RungRow(TypedDict):
    """The GRPO run's on-policy episodes of one rung: played, solved, the rate with its 95% Wilson interval
    (steps as clusters), the effective count, and the first and last quarter of steps' (solved, played)."""

    played: int
    solved: int
    rate: float | None
    ci: list[float | None]
    effective: float
    first: tuple[int, int]
    last: tuple[int, int]


def grpo_rungs(rows: list[LogRow]) -> dict[int, RungRow]:
    """rung -> the GRPO run's on-policy episodes of that rung: played, solved, the rate with a 95% Wilson
    interval (steps as clusters, ``clustered_proportion``), and the first and last quarter of steps'
    counts (from ``episodes/rung_R/*``)."""
    levels = sorted({int(key.split("/")[1].removeprefix("rung_")) for row in rows for key in row
                     if key.startswith("episodes/rung_") and key.endswith("/played")})
    quarter = max(1, len(rows) // 4)
    table: dict[int, RungRow] = {}
    for level in levels:
        counts = [(round(float(row.get(f"episodes/rung_{level}/solved", 0.0))),
                   round(float(row.get(f"episodes/rung_{level}/played", 0.0)))) for row in rows]
        rate, n_eff, played = quarter_rate(counts)
        solved = sum(c[0] for c in counts)
        low, high = wilson_interval(rate, n_eff) if played else (None, None)
        quarters = [(sum(c[0] for c in part), sum(c[1] for c in part)) for part in (counts[:quarter], counts[-quarter:])]
        table[level] = {"played": played, "solved": solved, "rate": rate if played else None,
                        "ci": [low, high], "effective": round(n_eff, 1), "first": quarters[0], "last": quarters[1]}
    return table


def sft_choice_blocks(out: Path) -> list[Block]:
    """The SFT-strength section: each candidate's val pass@1 and the one chosen (none without candidates)."""
    choice = _load(out / "sft" / SFT_CHOICE_FILE)
    if not choice:
        return []
    best = choice.get("best", choice["chosen"])  # folders from before the best was recorded: the start
    rows = []
    for steps, c in sorted(choice["candidates"].items(), key=lambda item: int(item[0])):
        roles = [role for role, name in (("sft-best", best), ("GRPO's start", choice["chosen"]))
                 if name == c["name"]]
        rows.append([steps, fmt(c.get("best_val_loss"), ".4f"), _ci(c["pass@1"]), ", ".join(roles)])
    runs = f"{plural(choice['val_runs'], 'run')} a task"
    if choice.get("start", "target") == "best":
        rule = "the best val pass@1 (ties: more steps), also the held-out arm `sft-best`"
    elif best == choice["chosen"]:
        rule = f"the val pass@1 nearest {pct(choice['target'])}, also the best on val (the held-out arm `sft-best`)"
    else:
        rule = (f"the val pass@1 nearest {pct(choice['target'])}, played held out as `sft-start` beside `sft-best` "
                f"(`{best}`, the best on val)")
    return [Heading("SFT strength (chosen on val)"),
            Table(["SFT steps", "best val loss", f"val pass@1 [95% CI] ({runs})", "role"], rows),
            Bullets([f"GRPO starts from the SFT model with {rule}: `{choice['chosen']}` ({choice['steps']} steps). "
                     "The choice used the val split only, and is recorded in the experiment's selection ledger.",
                     *_sft_choice_warning(choice)])]


def _sft_choice_warning(choice: dict[str, Any]) -> list[str]:
    """A line when no candidate brackets the target: every one solved no val episode, or every one all."""
    scores = {c["pass@1"]["mean"] for c in choice["candidates"].values()}
    if scores == {0.0}:
        return ["No candidate solved a val episode, so GRPO is likely to see no reward spread: give [sft] "
                "candidates more steps."]
    if scores == {1.0}:
        return ["Every candidate solved every val episode, so GRPO is likely to see no reward spread and has no room "
                "to rise: give [sft] candidates fewer steps, or harder tasks."]
    return []


def hacking_notes(rows: list[LogRow]) -> list[str]:
    """A line on the GRPO run's tampered and verdict-refused on-policy episodes (its logged running totals,
    else the sum of the per-step counts); none when the steps logged neither."""
    found = {}
    for kind in ("tampered", "refused"):
        totals = [r[f"episodes/{kind}_total"] for r in rows if f"episodes/{kind}_total" in r]
        counts = [r[f"episodes/{kind}"] for r in rows if f"episodes/{kind}" in r]
        if totals or counts:
            found[kind] = int(totals[-1] if totals else sum(counts))
    if not found:
        return []
    steps = {kind: [r["step"] for r in rows if r.get(f"episodes/{kind}")] for kind in found}
    where = "; ".join(f"{kind} at step(s) {', '.join(map(str, at))}" for kind, at in steps.items() if at)
    return [f"Reward hacking: {found.get('tampered', '-')} on-policy episode(s) graded tampered and "
            f"{found.get('refused', '-')} verdict-refused (the grading run ended abnormally; not tampered, graded "
            f"unsolved) over the run" + (f" ({where})." if where else ".")]


def hacking_cells(block: dict[str, Any]) -> list[Any]:
    """An eval arm's episodes, tampered and verdict-refused counts ("-" where the summary predates them)."""
    tampered = block.get("tampered", (block.get("termination_reasons") or {}).get("tampered"))
    return [block.get("episodes", "-"), "-" if tampered is None else tampered, block.get("refused", "-")]


def _ci(block: EstimateDict | None) -> str:
    if not block:
        return "-"
    low, high = block.get("ci", [None, None])
    return f"{pct(block.get('mean'))} [{pct(low)}, {pct(high)}]"


SAME_DIFFERENCE = ("; every task's difference is the same, so there is no spread to estimate: Newcombe's "
                   "unpaired interval stands in")


def _pairs(summary: dict[str, Any], wanted: tuple[tuple[str, str], ...]) -> list[tuple[str, str, str, Any]]:
    """(a, b, "a - b [CI]", tasks) for each wanted pair, oriented as asked; a pair whose every task differs by
    the same amount (``stats.paired_comparison``'s fallback) says so beside its interval."""
    found = []
    for a, b in wanted:
        for c in summary.get("comparisons", []):
            if (c["arm_a"], c["arm_b"]) not in ((a, b), (b, a)):
                continue
            sign = 1 if (c["arm_a"], c["arm_b"]) == (a, b) else -1
            low, high = sorted((sign * c["ci"][0], sign * c["ci"][1]))
            note = SAME_DIFFERENCE if c.get("ci_method") == "newcombe" else ""
            found.append((a, b, f"{pct0(sign * c['mean_diff'])} [{pct0(low)}, {pct0(high)}]{note}", c.get("n_tasks")))
    return found


def spread_lines(outcomes: list[StepOutcomes], run: GRPORunRecord | None, logged: int) -> list[str]:
    """How many GRPO steps had reward spread among the policy's own episodes, the steps whose only spread
    came from replayed corpus trajectories apart (``grpo.spread``); a loud line when none had it."""
    if outcomes:
        spread = spread_steps(outcomes)
        on_policy, replay_only, steps = spread["on_policy"], spread["replay_only"], spread["steps"]
    else:  # a run folder from before outcomes.jsonl: TRL's count, replayed episodes included
        on_policy, replay_only, steps = run.get("reward_signal_steps", 0) if run else 0, None, logged
    lines = [f"{on_policy} of {steps} steps had reward spread among their on-policy episodes (a group whose played "
             "episodes scored differently)" + (
                 f"; {plural(replay_only, 'more step')} had spread only between replayed corpus trajectories and "
                 "the played episodes, which is not the policy's own signal." if replay_only is not None else
                 " (counted by TRL with replayed episodes included: this run kept no outcomes.jsonl).")]
    if steps and not on_policy:
        lines.append(f"**{ZERO_SIGNAL}**")
    return lines


ZERO_SIGNAL = ("No GRPO step had reward spread among its on-policy episodes: every advantage of the policy's own "
               "samples was 0, so the `grpo` arm is the SFT model moved only by replayed trajectories and the BC "
               "anchor (imitation), not by reinforcement learning")


def rise(check: dict[str, Any]) -> str:
    """A learning check's two rates and their difference with its interval."""
    return (f"{pct(check['last'])} vs {pct(check['first'])}, difference {pct0(check['diff'])} "
            f"[{pct0(check['ci'][0])}, {pct0(check['ci'][1])}]")


def direction(check: dict[str, Any], what: str) -> str:
    """The verdict of an interval that excludes no change, two-sided: raised or lowered."""
    return f"the CI excludes no change: GRPO {'raised' if check['ci'][0] > 0 else 'lowered'} {what}"


def paired_check_lines(paired: dict[str, Any] | None, centred: dict[str, Any] | None, part: str) -> list[str]:
    """The report's line on each task against itself over two parts of the steps (``task_paired_check``),
    with the same parts taken with steps as clusters (``step_centred_check``) when there are enough steps."""
    if paired is None:
        return []
    verdict = direction(paired, "the solve rate on the same tasks") if paired["changed"] else "the CI includes no change"
    if part == "quarters":
        same = paired["tasks"] == paired["played"][0] == paired["played"][1]
        verdict += ("; the two quarters hold the same tasks (whole epochs), so this is the quarter check with "
                    "the task mix taken out" if same else
                    f"; the quarters share {paired['tasks']} of their {paired['played'][0]} and "
                    f"{paired['played'][1]} tasks (not whole epochs of the same tasks), and the difference "
                    "is over the shared ones")
    text = (f"Each task against itself, {part}: the last {paired['steps_per_half']} step(s) against the "
            f"first, on the {paired['tasks']} tasks played on-policy in both ({paired['episodes'][1]} and "
            f"{paired['episodes'][0]} episodes): {rise(paired)} (95%, sign-flip interval over tasks; "
            f"{pct(paired['detectable'])} detectable at 80% power); {verdict}.")
    if centred is not None and not centred["df"]:
        text += (" With steps as clusters the steps' values did not vary at all: no interval to give (a swing of "
                 "the policy shared by every task is not measured here).")
    elif centred is not None:
        low, high = centred["ci"]
        agree = ("it too excludes no change" if centred["changed"] else
                 "it includes no change, so a swing of the whole policy from step to step, shared by every task, "
                 "could also explain the difference above" if paired["changed"] else "it includes no change too")
        text += (f" With steps as clusters and each task's difficulty taken out ({centred['steps'][1]} against "
                 f"{centred['steps'][0]} steps, Welch's interval, {centred['df']:.1f} degrees of freedom): "
                 f"{pct0(centred['diff'])} [{pct0(low)}, {pct0(high)}]; {agree}.")
    return [text]


# The held-out differences the report shows, when both arms were played (``arms.py``): what GRPO adds to the
# best SFT model, to the imitation-matched control and to its own start; what imitation alone added to the start;
# what SFT added to the base. ("grpo", "sft") and ("sft", "base") read folders from before these arms.
COMPARISONS = (("grpo", "sft-best"), ("grpo", "sft-matched"), ("grpo", "sft-start"), ("sft-matched", "sft-start"),
               ("sft-best", "base"), ("grpo", "sft"), ("sft", "base"), ("grpo", "base"))


def matched_blocks(out: Path) -> list[Block]:
    """What the ``sft-matched`` control trained on (``OUT/matched/matched.json``), or why there is none."""
    matched = read_matched(out)
    if not matched:
        return []
    if not matched["examples"]:
        return [Bullets(["`sft-matched`: GRPO's stage replayed no trajectory and had no anchor, so there is no "
                         "imitation to match; GRPO's start is that control."])]
    return [Bullets([f"`sft-matched`: SFT continued from GRPO's start on the {matched['examples']} corpus examples "
                     f"GRPO's stage trained on beside its own samples ({matched['replayed']} replayed trajectories, "
                     f"{matched['anchor']} anchor examples), {plural(matched['updates'], 'update')} of "
                     f"{matched['effective_batch']} at GRPO's learning rate and adapter, no reward. GRPO - "
                     "sft-matched is the part of GRPO's difference that imitating that data does not explain."])]


def temperature_blocks(config: ExperimentConfig, out: Path) -> list[Block]:
    """Held-out pass@1 of each arm at every sampling temperature played, each model arm's sampled entropy,
    and what GRPO adds to sft-best and sft-matched at each (``heldout.py``); none without campaigns."""
    primary, found = config.eval.temperature, {}
    for temperature in [primary, *extra_temperatures(primary, config.eval.temperatures)]:
        folder, summary_file = campaign_paths(out, temperature, primary)
        if summary_file.is_file():
            found[label(temperature)] = (_load(summary_file), _load(folder / ENTROPY_FILE))
    if not found:
        return []
    arms = list(dict.fromkeys(arm for summary, _ in found.values() for arm in summary.get("arms", {})))
    entropies = [name for name, (_, entropy) in found.items() if entropy]
    rows = [[arm, *(_ci((summary.get("arms", {}).get(arm) or {}).get("pass@1")) for summary, _ in found.values()),
             *(_entropy_cell(found[name][1].get(arm)) for name in entropies)] for arm in arms]
    blocks: list[Block] = [
        Heading("Held-out pass@1 by sampling temperature"),
        Paragraph(f"{plural(config.eval.runs, 'run')} a task (greedy: one); entropy is the mean surprisal of the "
                  "tokens an arm sampled (nats/token, 95% t interval over tasks)."),
        Table(["arm", *(f"pass@1, {name} [95% CI]" for name in found), *(f"entropy, {name}" for name in entropies)],
              rows)]
    pairs = [[name, f"{a} - {b}", cell, n] for name, (summary, _) in found.items()
             for a, b, cell, n in _pairs(summary, (("grpo", "sft-best"), ("grpo", "sft-matched")))]
    return blocks + ([Table(["temperature", "a - b", "difference [95% CI]", "tasks"], pairs)] if pairs else [])


def _entropy_cell(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "-"
    low, high = entry["ci"]
    interval = f" [{low:.3f}, {high:.3f}]" if np.isfinite(low) else ""
    return f"{entry['nats_per_token']:.3f}{interval}"


def departure_blocks(config: ExperimentConfig) -> list[Block]:
    """The settings that depart from the seed recipe (``recipe.py``), each with the file's reason."""
    rows = departure_rows(config, config.departures)
    if not rows:
        return [Paragraph("The settings are the seed recipe's (`recipe.SEED_RECIPE`).")]
    return [Heading("Departures from the seed recipe"),
            Table(["setting", "seed recipe", "this experiment", "why (the file's [departures])"], rows)]


def write_experiment_report(config: ExperimentConfig, out: Path, state: dict[str, Any]) -> Path:
    """``OUT/report.md`` and ``OUT/report.html`` from the folder as it is; returns the Markdown's path."""
    blocks = [*smoke_test_blocks(config),
              Paragraph(f"From `{config.source}` (settings digest {config.digest()}); base `{config.base}`; "
                        f"seed {config.seed}."),
              *departure_blocks(config), *conclusion_blocks(out),
              Heading("Stages"), Table(["stage", "seconds", "facts"], [
                  [name, facts.get("seconds"), facts_text(facts)] for name, facts in state.get("stages", {}).items()]),
              *sft_choice_blocks(out), *(grpo_blocks(config, out) if config.grpo.steps else []),
              *heldout_blocks(config, out), *(stop_at_peak_blocks(out) if config.grpo.steps else [])]
    title = f"Experiment {config.name}" + (" (quick profile: smoke test)" if config.quick else "")
    path, _ = Page(title, blocks).write(out, "report")
    return path


def conclusion_blocks(out: Path) -> list[Block]:
    """"What this run shows" (``conclusion.py``), once the held-out campaign has a summary."""
    summary, campaign = _load(out / "eval" / "summary.json"), _load(out / "eval" / "campaign.json")
    if not summary:
        return []
    arms = campaign.get("config", {}).get("arms") or {arm: "" for arm in summary.get("arm_results", {})}
    sentences = what_this_run_shows(arms, summary, _load(out / "validity.json"), _load(out / "kl.json"))
    return [Heading("What this run shows"), Paragraph(" ".join(sentences))]


def grpo_blocks(config: ExperimentConfig, out: Path) -> list[Block]:
    """The GRPO steps, the learning checks, the on-policy rate by rung and the val gates."""
    run = _run(out)
    rows = cast(list[LogRow], read_jsonl(out / "grpo" / "steps.jsonl").rows)
    gates = read_gates(out / "grpo" / "gates.jsonl")
    per_step = config.grpo.group * config.grpo.tasks_per_step
    blocks: list[Block] = [Heading("GRPO steps"), Table(
        ["step", "reward", "on-policy solve rate", "tampered", "verdict-refused", "replayed", "KL", "beta",
         "seconds (rollouts)",
         "an episode's seconds: turns / sandbox", "engine seconds: busy (prefill)", "rows a decode step"], [
        [r.get("step"), fmt(r.get("reward"), ".3f"), pct(r.get("episodes/solve_rate")),
         fmt(r.get("episodes/tampered"), ".0f"), fmt(r.get("episodes/refused"), ".0f"),
         int(r.get("episodes/replayed", 0)), fmt(r.get("kl"), ".4f"), fmt(r.get("beta"), ".4f"),
         f"{fmt(r.get('step_time'), '.1f')} ({fmt(r.get('time/rollout_s'), '.1f')})",
         f"{fmt(r.get('time/episode_model_s'), '.1f')} / {fmt(r.get('time/episode_env_s'), '.1f')}",
         f"{fmt(r.get('engine/busy_s'), '.1f')} ({fmt(r.get('engine/prefill_s'), '.1f')})",
         fmt(r.get("engine/live_rows"), ".1f")] for r in rows])]
    check = learning_check(rows, per_step)
    outcomes = read_outcomes(out / "grpo")
    notes = spread_lines(outcomes, run, len(rows))
    guard = run.get("nonfinite") if run else None
    stopped_at = guard["stopped_at"] if guard else None
    if rows and len(rows) < config.grpo.steps:
        cap = f" (the {config.grpo.max_minutes:g}-minute cap)" if config.grpo.max_minutes else ""
        cap = " (non-finite gradients, steps in a row)" if stopped_at else cap
        notes.append(f"Training stopped after {len(rows)} of {config.grpo.steps} steps{cap}.")
    skipped = skipped_steps(rows)
    if skipped:
        notes.append(nonfinite_warning(skipped, stopped_at) + ".")
    notes += hacking_notes(rows)

    if check is not None:
        verdict = direction(check, "the on-policy solve rate") if check["changed"] else \
            "the CI includes no change by this check, which moves with the mix of tasks each step drew (the checks of each " \
            "task against itself below take the mix out)"
        notes.append(f"On-policy solve rate, last {check['steps_per_quarter']} step(s) against the first "
                     f"({check['episodes'][1]} and {check['episodes'][0]} episodes, worth {check['effective'][1]:g} and "
                     f"{check['effective'][0]:g} independent ones with steps as clusters): {rise(check)} (95%, "
                     f"Newcombe); {verdict}.")
    for share, part in ((0.25, "quarters"), (0.5, "halves")):
        notes += paired_check_lines(task_paired_check(outcomes, share), step_centred_check(outcomes, share), part)
    blocks.append(Bullets(notes))
    ladder = grpo_rungs(rows)
    if ladder:
        def share(pair: tuple[int, int]) -> str:
            return f"{pair[0]} of {pair[1]}"

        blocks += [Heading("On-policy solve rate by rung of the task ladder", 3), Table(
            ["rung", "episodes", "solved", "rate [95% Wilson CI, steps as clusters]", "first quarter of steps", "last quarter of steps"], [
                [f"rung {level}", r["played"], r["solved"], f"{pct(r['rate'])} [{pct(r['ci'][0])}, {pct(r['ci'][1])}]",
                 share(r["first"]), share(r["last"])] for level, r in ladder.items()])]
    blocks += [Heading("Val gates (checkpoint choice)"), Table(
        ["checkpoint", "step", "val pass@1 [95% CI]", "tampered", "verdict-refused"], [
            [g.get("checkpoint"), g.get("step"), _ci(g.get("pass_at_1")),
             (g.get("termination_reasons") or {}).get("tampered", 0), g.get("refused", "-")] for g in gates])]
    return blocks


def heldout_blocks(config: ExperimentConfig, out: Path) -> list[Block]:
    """The held-out table, pass@1 by rung and by temperature, and the paired comparisons."""
    summary = _load(out / "eval-summary.json")
    kl = _load(out / "kl.json").get("arms", {})
    validity = _load(out / "validity.json")
    outcomes = read_outcomes(out / "grpo")
    arms = summary.get("arms", {})
    no_signal = bool(outcomes) and not spread_steps(outcomes)["on_policy"]

    def label(arm: str) -> str:  # a zero-signal GRPO arm says so wherever it is named
        return f"{arm} (no on-policy reward spread: imitation only)" if no_signal and arm.startswith("grpo") else arm

    ks = [f"pass@{k}" for k in config.eval.k if k > 1]
    blocks: list[Block] = [Heading("Held-out test split"), Paragraph(
        f"Model arms sample at T = {config.eval.temperature:g} ({plural(config.eval.runs, 'run')} a task)."), Table(
        ["arm", "pass@1 [95% CI]", *ks, "episodes", "tampered", "verdict-refused", "valid tool calls",
         "wrong-site fixation", "KL to the oracle (nats/token) [95% CI]"], [
            [label(arm), _ci(block.get("pass@1")), *(_ci(block.get(k)) for k in ks), *hacking_cells(block),
             pct((validity.get(arm) or {}).get("rate")), _ci((block.get("wrong_site") or {}).get("rate")),
             kl_cell(kl.get(arm))] for arm, block in arms.items()])]
    if not any(block.get("wrong_site") for block in arms.values()):
        blocks.append(Bullets(["Wrong-site fixation: no held-out task declares a wrong site (the regression tasks "
                               "of the built-in suite do; add a suite to [tasks] to measure it)."]))
    rungs = by_rung(out)
    levels = sorted({level for per in rungs.values() for level in per})
    if levels:
        blocks += [Heading("Held-out pass@1 by rung of the task ladder"),
                   _held_out_table(list(arms), rungs, levels, [f"rung {level}" for level in levels])]
    sets = by_task_set(out, config.split.test_only)
    names = sorted({name for per in sets.values() for name in per})
    if names:
        blocks += [Heading("Held-out pass@1 by task set"), Paragraph(
            "Each family and suite of `[tasks]` apart, with the rungs its held-out tasks sit on; a set held out whole "
            "(`[split] test_only`) had no task in train or val, so its score is what learning on the other sets "
            "carried over."), _held_out_table(list(arms), sets, names, names)]
    return [*blocks, *temperature_blocks(config, out), Heading("Paired comparisons (held-out pass@1, per task)"),
            *matched_blocks(out), Table(["a - b", "difference [95% CI]", "tasks"], [
                [f"{label(a)} - {label(b)}", cell, n] for a, b, cell, n in _pairs(summary, COMPARISONS)])]


def _held_out_table(arms: list[str], table: Mapping[str, Mapping[Column, HeldOutCell]], columns: list[Column],
                    head: list[str]) -> Table:
    """Held-out pass@1 of each arm (in the summary's order, others after) on each column's tasks."""
    order = sorted(table.items(), key=lambda item: arms.index(item[0]) if item[0] in arms else len(arms))
    return Table(["arm", *head], [
        [arm, *(f"{_ci(per[c])} ({plural(per[c]['tasks'], 'task')})" if c in per else "-" for c in columns)]
        for arm, per in order])


def stop_at_peak_blocks(out: Path) -> list[Block]:
    """The chosen GRPO checkpoint's val score beside its held-out score."""
    run = _run(out)
    gates = read_gates(out / "grpo" / "gates.jsonl")
    arms = _load(out / "eval-summary.json").get("arms", {})
    chosen = run.get("chosen") if run else None
    gate = next((g for g in gates if g.get("checkpoint") == chosen), None)
    held = (arms.get("grpo") or {}).get("pass@1", {})
    if not (gate and held):
        return [Heading("Stop at peak"), Bullets(["No gated checkpoint or no held-out GRPO score yet."])]
    val = gate["pass_at_1"]["mean"]
    return [Heading("Stop at peak"), Bullets([
        f"Chosen checkpoint `{chosen}` (best val pass@1 of {len(gates)} gated): val {pct(val)}, held-out test "
        f"{pct(held.get('mean'))}; choosing on val inflated its score by {pct0(val - held.get('mean', 0.0))} "
        "(val minus test; the test split never took part in the choice)."])]
