"""Behaviour comparison: the same small fixed-seed pipeline under an older revision and the working tree.

``git worktree`` of ``--against`` (default 0189da8, the last commit before train/ was laid out as
sub-packages) goes into a temporary folder; each tree then runs the same commands with the same venv
python (``PYTHONPATH=<tree>``, checked: ``pdbgym.__file__`` must lie in that tree), each in its own scratch
folder with its own ``PDBGYM_HOME`` (so its adapter store, selection ledger and de-quantized embedded model
are its own, never the user's), on CPU, one torch thread. The pipeline, every episode setting passed as a
flag so that a changed default cannot apply (a flag a tree lacks is left out for that tree and named in
the table's notes, its default then applies):

1. ``cache build`` of the scripted oracle on 2 built-in tasks (token ids, log-probs, rewards); the old tree's
   cache is then copied to both scratch folders (``oracle-shared``) and the stages below read that one, as
   the oracle's observations hold its episode's random workspace name (so its ids differ run to run, in
   either tree) and training on them would differ for that reason alone;
2. ``cache build`` of the embedded SmolLM2-135M on 1 task, turn budget 2, 16 tokens a turn, sampled (T 0.7);
3. ``eval`` of the embedded model on the 2 tasks, 1 run, seed 0, sampled;
4. ``train corpus`` of the oracle cache, then ``train sft --base embedded`` for 2 steps (metrics.jsonl,
   adapter weights, the held-out choice);
5. ``train grpo`` on embedded: 1 step, group 2, 1 task, fixed turn budget 2, the behaviour-cloning anchor on
   the oracle corpus cut to 1024 ids (so the step moves the delta even when every reward is 0; the anchor
   cut stays 4096, the old tree's fixed value): steps.jsonl,
   the delta's weights;
6. ``train dagger``: 1 iteration, 1 student run, embedded teacher, the oracle cache as KL teacher cache.

A sampled stage (T > 0) that differs is played again greedy (T 0; GRPO near-greedy, T 1e-3, as TRL divides
logits by T). The named change of the consolidation is the per-episode seed: ``run``/``cache build``/DAgger
seeded episodes ``seed + 1000*task_index + run`` and now take ``pdbgym.seeds.episode_seed`` (keyed by task id
and run), and GRPO's episodes, unseeded before, now draw from that function too. A sampled difference is
reported as "differs by the named seed change" only when its greedy twin is equal in every compared value;
anything else is a difference.

Compared per stage, files matched by their path relative to the stage's output folder: cache records
(``.pt``: prompt and model ids, masks, rewards, termination exactly; per-token log-probs within 1e-5;
observation ids as text with workspace names, object addresses and pytest timings masked, as those change
from run to run);
JSON / JSONL outputs (``episodes.jsonl``, ``metrics.jsonl``, ``steps.jsonl``, ``iterations.json``,
``corpus.json``, summaries; floats within 1e-5 relative, timings, paths and versions ignored, fields only
one tree writes listed as notes); ``*.safetensors`` (max abs difference <= 1e-5). A file one tree wrote and
the other did not is a note, and a difference when it is one the stage must write.

  python bench/behaviour.py                  # against 0189da8
  python bench/behaviour.py --against HEAD   # the uncommitted changes alone
  python bench/behaviour.py --keep --json behaviour.json

Prints the wall and CPU seconds of every stage in each tree (the trees run side by side), one table
(command | stage | same / differs, with the first differing values) and a verdict line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_AGAINST = "0189da8"
TASKS = ("calc-lexer-hang", "jobqueue-expired-jobs")
FLOAT_TOL = 1e-5
# Keys whose values are timings, places or provenance, not behaviour.
VOLATILE_KEY = re.compile(
    r"(time|duration|wall|seconds|per_second|runtime|elapsed|date|created|started|finished|_at$|_s$|"
    r"path|dir$|folder|file$|host|version|pid$|^out$|transcripts|^store_root|^ledger|url$)", re.IGNORECASE)
# What a model episode is capped at in every stage (small on purpose: 2 shared CPU cores).
EPISODE = {"turn_budget": "2", "max_new_tokens": "16", "max_context_tokens": "4096"}
SAMPLED_T = "0.7"


# ---------------------------------------------------------------------------------------------- trees


@dataclass
class Tree:
    """One side of the comparison: a source tree, its scratch folder and the environment it runs in."""

    label: str
    root: Path
    scratch: Path
    help_cache: dict[str, set[str]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PDBGYM_", "PYTHONPATH"))}
        env.update(PYTHONPATH=str(self.root), PDBGYM_HOME=str(self.scratch / "home"), OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0", COLUMNS="400",
                   TERM="dumb", NO_COLOR="1")
        return env

    def flags(self, command: tuple[str, ...]) -> set[str]:
        """The option names ``pdbgym COMMAND --help`` lists in this tree."""
        key = " ".join(command)
        if key not in self.help_cache:
            out = subprocess.run([sys.executable, "-m", "pdbgym.cli", *command, "--help"], env=self.env,
                                 cwd=self.scratch, capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                raise SystemExit(f"[{self.label}] 'pdbgym {key} --help' failed:\n{out.stderr[-2000:]}")
            self.help_cache[key] = set(re.findall(r"--[a-z][a-z0-9-]*", out.stdout))
        return self.help_cache[key]


def make_tree(label: str, root: Path, scratch: Path) -> Tree:
    """Scratch folder with the tree's own copies of the built-in tasks; refuses a tree that is not imported."""
    scratch.mkdir(parents=True)
    tree = Tree(label, root, scratch)
    for count in (1, 2):
        for name in TASKS[:count]:
            shutil.copytree(root / "pdbgym" / "tasks" / "builtin" / name, scratch / f"tasks{count}" / name)
    out = subprocess.run([sys.executable, "-c", "import pdbgym; print(pdbgym.__file__)"], env=tree.env,
                         cwd=scratch, capture_output=True, text=True, timeout=120)
    imported = Path(out.stdout.strip() or "?").resolve()
    if out.returncode != 0 or not imported.is_relative_to(root.resolve()):
        raise SystemExit(f"[{label}] PYTHONPATH={root} imports pdbgym from {imported}, not from the tree "
                         f"({out.stderr.strip()[-500:]}); run this script with the project's venv python")
    return tree


