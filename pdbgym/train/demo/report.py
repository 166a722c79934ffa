"""The demo's figures beyond the campaign summary, and its one report (HTML + Markdown).

- ``oracle_kl``: KL(oracle || arm) on a held-out cache of a deterministic teacher (``scripted``). Such a
  teacher puts probability 1 on each token it writes, so KL(teacher || arm) at a token is
  ``-log q_arm(token | context)`` exactly; the figure is the divergence library's ``kl_to_cache``: the mean
  over all the cache's scored (loss_mask 1) tokens pooled (nats/token), with a task-bootstrap 95% CI.
- ``tool_call_validity``: per arm, the share of model turns that parse as a tool call in the episode's
  tool-call format (``agent.toolcalls.parse_tool_call``, the loop's own parser), from the transcripts:
  pooled, and per episode with a 95% interval clustered by episode.
- ``write_demo_report``: ``OUT/demo_report.{html,md}``, opening with "What this run shows"
  (``conclusion.what_this_run_shows``), then the training curve, pass@k with CIs, the paired pass@1
  comparisons, the valid tool-call rate, the termination breakdown with each reason's meaning, KL per arm,
  what each arm is and where the time went.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pdbgym.agent.toolcalls import ToolCallError, parse_tool_call
from pdbgym.divergence.tocache import HEADLINE, kl_to_cache, open_teacher_cache
from pdbgym.evaluate import stats
from pdbgym.evaluate.divergence_arms import local_model_of
from pdbgym.evaluate.report import COMPARISON_HEAD, comparison_note, comparison_rows
from pdbgym.evaluate.results import ResultsStore
from pdbgym.fileio import write_json_atomic, write_text_atomic
from pdbgym.reportkit import (
    NATS,
    Html,
    bounds,
    escape,
    fmt,
    html_list,
    html_table,
    img,
    md_bullets,
    md_table,
    page,
    pct,
    pct_interval,
)
from pdbgym.termination import TERMINATION_MEANINGS, TERMINATION_REASONS
from pdbgym.train.demo.conclusion import what_this_run_shows
from pdbgym.train.report import plot_metrics
from pdbgym.train.sft.resume import METRICS_FILE

ORACLE_LABEL = "scripted oracle: replays the task's reference fix (not a model; an upper bound)"
KL_NOTE = ("KL(oracle || arm): the scripted oracle is deterministic (probability 1 on each token it wrote), so "
           "the KL at each of its tokens is exactly the arm's -log q(token | context); shown is the mean over "
           "all the oracle's held-out tokens pooled, in nats per token (the divergence library's "
           "kl_teacher_student/k1/token_mean), with a task-bootstrap 95% CI. Lower is closer to the teacher.")


def oracle_kl(cache: Path, arms: Mapping[str, str], out_file: Path, max_ids: int = 0,
              device: str = "cpu") -> dict[str, Any]:
    """KL(oracle || arm) per arm with a local model, by the divergence library's ``kl_to_cache`` (one
    aggregation everywhere: the token mean over the cache's scored tokens with a task-bootstrap 95% CI;
    k1, exact for the deterministic oracle); kept in ``out_file``.

    ``max_ids`` (0: whole episodes) scores only the first ids of each episode: the prompt and the first
    tool calls, the window the demo's SFT trains on (scoring cost grows with the ids scored). Models are
    scored in float32 on ``device``.

    An arm already scored with the same model path, window and metric is reused. Arms without local
    weights (scripted, a URL, a grammar-constrained arm) get ``{"available": False, "reason"}``.
    """
    target = open_teacher_cache(cache, max_ids=max_ids)
    old = json.loads(out_file.read_text()) if out_file.is_file() else {}
    same = old.get("max_ids") == max_ids and old.get("metric") == target.metric
    done = old.get("arms", {}) if same else {}
    result: dict[str, Any] = {}
    for arm, model in arms.items():
        path, reason = local_model_of(model)
        if path is None:
            result[arm] = {"available": False, "reason": reason}
            continue
        if done.get(arm, {}).get("path") == path:
            result[arm] = done[arm]
            continue
        kl = kl_to_cache(path, target, name=arm, device=device, dtype="float32")
        result[arm] = {"available": True, "path": path, "kl_per_token": kl.value, "ci_low": kl.ci_low,
                       "ci_high": kl.ci_high, "tasks": kl.n_tasks, "tokens": kl.n_tokens}
    data = {"cache": str(target.folder), "records": len(target.records), "max_ids": max_ids, "metric": target.metric,
            "arms": result, "meaning": f"KL(teacher || arm) in nats per teacher token: {target.metric}, the "
                                       "divergence library's token mean (for the oracle: the arm's mean -log q of "
                                       "the oracle's tokens)"}
    write_json_atomic(out_file, data, indent=1)
    return data


def tool_call_validity(campaign: Path, arms: Mapping[str, str], confidence: float = 0.95) -> dict[str, dict[str, Any]]:
    """Per arm, over the campaign's transcripts: ``turns``, ``valid``, ``rate`` (pooled valid / turns),
    ``episodes``, ``episodes_with_valid``, ``longest_repeat`` (the most times one valid call was sent in a row
    in an episode), ``episode_rate`` and ``per_task_rate``.

    Turns of one episode are not independent (a model that found one call tends to send it again), so the
    interval is clustered by episode: ``episode_rate`` is ``evaluate.stats.estimate_mean`` of the per-episode
    valid shares (each episode weighs one; bootstrap over episodes, Wilson-bounded at 0% and 100%, its
    effective size capped by the turns), None when no episode had a turn. ``per_task_rate``: task -> mean of
    its episodes' shares, for comparisons paired by task.
    """
    tallies: dict[str, Counter[str]] = {arm: Counter() for arm in arms}
    shares: dict[str, list[tuple[str, float]]] = {arm: [] for arm in arms}
    for row in ResultsStore(campaign).rows():
        transcript = json.loads((Path(campaign) / row.transcript).read_text())
        valid = turns = repeat = longest = 0
        last = None
        for message in transcript.get("messages", []):
            if message.get("role") != "assistant":
                continue
            turns += 1
            try:
                action = parse_tool_call(str(message.get("content") or ""), transcript.get("tool_format") or "text")
            except ToolCallError:
                last = None
                continue
            valid += 1
            call = (action.tool, json.dumps(action.args, sort_keys=True, default=str))
            repeat = repeat + 1 if call == last else 1
            last, longest = call, max(longest, repeat)
        tally = tallies.setdefault(row.arm, Counter())
        tally.update(turns=turns, valid=valid, episodes=1, episodes_with_valid=int(valid > 0))
        tally["longest_repeat"] = max(tally["longest_repeat"], longest)
        if turns:
            shares.setdefault(row.arm, []).append((row.instance_id, valid / turns))
    result: dict[str, dict[str, Any]] = {}
    for arm, tally in tallies.items():
        rates = np.array([share for _, share in shares.get(arm, [])])
        by_task: dict[str, list[float]] = {}
        for task, share in shares.get(arm, []):
            by_task.setdefault(task, []).append(share)
        result[arm] = {"turns": 0, "valid": 0, "episodes": 0, "episodes_with_valid": 0, "longest_repeat": 0,
                       **dict(tally), "rate": tally["valid"] / tally["turns"] if tally["turns"] else None,
                       "episode_rate": stats.estimate_mean(rates, confidence, max_n=tally["turns"]).to_dict()
                       if rates.size else None,
                       "per_task_rate": {task: float(np.mean(v)) for task, v in sorted(by_task.items())}}
    return result


def arm_meaning(name: str, model: str) -> str:
    """What an arm of the demo is, in words (by its role: base, sft, oracle, base-constrained)."""
    if model == "scripted":
        return ORACLE_LABEL
    if model.startswith("constrained:"):
        return "the base model with its tool calls forced by a grammar built from the tool schemas (xgrammar)"
    if name == "sft":
        return f"the base plus the demo's LoRA SFT adapter, merged into one folder ({model})"
    if model == "embedded":
        return "SmolLM2-135M-Instruct as shipped (the embedded GGUF, de-quantized), free-form tool calls"
    return f"the base model as given ({model}), free-form tool calls"


def _tables(arms: Mapping[str, str], summary: dict[str, Any], validity: dict[str, dict[str, Any]],
            kl: dict[str, Any] | None) -> dict[str, list[list[str]]]:
    """Section -> rows (the first row is the header)."""
    results = summary.get("arm_results", {})
    ks = sorted({k for r in results.values() for k in r if k.startswith("pass@")})
    tables: dict[str, list[list[str]]] = {"What each arm is": [["arm", "what it is"]]}
    tables["What each arm is"] += [[a, arm_meaning(a, m)] for a, m in arms.items()]
    rows = [["arm", "episodes", "solved"] + [f"{k} % [95% CI]" for k in ks]]
    for arm in arms:
        r = results.get(arm, {})
        cells = [f"{pct_interval(r[k])} ({r[k].get('ci_method', '')})" if k in r else "-" for k in ks]
        rows.append([arm, str(r.get("episodes", 0)), str(r.get("solved", 0))] + cells)
    tables["Pass@k on the held-out tasks"] = rows
    if summary.get("comparisons"):
        tables["Paired comparisons (pass@1, A - B)"] = [COMPARISON_HEAD, *comparison_rows(summary)]
    rows = [["arm", "model turns", "valid tool calls", "pooled rate", "per-episode rate % [95% CI, by episode]",
             "episodes with >= 1 valid call", "one call repeated, most in a row"]]
    rows += [[a, str(v["turns"]), str(v["valid"]), pct(v["rate"]),
              pct_interval(v["episode_rate"]) if v["episode_rate"] else fmt(None),
              f"{v['episodes_with_valid']} of {v['episodes']}", str(v["longest_repeat"])]
             for a, v in validity.items()]
    tables["Valid tool-call rate"] = rows
    reasons = [r for r in TERMINATION_REASONS if any(results.get(a, {}).get("termination_reasons", {}).get(r)
                                                     for a in arms)] or list(TERMINATION_REASONS[:1])
    rows = [["reason", "what it means"] + list(arms)]
    rows += [[r, TERMINATION_MEANINGS[r]] + [str(results.get(a, {}).get("termination_reasons", {}).get(r, 0))
                                            for a in arms] for r in reasons]
    if any(results.get(a, {}).get("refused") for a in arms):  # no termination reason: counted beside them
        rows.append(["verdict-refused", "grading passed nothing from a run that ended abnormally (killed, no pytest "
                     "closing line, ...); not tampered"] + [str(results.get(a, {}).get("refused", 0)) for a in arms])
    tables["How episodes ended"] = rows
    tables["KL to the teacher on the held-out tasks"] = _kl_rows(arms, summary, kl)
    return tables


def _kl_rows(arms: Mapping[str, str], summary: dict[str, Any], kl: dict[str, Any] | None) -> list[list[str]]:
    rows = [["arm", "KL (nats/token)", "95% CI", "note"]]
    if kl is not None:  # a scripted teacher: KL(oracle || arm) computed by oracle_kl
        window = f" in the first {kl['max_ids']} ids of each episode" if kl.get("max_ids") else ""
        for arm in arms:
            e = kl["arms"].get(arm, {})
            rows.append([arm, fmt(e["kl_per_token"], NATS), bounds(e["ci_low"], e["ci_high"], NATS),
                         f"{e['tasks']} tasks, {e['tokens']} oracle tokens" + window] if e.get("available")
                        else [arm, fmt(None), bounds(None, None), e.get("reason", "")])
        return rows

    for arm, e in ((summary.get("divergence") or {}).get("arms") or {}).items():
        m = (e.get("metrics") or {}).get(HEADLINE, {})
        rows.append([arm, fmt(m["value"], NATS), bounds(m.get("ci_low"), m.get("ci_high"), NATS), HEADLINE]
                    if e.get("available") and m.get("value") is not None
                    else [arm, fmt(None), bounds(None, None), e.get("reason", "")])
    return rows


def _facts(config: Any, record: dict[str, Any], corpus: dict[str, Any], caches: dict[str, Any],
           kl: dict[str, Any] | None, phases: dict[str, dict[str, Any]]) -> list[list[str]]:
    teacher = ORACLE_LABEL if config.teacher == "scripted" else config.teacher
    recipe = record.get("recipe", {})
    held_done = caches["test"].get("episodes_skipped_already_done", 0)
    rows = [["what", "value"], ["teacher", teacher],
            ["teacher caches", f"train: {corpus.get('records_read')} episodes, {corpus.get('examples_kept')} solved "
                               f"(kept for SFT); held-out: {caches['test'].get('episodes_run', 0) + held_done} episodes "
                               "(for KL only)"],
            ["SFT corpus", f"{corpus.get('examples_kept')} examples cut to the first {config.sft_tokens} ids "
                           f"({corpus.get('tokens')} ids, {corpus.get('loss_tokens')} loss ids)"],
            ["SFT", f"LoRA r{recipe.get('rank')} alpha {recipe.get('lora_alpha')} on {recipe.get('target_modules')}, "
                    f"lr {recipe.get('lr')}, {record.get('steps')} steps of 1 example, "
                    f"best val loss {fmt(record.get('best_val_loss'), NATS)} at step {record.get('best_step')} "
                    f"({len(record.get('corpus', {}).get('val_tasks', []))} val tasks of the train split)"],
            ["held-out episodes", f"{config.eval_runs} run(s) per task, turn budget {config.episode.turn_budget}, "
                                  f"{config.episode.max_new_tokens} tokens per turn, T={config.episode.temperature:g}"]]
    for name, p in phases.items():
        note = f" (reused; first run {p['first_seconds']} s)" if p.get("reused") and p.get("first_seconds") else ""
        rows.append([f"phase {name}", f"{p['seconds']} s wall, {p.get('cpu_seconds', '-')} s CPU{note}"])
    rows.append(["wall time, all phases", f"{sum(p['seconds'] for p in phases.values()):.0f} s"])
    if any(p.get("reused") for p in phases.values()):
        first = [p.get("first_seconds") for p in phases.values()]
        rows.append(["wall time of each phase's first run, summed",
                     f"{sum(first):.0f} s" if None not in first else "- (a phase ran before timings were kept)"])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    rows.append(["load average at the end (1, 5, 15 min)", f"{load} on {os.cpu_count()} CPUs"])
    return rows


def _curve(out: Path, history: list[dict[str, Any]]) -> Path | None:
    rows = [{k: v for k, v in row.items() if k in ("step", "loss", "eval_loss")} for row in history]
    figures = plot_metrics([r for r in rows if len(r) > 1], out)
    return figures.get("loss")


def write_demo_report(config: Any, out: Path, arms: Mapping[str, str], summary: dict[str, Any],
                      record: dict[str, Any], corpus: dict[str, Any], caches: dict[str, Any],
                      kl: dict[str, Any] | None, phases: dict[str, dict[str, Any]]) -> Path:
    """``OUT/demo_report.html`` and ``.md`` (plus ``demo_report.json``); returns the HTML path."""
    metrics = out / "sft" / METRICS_FILE
    history = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.is_file() else []
    curve = _curve(out, history)
    validity = tool_call_validity(out / "eval", arms)
    tables = {"The run": _facts(config, record, corpus, caches, kl, phases), **_tables(arms, summary, validity, kl)}
    conclusion = what_this_run_shows(arms, summary, validity, kl)
    title = "pdbgym demo: teacher cache -> SFT of SmolLM2-135M -> held-out evaluation"
    notes = [f"Held-out tasks: {summary.get('tasks', 0)} (the split's test tasks; none is in the SFT corpus).",
             "Valid tool-call rate: the share of the arm's turns that the episode loop's own parser "
             "(agent.toolcalls.parse_tool_call) reads as one tool call; three malformed turns in a row end an "
             "episode as 'other'. Turns of one episode are not independent (a model repeats a call it found), so "
             "the interval is clustered by episode: the mean of the per-episode shares, each episode weighing "
             "one, with the same bootstrap-and-Wilson interval as pass@k (episodes in place of tasks).",
             KL_NOTE if kl is not None else "KL: the divergence library's estimator named in the note column, "
             "on the held-out teacher cache (eval --teacher-cache).",
             *_comparison_notes(summary),
             "The full evaluation report, with per-task results: eval/report.html; "
             "the training report: sft/training_report.html."]
    write_json_atomic(out / "demo_report.json", {"title": title, "conclusion": conclusion, "tables": tables,
                                                 "notes": notes, "validity": validity, "kl": kl, "history": history},
                      indent=1)
    write_text_atomic(out / "demo_report.md", _markdown(title, conclusion, tables, notes, curve))
    page = out / "demo_report.html"
    write_text_atomic(page, _html(title, conclusion, tables, notes, curve))
    return page


def _comparison_notes(summary: dict[str, Any]) -> list[str]:
    """How the paired-comparison table is computed, which of its rows fell back to the conservative sd
    (one note for all of them, not one per pair), and the summary's other warnings."""
    if not summary.get("comparisons"):
        return list(summary.get("warnings", []))
    fallback: dict[str, list[str]] = {}
    for c in summary["comparisons"]:
        if c.get("warning"):
            fallback.setdefault(c["warning"], []).append(f"{c['arm_a']} - {c['arm_b']}")
    said = {f"{pair}: {warning}" for warning, pairs in fallback.items() for pair in pairs}
    notes = [comparison_note(summary)]
    notes += [f"{', '.join(pairs)}: {warning}" for warning, pairs in fallback.items()]
    return notes + [w for w in summary.get("warnings", []) if w not in said]


