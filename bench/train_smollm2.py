"""The research loop on SmolLM2-135M-Instruct's real weights: scripted-teacher SFT, then GRPO from it.

Stages (each resumes from what the out folder already holds, so the two can run in separate calls):

``--stage sft``: tasks (built-in + regression suites) split by source-module group into train and
held-out; scripted-oracle caches on both; a corpus of the train episodes; ``pdbgym train sft`` (DoRA)
of the embedded model; KL(oracle || arm) on the held-out cache for base and SFT; base and SFT played
``--runs`` times on every train and held-out task.

``--stage grpo``: ``pdbgym train grpo`` from the SFT adapter on the train tasks; KL and the same
evaluation for the GRPO delta.

Episodes of an evaluation are played together through the GRPO rollout's ``BatchedGenerator`` (one
batched ``generate`` per round of turns), in chunks of ``--batch`` episodes. Each phase records its wall
seconds, peak GPU memory (``torch.cuda.max_memory_allocated``) and tokens/s; GRPO's step time is split
into rollouts and updates (``time/rollout_s``, ``time/update_s`` of ``steps.jsonl``). Everything lands in
``OUT/figures.json``; a Markdown summary is printed.

    python3 bench/train_smollm2.py --out runs/smollm2 --stage sft
    python3 bench/train_smollm2.py --out runs/smollm2 --stage grpo
    CPU smoke run: python bench/train_smollm2.py --out /tmp/s2 --stage sft --device cpu --quick
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SFT_NAME, GRPO_NAME = "smollm2-sft", "smollm2-grpo"


class Figures:
    """``OUT/figures.json``: phase -> figures, written after every phase."""

    def __init__(self, out: Path, device: str):
        self.path, self.device = out / "figures.json", device
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.mine: set[str] = set()  # phases this process measured (two stages may run at once)

    @contextmanager
    def phase(self, name: str):
        import torch

        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        row: dict[str, Any] = {}
        started = time.perf_counter()
        print(f"[{name}] started", flush=True)
        yield row
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
            row["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        row["seconds"] = round(time.perf_counter() - started, 1)
        self.data[name] = row
        self.mine.add(name)
        self.save()
        print(f"[{name}] {json.dumps(row)}", flush=True)

    def save(self) -> None:
        from pdbgym.fileio import write_json_atomic

        now = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.data = {**now, **{name: self.data[name] for name in self.mine}}
        write_json_atomic(self.path, self.data, indent=1)


def split(args: argparse.Namespace) -> dict[str, Path]:
    """Both suites copied into ``OUT/tasks/all``, then split by source-module group into train and test
    (``OUT/splits.json``, the two folders in ``OUT/tasks``); a rerun keeps the split it made."""
    from pdbgym.tasks.splits import load_splits, make_splits, write_splits
    from pdbgym.tasks.suites import resolve_tasks

    every = {t.instance_id: t for suite in ("builtin", "regression") for t in resolve_tasks(suite)}
    if args.quick:
        every = dict(sorted(every.items())[:6])
    root = args.out / "tasks" / "all"
    if not root.is_dir():
        for task in every.values():
            shutil.copytree(task.path, root / task.instance_id, symlinks=True)
    if not (args.out / "splits.json").is_file():
        write_splits(make_splits(str(root), val_fraction=0.0, test_fraction=args.held_out, seed=0),
                     args.out / "splits.json")
    splits = load_splits(args.out / "splits.json")
    for name in ("train", "test"):
        folder = args.out / "tasks" / name
        if not folder.is_dir():
            for item in splits.get(name, []):
                shutil.copytree(root / item["instance_id"], folder / item["instance_id"], symlinks=True)
    return {name: args.out / "tasks" / name for name in ("train", "test")}


def oracle_caches(args: argparse.Namespace) -> dict[str, Any]:
    """Scripted-oracle caches on the train and test folders (``OUT/cache-{train,test}``; a rerun plays only
    the missing episodes); their summaries."""
    from dataclasses import replace

    from pdbgym.agent.build import CacheBuildConfig, build_cache
    from pdbgym.episode_defaults import episode_defaults_for

    episode = replace(episode_defaults_for("cache build"), temperature=0.0)
    return {name: build_cache(CacheBuildConfig(policy="scripted", out=args.out / f"cache-{name}",
                                               tasks=str(args.out / "tasks" / name), runs=1, workers=args.workers,
                                               seed=0, tokenizer="embedded", episode=episode))
            for name in ("train", "test")}


def oracle_corpus(args: argparse.Namespace) -> dict[str, Any]:
    """The corpus of the train cache's solved episodes, each cut to ``--max-length`` ids; its manifest."""
    from pdbgym.train.corpus.build import MANIFEST_FILE, CorpusConfig, build_corpus

    manifest = args.out / "corpus" / MANIFEST_FILE
    if not manifest.is_file():
        build_corpus(CorpusConfig(caches=[args.out / "cache-train"], out=args.out / "corpus", solved_only=True,
                                  max_length=args.max_length, overlength="truncate", splits=args.out / "splits.json"))
    return json.loads(manifest.read_text())