# ---------------------------------------------------------------------------------------------- stages


@dataclass
class Stage:
    """One command run in both trees; ``args`` lists (flag, value) pairs, value None for a switch."""

    name: str
    command: tuple[str, ...]
    args: list[tuple[str, str | None]]
    out: str  # output folder (relative to the scratch folder) whose files are compared
    required: tuple[str, ...] = ()  # file names (globs) the stage must write
    greedy_twin: Stage | None = None  # played when this (sampled) stage differs
    needs: tuple[str, ...] = ()  # stages that must have succeeded first
    # After success, the old tree's output folder is copied to this name in both scratch folders, so that the
    # stages after it read the same input in both trees (the oracle's observations hold a random workspace name).
    share_as: str | None = None


def model_episode(temperature: str) -> list[tuple[str, str | None]]:
    return [("--turn-budget", EPISODE["turn_budget"]), ("--max-new-tokens", EPISODE["max_new_tokens"]),
            ("--max-context-tokens", EPISODE["max_context_tokens"]), ("--temperature", temperature)]


def cache_embedded(temperature: str, tag: str) -> Stage:
    return Stage(f"cache-embedded-{tag}", ("cache", "build"),
                 [("--policy", "embedded"), ("--tasks", "tasks1"), ("--out", f"cache-embedded-{tag}"),
                  ("--runs", "1"), *model_episode(temperature), ("--top-p", "1.0"), ("--seed", "0"),
                  ("--workers", "1"), ("--command-timeout-s", "60"), ("--device", "cpu")],
                 f"cache-embedded-{tag}", ("manifest.json", "*.pt"))