def _markdown(title: str, conclusion: list[str], tables: dict[str, list[list[str]]], notes: list[str],
              curve: Path | None) -> str:
    lines = [f"# {title}", "", "## What this run shows", "", " ".join(conclusion), ""]
    for heading, rows in tables.items():
        lines += [f"## {heading}", "", *md_table(rows[0], rows[1:]), ""]
        if heading == "The run":
            lines += ["## Training curve", "", f"![SFT loss per step]({curve.name})" if curve else "(no steps logged)", ""]
    return "\n".join(lines + md_bullets(notes)) + "\n"


def _linked(text: str) -> Html:
    """A note, escaped, with the two sibling reports it names as links."""
    text = escape(text)
    for target in ("eval/report.html", "sft/training_report.html"):
        text = text.replace(target, f'<a href="{target}">{target}</a>')
    return Html(text)


STYLE = "img{max-width:36em}"


def _html(title: str, conclusion: list[str], tables: dict[str, list[list[str]]], notes: list[str],
          curve: Path | None) -> str:
    blocks = [f'<h2>What this run shows</h2><p id="conclusion">{escape(" ".join(conclusion))}</p>']
    for heading, rows in tables.items():
        blocks.append(f"<h2>{escape(heading)}</h2>" + html_table(rows[0], rows[1:], id=heading.split()[0].lower()))
        if heading == "The run":
            image = img(curve, "SFT loss per step", id="curve") if curve else "<p>(no steps logged)</p>"
            blocks.append(f"<h2>Training curve (loss per step, val loss)</h2>{image}")
    return page(title, "".join(blocks) + html_list([_linked(n) for n in notes]), STYLE)