def sft(args: argparse.Namespace, row: dict[str, Any]) -> None:
    from pdbgym.train.corpus.build import load_corpus
    from pdbgym.train.sft.config import SFTTrainConfig
    from pdbgym.train.sft.resume import ADAPTER_DIR, TRAIN_RECORD
    from pdbgym.train.sft.trainer import train_sft

    out = args.out / "sft"
    if not (out / ADAPTER_DIR / TRAIN_RECORD).is_file():
        shutil.rmtree(out, ignore_errors=True)
        result = train_sft(SFTTrainConfig(
            base="embedded", data=args.out / "corpus", out=out, seed=42, rank=24, use_dora=True, lr=args.sft_lr,
            epochs=args.sft_epochs, effective_batch=args.sft_batch, max_length=args.max_length, val_fraction=0.15,
            eval_steps=max(1, args.sft_eval_steps), device=args.device, name=SFT_NAME, store=args.out / "adapters",
            report=True))
        runtime = next((r["train_runtime"] for r in result.history if "train_runtime" in r), None)
        record = json.loads((out / ADAPTER_DIR / TRAIN_RECORD).read_text())
        examples = load_corpus(args.out / "corpus").examples
        val = set(record["corpus"]["val_tasks"])
        tokens = sum(len(e.input_ids) for e in examples if e.instance_id not in val) * args.sft_epochs
        row.update(steps=result.steps, best_val_loss=result.best_val_loss, best_step=result.best_step,
                   train_runtime_s=runtime, trained_tokens=tokens,
                   tokens_per_s=round(tokens / runtime, 1) if runtime else None,
                   first_loss=next((r["loss"] for r in result.history if "loss" in r), None),
                   last_loss=[r["loss"] for r in result.history if "loss" in r][-1])


def model_folder(args: argparse.Namespace, arm: str) -> Path:
    from pdbgym.adapters.stacked import materialize_ref
    from pdbgym.adapters.store import Store
    from pdbgym.modelload import embedded_model_dir

    if arm == "base":
        return embedded_model_dir()
    return materialize_ref(SFT_NAME if arm == "sft" else GRPO_NAME, Store(args.out / "adapters"))


def kl(args: argparse.Namespace, arms: list[str], row: dict[str, Any]) -> None:
    from pdbgym.evaluate.arm_figures import oracle_kl

    result = oracle_kl(args.out / "cache-test", {arm: str(model_folder(args, arm)) for arm in arms},
                       args.out / "kl.json", 0, device=args.device)
    row.update({arm: {k: result["arms"][arm][k] for k in ("kl_per_token", "ci_low", "ci_high", "tasks", "tokens")}
                for arm in arms})