def evaluation(temperature: str, tag: str) -> Stage:
    return Stage(f"eval-{tag}", ("eval",),
                 [("--tasks", "tasks2"), ("--arm", "base=embedded"), ("--runs", "1"), *model_episode(temperature),
                  ("--seed", "0"), ("--workers", "1"), ("--out", f"eval-{tag}"), ("--json", f"eval-{tag}/summary.json"),
                  ("--no-force", None)],
                 f"eval-{tag}", ("episodes.jsonl", "*.pt"))


def grpo(temperature: str, tag: str) -> Stage:
    return Stage(f"grpo-{tag}", ("train", "grpo"),
                 [("--policy", "embedded"), ("--tasks", "tasks1"), ("--out", f"grpo-{tag}"), ("--group", "2"),
                  ("--tasks-per-step", "1"), ("--steps", "1"), ("--seed", "0"), ("--temperature", temperature),
                  ("--max-new-tokens", EPISODE["max_new_tokens"]), ("--max-context-tokens", EPISODE["max_context_tokens"]),
                  ("--curriculum", "fixed"), ("--budget-start", EPISODE["turn_budget"]),
                  ("--budget-end", EPISODE["turn_budget"]), ("--kl-mode", "fixed"), ("--beta", "0.04"),
                  ("--lr", "1e-4"), ("--rank", "4"), ("--alpha", "8"), ("--format-weight", "0.0"),
                  ("--loss-type", "dapo"), ("--num-iterations", "1"), ("--save-steps", "1"),
                  ("--anchor-data", "corpus-short"), ("--anchor-weight", "0.1"), ("--anchor-decay-steps", "0"),
                  ("--anchor-batch", "1"), ("--anchor-max-tokens", "4096"),
                  ("--command-timeout-s", "60"), ("--device", "cpu"), ("--no-tensorboard", None),
                  ("--keep-episodes", None)],
                 f"grpo-{tag}", ("steps.jsonl", "adapter_model.safetensors"), needs=("corpus-short",))


DAGGER_SFT = {"max_steps": 1, "rank": 4, "lora_alpha": 8, "effective_batch": 1, "micro_batch": 1,
              "max_length": 1024, "max_tokens_per_example": 1024, "save_steps": 1, "eval_steps": 1, "lr": 1e-3}


def dagger(temperature: str, tag: str) -> Stage:
    return Stage(f"dagger-{tag}", ("train", "dagger"),
                 [("--student", "embedded"), ("--teacher", "embedded"), ("--tasks", "tasks1"), ("--out", f"dagger-{tag}"),
                  ("--iterations", "1"), ("--runs", "1"), ("--teacher-cache", "oracle-shared"), ("--eval-runs", "1"),
                  *model_episode(temperature), ("--teacher-temperature", "0.0"), ("--device", "cpu"), ("--seed", "0"),
                  ("--sft", json.dumps(DAGGER_SFT))],
                 f"dagger-{tag}", ("iterations.json", "*.pt"), needs=("cache-oracle",))


