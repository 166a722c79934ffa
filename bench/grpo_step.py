"""A whole GRPO step (rollouts and update) through ``pdbgym train grpo``, this tree against ``--against REV``.

Each tree runs the same command in a subprocess: ``--steps`` optimizer steps of ``--tasks-per-step``
groups of ``--group`` episodes on generated ``ladder0`` tasks, turn budget, tokens a turn and context as
the short experiment file has them (``experiments/smollm2-ladder-short.toml``: 10 turns, 96 new tokens,
4,096 tokens of context, T = 1, group 4, 8 tasks a step), DoRA delta, beta 0.04. The policy is
``--model`` (a model folder), or by default a model of SmolLM2-135M's shape with random weights and the
embedded tokenizer: its turns are not tool calls, so each episode ends after three malformed turns,
every turn sampling all its tokens: a fixed, heavy workload, the same in both trees (seeded), not a
trained model's episodes. No anchor or replay corpus (they need an SFT corpus).

Printed per tree: each step's seconds as TRL logs them (``step_time``: rollouts, scoring and the
backward; the optimizer step is timed apart where the tree records it, ``time/update/optimizer_s``), the
rollouts' seconds and the engine's split, the update's split where the tree records it
(``pdbgym.train.grpo.timing``), and the median step (the first step left out: it captures the CUDA graphs; so is
a ``--trace-step``, which the profiler slows).
With ``--against``: the ratio of the medians, baseline over this tree. ``--seeds 1 2 3`` runs each
configuration once per training seed (alternating which goes first) and prints each one's median step, their
median and range, and the speedup paired by seed with its range. ``--against-flags "..."`` makes the
baseline this tree with those flags instead (one setting against another in one run: ``--against-flags=--cudnn-attention --flags=``; flags
that start with a dash are given after ``=``).

    python bench/grpo_step.py --device cuda --steps 4 --against e5c61a5
    python bench/grpo_step.py --device cuda --steps 4 --against-flags=--cudnn-attention --flags=
    python bench/grpo_step.py --device cuda --steps 3 --trace-step 3 --trace-out /tmp/trace   # where step 3 goes
    python bench/grpo_step.py --device cpu --steps 2 --group 2 --tasks-per-step 1 --turn-budget 3 --max-new-tokens 16
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN = ("step_time", "memory/peak_gib", "time/rollout_s", "time/refresh_s", "engine/busy_s", "engine/prefill_s",
         "engine/prefills", "engine/step_s", "engine/draw_s", "engine/keep_s", "engine/admit_s", "engine/decode_steps",
         "engine/live_rows", "time/episode_env_s", "time/prepare_s", "time/update/reference_s",
         "time/update/policy_forward_s", "time/update/anchor_s", "time/update/backward_s",
         "time/update/optimizer_s", "time/update/other_scoring_s", "time/update_s")


def random_model(folder: Path, device: str) -> Path:
    """A SmolLM2-135M-shaped model with random weights and the embedded tokenizer, saved to ``folder``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    sys.path.insert(0, str(ROOT))
    from pdbgym.agent.backends.embedded import load_embedded_tokenizer

    tokenizer = load_embedded_tokenizer()
    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rope_theta=100000.0, tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16 if device.startswith("cuda") else torch.float32)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tasks(folder: Path, count: int, tree: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "pdbgym.cli", "tasks", "family", "ladder0", "--out", str(folder),
                           "--count", str(count)], cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tasks family failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
    return folder


def play(tree: Path, model: Path, task_folder: Path, out: Path, args: argparse.Namespace,
         flags: list[str], seed: int = 1) -> list[dict]:
    command = [sys.executable, "-m", "pdbgym.cli", "train", "grpo", "--policy", str(model), "--tasks", str(task_folder),
               "--out", str(out), "--steps", str(args.steps), "--group", str(args.group),
               "--tasks-per-step", str(args.tasks_per_step), "--curriculum", "fixed",
               "--budget-start", str(args.turn_budget), "--budget-end", str(args.turn_budget),
               "--max-new-tokens", str(args.max_new_tokens), "--max-context-tokens", str(args.max_context_tokens),
               "--temperature", "1.0", "--lr", "3e-4", "--save-steps", "1000", "--seed", str(seed),
               "--device", args.device, "--register-without-signal",
               # a store and ledger of this run's own: a second bench on the same machine registers its result anew
               "--store", str(out / "store"), "--ledger", str(out / "ledger.jsonl"), *flags]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"train grpo failed in {tree} (rc {done.returncode}):\n{done.stderr[-4000:]}")
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
    print(f"{tree.name}: {len(rows)} steps in {time.perf_counter() - started:.1f} s (process, loading included)")
    return rows