def play(args: argparse.Namespace, arm: str, split_name: str) -> list[dict[str, Any]]:
    """``--runs`` episodes of every task of the split for one arm, batched; the episodes' facts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pdbgym.agent.backends.base import SamplingParams
    from pdbgym.agent.loop import AgentConfig
    from pdbgym.agent.toolcalls import detect_format
    from pdbgym.env import DebugEnv, EnvConfig
    from pdbgym.tasks.suites import resolve_tasks
    from pdbgym.train.grpo.rollout import BatchedGenerator, run_episodes, sample_from_outcome

    folder = model_folder(args, arm)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, use_kernels=False).to(args.device).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tool_format = detect_format(getattr(tokenizer, "chat_template", None))
    generator = BatchedGenerator(model, tokenizer)
    agent = AgentConfig(tool_format=tool_format, max_context_tokens=args.max_length,
                        sampling=SamplingParams(args.temperature, 1.0, args.max_new_tokens, None),
                        dataset=f"smollm2-{arm}", check_trajectory=True)
    env = EnvConfig(turn_budget=args.turn_budget, command_timeout_s=10.0)
    episodes = [task for task in resolve_tasks(args.out / "tasks" / split_name) for _ in range(args.runs)]
    facts = []
    for start in range(0, len(episodes), args.batch):
        outcomes = run_episodes(episodes[start:start + args.batch], generator, agent,
                                lambda task: DebugEnv(task, env), name=arm)
        for outcome in outcomes:
            sample = sample_from_outcome(outcome, tool_format)
            facts.append({**sample.facts, "model_tokens": int(sum(sample.env_mask))})
    del model
    return facts


def score(facts: list[dict[str, Any]]) -> dict[str, Any]:
    import numpy as np

    from pdbgym.evaluate.stats import estimate_mean

    by_task: dict[str, list[float]] = {}
    for fact in facts:
        by_task.setdefault(fact["instance_id"], []).append(float(fact["final_test_passed"]))
    solved = estimate_mean(np.array([np.mean(v) for v in by_task.values()]))
    reasons: dict[str, int] = {}
    for fact in facts:
        reasons[fact["termination_reason"]] = reasons.get(fact["termination_reason"], 0) + 1
    return {"pass@1": round(solved.mean, 4), "ci": [round(solved.ci_low, 4), round(solved.ci_high, 4)],
            "ci_method": solved.ci_method, "tasks": len(by_task), "episodes": len(facts),
            "valid_tool_call_rate": round(float(np.mean([f["valid_tool_call_rate"] for f in facts])), 4),
            "terminations": reasons}


def evaluate(args: argparse.Namespace, figures: Figures, arm: str) -> None:
    for split_name in ("train", "test"):
        name = f"eval-{arm}-{split_name}"
        if name in figures.data:
            continue
        with figures.phase(name) as row:
            started = time.perf_counter()
            facts = play(args, arm, split_name)
            row.update(score(facts))
            tokens = sum(f["model_tokens"] for f in facts)
            row.update(generated_tokens=tokens, generated_tokens_per_s=round(tokens / (time.perf_counter() - started), 1))


def grpo(args: argparse.Namespace, row: dict[str, Any]) -> None:
    """``train_grpo`` from the SFT adapter; each step's rollout and update seconds come from its log."""
    from pdbgym.train.grpo.config import GRPORunConfig
    from pdbgym.train.grpo.run import train_grpo

    steps: list[dict[str, Any]] = []
    started = time.perf_counter()
    record = train_grpo(GRPORunConfig(
        policy=SFT_NAME, tasks=str(args.out / "tasks" / "train"), out=args.out / "grpo", group=args.group,
        tasks_per_step=args.tasks_per_step, steps=args.grpo_steps, lr=args.grpo_lr, temperature=args.temperature,
        max_new_tokens=args.max_new_tokens, max_context_tokens=args.max_length, curriculum="fixed",
        budget_start=args.turn_budget, budget_end=args.turn_budget, save_steps=args.grpo_steps,
        store=args.out / "adapters", name=GRPO_NAME, device=args.device,
        register_without_signal=True), on_log=steps.append)  # evaluated whatever its reward spread
    rollout = sum(r.get("time/rollout_s", 0.0) for r in steps)
    update = sum(r.get("time/update_s", 0.0) for r in steps)
    keys = ("reward", "episodes/solve_rate", "kl", "beta", "loss", "time/rollout_s", "time/update_s")
    row.update(steps=record["steps"], wall_s=round(time.perf_counter() - started, 1), rollout_s=round(rollout, 1),
               update_s=round(update, 1), rollout_share=round(rollout / max(rollout + update, 1e-9), 3),
               episodes=record["steps"] * args.group * args.tasks_per_step,
               per_step=[{k: r.get(k) for k in ("step", *keys) if k in r} for r in steps])