def pipeline() -> list[Stage]:
    embedded_sampled = cache_embedded(SAMPLED_T, "sampled")
    embedded_sampled.greedy_twin = cache_embedded("0.0", "greedy")
    eval_sampled = evaluation(SAMPLED_T, "sampled")
    eval_sampled.greedy_twin = evaluation("0.0", "greedy")
    grpo_sampled = grpo("1.0", "sampled")
    grpo_sampled.greedy_twin = grpo("0.001", "greedy")
    dagger_sampled = dagger(SAMPLED_T, "sampled")
    dagger_sampled.greedy_twin = dagger("0.0", "greedy")
    return [
        Stage("cache-oracle", ("cache", "build"),
              [("--policy", "scripted"), ("--tasks", "tasks2"), ("--out", "cache-oracle"), ("--runs", "1"),
               ("--turn-budget", "30"), ("--max-new-tokens", "512"), ("--max-context-tokens", "32768"),
               ("--temperature", "0.0"), ("--top-p", "1.0"), ("--seed", "0"), ("--workers", "1"),
               ("--command-timeout-s", "60"), ("--device", "cpu")],
              "cache-oracle", ("manifest.json", "*.pt"), share_as="oracle-shared"),
        embedded_sampled,
        eval_sampled,
        Stage("corpus", ("train", "corpus"),
              [("--cache", "oracle-shared"), ("--out", "corpus"), ("--solved-only", None), ("--max-length", "65536"),
               ("--overlength", "drop"), ("--dedupe", None), ("--no-keep-tampered", None)],
              "corpus", ("corpus.json", "examples.jsonl"), needs=("cache-oracle",)),
        Stage("corpus-short", ("train", "corpus"),
              [("--cache", "oracle-shared"), ("--out", "corpus-short"), ("--solved-only", None),
               ("--max-length", "1024"), ("--overlength", "truncate"), ("--dedupe", None), ("--no-keep-tampered", None)],
              "corpus-short", ("corpus.json", "examples.jsonl"), needs=("cache-oracle",)),
        Stage("sft", ("train", "sft"),
              [("--base", "embedded"), ("--data", "corpus"), ("--out", "sft"), ("--device", "cpu"), ("--seed", "0"),
               ("--max-steps", "2"), ("--epochs", "2"), ("--effective-batch", "1"), ("--micro-batch", "1"),
               ("--rank", "4"), ("--lora-alpha", "8"), ("--lr", "1e-3"), ("--max-length", "1024"),
               ("--max-tokens-per-example", "1024"), ("--val-fraction", "0.5"), ("--eval-steps", "1"),
               ("--save-steps", "1"), ("--target-modules", "q_proj,v_proj"), ("--no-packing", None),
               ("--no-gradient-checkpointing", None), ("--no-report", None), ("--no-tensorboard", None),
               ("--register", None)],
              "sft", ("metrics.jsonl", "adapter_model.safetensors"), needs=("corpus",)),
        grpo_sampled,
        dagger_sampled,
    ]


@dataclass
class Run:
    rc: int
    wall_s: float
    cpu_s: float
    log: Path
    missing_flags: list[str]


def run_stage(tree: Tree, stage: Stage) -> Run:
    flags = tree.flags(stage.command)
    argv, missing = [], []
    for flag, value in stage.args:
        if flag not in flags:
            missing.append(flag)
            continue
        argv += [flag] if value is None else [flag, value]
    log = tree.scratch / "logs" / f"{stage.name}.log"
    log.parent.mkdir(exist_ok=True)
    start = time.perf_counter()
    with log.open("w") as sink:
        sink.write("$ pdbgym " + " ".join(stage.command + tuple(argv)) + "\n")
        sink.flush()
        proc = subprocess.Popen([sys.executable, "-m", "pdbgym.cli", *stage.command, *argv], env=tree.env,
                                cwd=tree.scratch, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(proc.returncode, time.perf_counter() - start, usage.ru_utime + usage.ru_stime, log, missing)


# ---------------------------------------------------------------------------------------------- comparing


@dataclass
class Diff:
    differences: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: int = 0  # values compared


def _normalize(value: Any, trees: tuple[Tree, Tree], side: int) -> Any:
    if isinstance(value, str):
        for root in (trees[side].scratch, trees[side].root):
            value = value.replace(str(root), "<tree>")
        return value
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def deep_diff(a: Any, b: Any, where: str, diff: Diff, trees: tuple[Tree, Tree], tol: float = FLOAT_TOL) -> None:
    a, b = _normalize(a, trees, 0), _normalize(b, trees, 1)
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if VOLATILE_KEY.search(str(key)):
                continue
            if key not in a or key not in b:
                diff.notes.append(f"{where}.{key} only in {'new' if key in b else 'old'}")
                continue
            deep_diff(a[key], b[key], f"{where}.{key}", diff, trees, tol)
        return
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            diff.differences.append(f"{where}: length {len(a)} vs {len(b)}")
        if a and b and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in a[:50] + b[:50]):
            _numbers(a, b, where, diff, tol)
            return
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            deep_diff(x, y, f"{where}[{index}]", diff, trees, tol)
        return
    diff.compared += 1
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and _close(float(a), float(b), tol):
            return
    elif a == b:
        return
    diff.differences.append(f"{where}: {_short(a)} vs {_short(b)}")