def summary(rows: list[dict], traced: int = 0) -> dict[str, float]:
    timed = [r for r in rows[1:] if r.get("step") != traced] or rows  # the first step captures the decode graphs
    return {key: round(statistics.median(float(r[key]) for r in timed), 3) for key in SHOWN
            if all(key in r for r in timed)}


def spread(values: list[float]) -> dict[str, float]:
    """The median of ``values`` (one a seed) and their range."""
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "n": len(values)} if values else {}


def checkout(rev: str, into: Path) -> Path:
    """The tree of ``rev``: a folder holding one already (a machine without the repository's history), or
    ``git archive`` of that revision."""
    if Path(rev).is_dir():
        return Path(rev).resolve()
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True).stdout
    into.mkdir(parents=True)
    archive_file = into.parent / f"{rev}.tar"
    archive_file.write_bytes(archive)
    with tarfile.open(archive_file) as tar:
        tar.extractall(into, filter="data")
    return into


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", type=Path, default=None, help="model folder (default: SmolLM2 shape, random weights)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--tasks-per-step", type=int, default=8)
    p.add_argument("--turn-budget", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--max-context-tokens", type=int, default=4096)
    p.add_argument("--against", default=None,
                   help="a git revision (or a folder holding its tree): the same steps with its code, and the ratio")
    p.add_argument("--against-flags", default=None,
                   help="the baseline is this tree run with these train grpo flags ('' for none), not --against's")
    p.add_argument("--flags", default="", help="more train grpo flags for this tree, e.g. --no-gradient-checkpointing")
    p.add_argument("--trace-step", type=int, default=0,
                   help="this tree's step N under torch.profiler (train grpo --trace-step), its trace kept in --trace-out")
    p.add_argument("--trace-out", type=Path, default=Path("grpo-step-trace"))
    p.add_argument("--seeds", type=int, nargs="+", default=[1],
                   help="one run of each configuration per training seed (their order alternates): each one's "
                        "median step, and the spread over seeds")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if args.against and args.against_flags is not None:
        p.error("--against (another tree) and --against-flags (this tree with other flags) name two baselines; "
                "pass one")
    with tempfile.TemporaryDirectory(prefix="pdbgym-grpo-step-") as tmp:
        work = Path(tmp)
        model = args.model or random_model(work / "model", args.device)
        task_folder = tasks(work / "tasks", args.tasks_per_step * max(1, args.steps), ROOT)
        trace = ["--trace-step", str(args.trace_step)] if args.trace_step else []
        runs = [("this tree", ROOT, args.flags.split())]  # (name, tree, its flags); the baseline first
        if args.against_flags is not None:
            runs.insert(0, (f"this tree with '{args.against_flags}'", ROOT, args.against_flags.split()))
        elif args.against:
            runs.insert(0, (args.against, checkout(args.against, work / "baseline"), []))
        results: dict[str, list[dict]] = {name: [] for name, _, _ in runs}
        for round_, seed in enumerate(args.seeds):
            order = list(enumerate(runs)) if round_ % 2 == 0 else list(enumerate(runs))[::-1]
            for index, (name, tree, flags) in order:
                out = work / f"out-{index}-seed-{seed}"
                traced = args.trace_step if index == len(runs) - 1 and round_ == 0 else 0
                rows = play(tree, model, task_folder, out, args, flags + (trace if traced else []), seed)
                if traced and (out / "trace").is_dir():
                    shutil.copytree(out / "trace", args.trace_out, dirs_exist_ok=True)
                    print(f"  trace of step {args.trace_step}: {args.trace_out}")
                results[name].append(summary(rows, traced))
                for row in rows:
                    print(f"  step {row.get('step')}: " + ", ".join(f"{k} {float(row[k]):.2f}" for k in SHOWN if k in row))
                print(f"  {name}, seed {seed}, median (steps 2..): {json.dumps(results[name][-1])}")
    whole = lambda m: m.get("step_time", 0.0) + m.get("time/update/optimizer_s", 0.0)  # noqa: E731
    out = {"settings": vars(args) | {"model": str(args.model or "SmolLM2-135M shape, random weights"),
                                     "json": None, "trace_out": str(args.trace_out)},
           "results": {name: {"per_seed": per_seed, "step_s": spread([whole(m) for m in per_seed])}
                       for name, per_seed in results.items()}}
    for name, result in out["results"].items():
        print(f"{name}: median step (step_time + optimizer) over seeds {args.seeds}: {result['step_s']}")
    if len(runs) == 2:
        baseline = runs[0][0]
        ratios = [whole(old) / whole(new) for old, new in zip(results[baseline], results["this tree"], strict=True)
                  if whole(new)]
        out["speedup_step"] = spread(ratios)
        print(f"step speedup, {baseline} over this tree{', ' + args.flags if args.flags else ''}, paired by seed: "
              f"{out['speedup_step']}")
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