def markdown(data: dict[str, Any]) -> str:
    lines = ["| arm | split | pass@1 [95% CI] | valid tool calls | episodes | generated tok/s | peak GPU GiB |",
             "|---|---|---|---:|---:|---:|---:|"]
    for name, row in data.items():
        if name.startswith("eval-"):
            _, arm, split_name = name.split("-")
            lines.append(f"| {arm} | {split_name} | {row['pass@1']:.3f} [{row['ci'][0]:.3f}, {row['ci'][1]:.3f}] | "
                         f"{row['valid_tool_call_rate']:.3f} | {row['episodes']} | {row['generated_tokens_per_s']} | "
                         f"{row.get('peak_gpu_gib')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--stage", choices=("sft", "grpo"), required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="6 tasks, tiny budgets (a CPU smoke run)")
    p.add_argument("--held-out", type=float, default=0.4)
    p.add_argument("--workers", type=int, default=12)
    p.add_argument("--max-length", type=int, default=6144)
    p.add_argument("--sft-lr", type=float, default=5e-4)
    p.add_argument("--sft-epochs", type=int, default=8)
    p.add_argument("--sft-batch", type=int, default=4)
    p.add_argument("--sft-eval-steps", type=int, default=10)
    p.add_argument("--runs", type=int, default=4)
    p.add_argument("--batch", type=int, default=48, help="episodes played together")
    p.add_argument("--turn-budget", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--tasks-per-step", type=int, default=2)
    p.add_argument("--grpo-steps", type=int, default=8)
    p.add_argument("--grpo-lr", type=float, default=2e-5)
    args = p.parse_args(argv)
    if args.quick:
        args.sft_epochs, args.sft_eval_steps, args.runs, args.turn_budget = 1, 1, 1, 3
        args.max_new_tokens, args.group, args.grpo_steps, args.max_length = 24, 2, 1, 2048
        args.tasks_per_step, args.workers = 1, 2
    args.out.mkdir(parents=True, exist_ok=True)
    figures = Figures(args.out, args.device)
    if args.stage == "sft":
        with figures.phase("teacher") as row:
            folders = split(args)
            caches = oracle_caches(args)
            row.update({name: {"tasks": len(list(folder.iterdir()))} for name, folder in folders.items()},
                       summaries={k: {kk: v.get(kk) for kk in ("episodes", "solved", "tokens") if kk in v}
                                  for k, v in caches.items() if isinstance(v, dict)})
        with figures.phase("corpus") as row:
            built = oracle_corpus(args)
            row.update({k: built.get(k) for k in ("examples_kept", "tokens", "dropped")})
        if "sft" not in figures.data:
            with figures.phase("sft") as row:
                sft(args, row)
        if "kl-sft" not in figures.data:
            with figures.phase("kl-sft") as row:
                kl(args, ["base", "sft"], row)
        for arm in ("base", "sft"):
            evaluate(args, figures, arm)
    else:
        if "grpo" not in figures.data:
            with figures.phase("grpo") as row:
                grpo(args, row)
        if "kl-grpo" not in figures.data:
            with figures.phase("kl-grpo") as row:
                kl(args, ["grpo"], row)
        evaluate(args, figures, "grpo")
    print(markdown(figures.data))
    print(json.dumps(figures.data, indent=1))


if __name__ == "__main__":
    main()