def _close(x: float, y: float, tol: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return abs(x - y) <= tol * max(1.0, abs(x), abs(y))


def _numbers(a: list, b: list, where: str, diff: Diff, tol: float) -> None:
    exact = all(isinstance(x, int) for x in a[:50] + b[:50])
    diff.compared += min(len(a), len(b))
    bad = [i for i, (x, y) in enumerate(zip(a, b, strict=False))
           if (x != y if exact else not _close(float(x), float(y), tol))]
    if bad:
        first = bad[0]
        diff.differences.append(f"{where}: {len(bad)} of {min(len(a), len(b))} differ, first at [{first}]: "
                                f"{_short(a[first:first + 4])} vs {_short(b[first:first + 4])}")


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 90 else text[:87] + "..."


def _files(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}


def _compared_kind(name: str) -> str | None:
    if name.endswith(".pt"):
        return None if "checkpoint-" in name else "record"  # a checkpoint's .pt is optimizer/RNG state
    if name.endswith(".safetensors"):
        return "tensors"
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".json") and "transcripts" not in name and not name.startswith("episodes/"):
        return "json"
    return None


def _load(path: Path, kind: str) -> Any:
    if kind == "record":
        import torch
        return torch.load(path, weights_only=False, map_location="cpu")
    if kind == "tensors":
        from safetensors.torch import load_file
        return load_file(str(path))
    if kind == "jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def compare_stage(stage: Stage, trees: tuple[Tree, Tree]) -> Diff:
    diff = Diff()
    old, new = (_files(t.scratch / stage.out) for t in trees)
    for pattern in stage.required:
        for label, files in (("old", old), ("new", new)):
            if not any(Path(name).match(pattern) for name in files):
                diff.differences.append(f"{label} wrote no {pattern}")
    for name in sorted(set(old) | set(new)):
        kind = _compared_kind(name)
        if kind is None:
            continue
        if name not in old or name not in new:
            diff.notes.append(f"{name} only in {'new' if name in new else 'old'}")
            continue
        a, b = _load(old[name], kind), _load(new[name], kind)
        if kind == "tensors":
            _tensors(a, b, name, diff)
        elif kind == "record" and all(isinstance(x, dict) and "tokens" in x for x in (a if isinstance(a, list) else [a])):
            _records(a, b, name, diff, trees)
        elif kind == "record":
            diff.notes.append(f"{name}: not a rollout record, not compared")
        else:
            deep_diff(a, b, name, diff, trees)
    return diff


# A workspace is a fresh temporary folder per episode: its name shows in pdb's and pytest's output, so the
# observation ids of two runs differ there in either tree, as do object addresses in reprs and pytest's timings.
# Observations are compared as text without them.
# (named pdbgym-ws-PID.START-RANDOM wherever its parent folder is: a sandbox shows it under another root; on a
# fork server the copy is that folder's subfolder w, and its path counts as the workspace's whole)
WORKSPACE = re.compile(r"(?:/[^\s/:'\"]+)*/pdbgym-ws-[A-Za-z0-9._-]+(?:/w(?![^\s/:'\"]))?")
PYTEST_SECONDS = re.compile(r"\bin \d+\.\d+s\b")
ADDRESS = re.compile(r"\b0x[0-9a-f]{6,}\b")
RECORD_SEGMENTED = ("tokens", "loss_mask", "rollout_log_probs", "response_length")


def _tokenizer(trees: tuple[Tree, Tree]) -> Any:
    """A tokenizer to read observation ids with: the embedded model's, as a tree de-quantized it."""
    for tree in reversed(trees):
        for found in sorted((tree.scratch / "home").rglob("tokenizer.json")):
            from transformers import AutoTokenizer
            return AutoTokenizer.from_pretrained(str(found.parent))
    return None


def _segments(record: dict) -> list[tuple[int, list[int], list[float]]]:
    """(mask, ids, log-probs) runs: the prompt (mask 0), then the response split where loss_mask changes."""
    tokens, start = list(record["tokens"]), int(record["prompt_len"])
    mask, logprobs = list(record["loss_mask"]), list(record.get("rollout_log_probs") or [])
    runs = [(0, tokens[:start], [])]
    for index, (token, bit) in enumerate(zip(tokens[start:], mask, strict=False)):
        value = float(logprobs[index]) if index < len(logprobs) else 0.0
        if runs[-1][0] != bit or len(runs) == 1:
            runs.append((bit, [], []))
        runs[-1][1].append(token)
        runs[-1][2].append(value)
    return runs


def _plain(text: str) -> str:
    return ADDRESS.sub("0x<addr>", PYTEST_SECONDS.sub("in <t>s", WORKSPACE.sub("<ws>", text)))


def _records(a: Any, b: Any, where: str, diff: Diff, trees: tuple[Tree, Tree]) -> None:
    """Model ids and log-probs exactly (1e-5); observations as text without workspace names and timings."""
    a, b = (x if isinstance(x, list) else [x] for x in (a, b))
    if len(a) != len(b):
        diff.differences.append(f"{where}: {len(a)} vs {len(b)} records")
    tokenizer = None
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        here = f"{where}[{index}]" if len(a) > 1 else where
        deep_diff({k: v for k, v in x.items() if k not in RECORD_SEGMENTED},
                  {k: v for k, v in y.items() if k not in RECORD_SEGMENTED}, here, diff, trees)
        sx, sy = _segments(x), _segments(y)
        if [s[0] for s in sx] != [s[0] for s in sy]:
            diff.differences.append(f"{here}: {len(sx)} vs {len(sy)} model/observation segments")
        for number, ((mx, ix, lx), (_, iy, ly)) in enumerate(zip(sx, sy, strict=False)):
            seg = f"{here} segment {number} ({'model' if mx else 'observation'})"
            if mx:
                _numbers(ix, iy, f"{seg} ids", diff, 0.0)
                _numbers(lx, ly, f"{seg} log-probs", diff, FLOAT_TOL)
                if len(ix) != len(iy):
                    diff.differences.append(f"{seg}: {len(ix)} vs {len(iy)} ids")
                continue
            diff.compared += 1
            if ix == iy:
                continue
            tokenizer = tokenizer or _tokenizer(trees)
            if tokenizer is None:
                diff.differences.append(f"{seg}: ids differ (no tokenizer found to compare them as text)")
                continue
            tx, ty = (_plain(tokenizer.decode(ids)) for ids in (ix, iy))
            if tx != ty:
                at = next((i for i, (p, q) in enumerate(zip(tx, ty, strict=False)) if p != q), min(len(tx), len(ty)))
                diff.differences.append(f"{seg}: text differs at char {at}: {_short(tx[at:at + 40])} vs "
                                        f"{_short(ty[at:at + 40])}")
            elif "observation ids differ only by workspace names, object addresses or test timings" not in diff.notes:
                diff.notes.append("observation ids differ only by workspace names, object addresses or test timings")


def _tensors(a: dict, b: dict, where: str, diff: Diff) -> None:
    if set(a) != set(b):
        diff.differences.append(f"{where}: tensor names differ ({len(set(a) ^ set(b))} not in both)")
    worst, worst_name = 0.0, ""
    for name in sorted(set(a) & set(b)):
        if a[name].shape != b[name].shape:
            diff.differences.append(f"{where}:{name}: shape {tuple(a[name].shape)} vs {tuple(b[name].shape)}")
            continue
        gap = (a[name].float() - b[name].float()).abs().max().item() if a[name].numel() else 0.0
        diff.compared += a[name].numel()
        if gap > worst:
            worst, worst_name = gap, name
    if worst > FLOAT_TOL:
        diff.differences.append(f"{where}: max abs diff {worst:.3g} ({worst_name})")
    elif a:
        diff.notes.append(f"{where}: max abs diff {worst:.3g}")


# ---------------------------------------------------------------------------------------------- driving


@dataclass
class Row:
    stage: Stage
    runs: dict[str, Run]
    result: str  # same | differs | named | failed | skipped
    detail: str
    diff: Diff | None = None


def play(stage: Stage, trees: tuple[Tree, Tree]) -> dict[str, Run]:
    runs: dict[str, Run] = {}

    def one(tree: Tree) -> None:
        runs[tree.label] = run_stage(tree, stage)

    threads = [threading.Thread(target=one, args=(tree,)) for tree in trees]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for tree in trees:
        run = runs[tree.label]
        print(f"  [{tree.label}] {stage.name}: rc {run.rc}, {run.wall_s:.0f} s wall, {run.cpu_s:.0f} CPU-s"
              + (f" (flags it lacks: {' '.join(run.missing_flags)})" if run.missing_flags else ""), flush=True)
    return runs


def judge(stage: Stage, runs: dict[str, Run], trees: tuple[Tree, Tree]) -> Row:
    failed = [label for label, run in runs.items() if run.rc != 0]
    if failed:
        tails = "; ".join(f"{label}: {_tail(runs[label].log)}" for label in failed)
        return Row(stage, runs, "failed", f"exit != 0 in {', '.join(failed)} ({tails})")
    diff = compare_stage(stage, trees)
    missing = sorted({f for run in runs.values() for f in run.missing_flags})
    notes = ([f"flags absent in a tree, its default applied: {' '.join(missing)}"] if missing else []) + diff.notes
    if diff.differences:
        return Row(stage, runs, "differs", _list(diff.differences), diff)
    return Row(stage, runs, "same", f"{diff.compared} values equal" + (f"; notes: {_list(notes)}" if notes else ""), diff)


def _tail(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return " | ".join(lines[-2:])[-300:]


def _list(items: list[str], first: int = 4) -> str:
    return "; ".join(items[:first]) + (f"; ... {len(items) - first} more" if len(items) > first else "")


def drive(stages: list[Stage], trees: tuple[Tree, Tree]) -> Iterator[Row]:
    ok: set[str] = set()
    for stage in stages:
        if any(need not in ok for need in stage.needs):
            yield Row(stage, {}, "skipped", f"needs {', '.join(stage.needs)}")
            continue
        print(f"stage {stage.name}", flush=True)
        row = judge(stage, play(stage, trees), trees)
        if row.result != "failed":
            ok.add(stage.name)
            if stage.share_as:
                for tree in trees:
                    shutil.copytree(trees[0].scratch / stage.out, tree.scratch / stage.share_as)
        if row.result == "differs" and stage.greedy_twin is not None:
            twin = stage.greedy_twin
            print(f"stage {twin.name} (greedy twin of {stage.name}, which differs)", flush=True)
            twin_row = judge(twin, play(twin, trees), trees)
            if twin_row.result == "same":
                row.result = "named"
                row.detail = f"differs by the named seed change (greedy twin equal): {row.detail}"
            yield row
            yield twin_row
            continue
        yield row


def command_of(stage: Stage) -> str:
    return " ".join(stage.command)


def print_table(rows: list[Row]) -> str:
    words = {"same": "same", "named": "differs (named seed change)", "differs": "DIFFERS",
             "failed": "FAILED", "skipped": "skipped"}
    lines = ["| command | stage | old wall / CPU s | new wall / CPU s | result | detail |",
             "|---|---|---:|---:|---|---|"]
    for row in rows:
        times = [f"{row.runs[label].wall_s:.0f} / {row.runs[label].cpu_s:.0f}" if label in row.runs else ""
                 for label in ("old", "new")]
        detail = (row.detail if len(row.detail) <= 400 else row.detail[:397] + "...").replace("|", "\\|")
        lines.append(f"| {command_of(row.stage)} | {row.stage.name} | {times[0]} | {times[1]} | "
                     f"{words[row.result]} | {detail} |")
    return "\n".join(lines)


def verdict(rows: list[Row]) -> str:
    bad = [row.stage.name for row in rows if row.result in ("differs", "failed", "skipped")]
    named = [row.stage.name for row in rows if row.result == "named"]
    if bad:
        return f"VERDICT: behaviour differs beyond the named changes in {', '.join(bad)}"
    if named:
        return f"VERDICT: same behaviour, but for the named seed change in {', '.join(named)}"
    return "VERDICT: same behaviour in every stage"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", default=DEFAULT_AGAINST, help="revision to compare the working tree with")
    parser.add_argument("--stages", default="", help="comma-separated stage names to run (default: all); "
                        "a stage's prerequisites are added")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folders (the worktree is removed)")
    parser.add_argument("--json", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)

    stages = pipeline()
    if args.stages:
        wanted = set(args.stages.split(","))
        unknown = wanted - {s.name for s in stages}
        if unknown:
            raise SystemExit(f"unknown stage(s) {sorted(unknown)}; stages: {[s.name for s in stages]}")
        for stage in reversed(stages):  # a stage's needs come before it: one backward pass adds them all
            if stage.name in wanted:
                wanted |= set(stage.needs)
        stages = [s for s in stages if s.name in wanted]

    work = Path(tempfile.mkdtemp(prefix="pdbgym-behaviour-"))
    worktree = work / "tree-old"
    start = time.perf_counter()
    try:
        made = subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.against],
                              capture_output=True, text=True)
        if made.returncode != 0:
            raise SystemExit(f"git worktree add of {args.against} failed: {made.stderr.strip()}")
        rev = subprocess.run(["git", "-C", str(worktree), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        trees = (make_tree("old", worktree, work / "old"), make_tree("new", REPO, work / "new"))
        print(f"old: {args.against} ({rev}) in {worktree}; new: the working tree {REPO}; scratch {work}", flush=True)
        rows = list(drive(stages, trees))
        table = print_table(rows)
        total = time.perf_counter() - start
        cpu = sum(run.cpu_s for row in rows for run in row.runs.values())
        print()
        print(table)
        print(f"\ntotal {total:.0f} s wall, {cpu:.0f} CPU-s in the commands (both trees)")
        print(verdict(rows))
        if args.json:
            args.json.write_text(json.dumps({
                "against": args.against, "rev": rev, "wall_s": round(total, 1), "verdict": verdict(rows),
                "rows": [{"command": command_of(r.stage), "stage": r.stage.name, "result": r.result,
                          "detail": r.detail, "differences": r.diff.differences if r.diff else [],
                          "notes": r.diff.notes if r.diff else [],
                          "runs": {k: {"rc": v.rc, "wall_s": round(v.wall_s, 1), "cpu_s": round(v.cpu_s, 1),
                                       "missing_flags": v.missing_flags} for k, v in r.runs.items()}}
                         for r in rows]}, indent=1))
        return 0 if not any(r.result in ("differs", "failed", "skipped") for r in rows) else 1
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)],
                       capture_output=True, text=True)
        if args.keep:
            print(f"scratch kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
