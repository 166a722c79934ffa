"""The local inference engine against the paths it replaced, each pair measured in one run.

``decode``: random-weight models of two shapes (SmolLM2-135M and Qwen3-4B), bf16, sdpa, ``--batch``
prompts of ``--prompt`` random ids, ``--new`` new ids each (no stop id: every row runs to the cap),
T = 0.7, top-p 0.9. Rows: HF ``generate`` with a dynamic cache at the same batch (what GRPO's batched
generator ran before the engine), the engine's static path (static cache, compiled decode, CUDA graphs;
its warm-up timed apart), its dynamic path, and for the small shape one request at a time (the
per-token loop at batch 1 that ``run``/``eval``/``cache build`` ran before). The engine's log-probs are
checked against a plain fp32 forward pass over the sampled ids.

``--top-p`` sets the draw's nucleus (1: none, what GRPO's rollouts sample with). ``--against REV`` (a git
revision, or a folder holding its tree) first runs that tree's own ``decode`` with the same shapes, batch and
lengths in a subprocess on the same device, then this tree's, and prints each shape's tokens/s before and now
and their ratio (old trees fix top-p at 0.9).

``episodes``: real ``pdbgym eval`` campaigns (real sandboxed episodes, live pdb) of a local model: the
engine with ``--local-episodes`` episodes at once against the same tasks, runs and concurrency with the
model's turns batched through HF ``generate`` instead (``bench/generate_sampler.py``: a dynamic cache,
each turn's whole prompt prefilled, the batch run to its longest budget), and against one episode at a
time through the engine's batch-1 dynamic path on ``--baseline-tasks`` tasks (0: skip it); generated
tokens/s and episodes/hour, and the engine's ratio to each.

    python bench/engine_throughput.py decode --device cuda
    python bench/engine_throughput.py --json out.json decode --device cuda --against 868e686
    python bench/engine_throughput.py episodes --device cuda --model embedded --local-episodes 48
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = {
    # SmolLM2-135M: 30 layers, hidden 576, 9 heads (3 kv), MLP 1536, vocab 49,152, tied embeddings.
    "smollm2-135m": ("llama", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                   num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                                   tie_word_embeddings=True, rope_theta=100000.0)),
    # Qwen3-4B: 36 layers, hidden 2560, 32 heads (8 kv, head_dim 128), MLP 9728, vocab 151,936.
    "qwen3-4b": ("qwen3", dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                               max_position_embeddings=40960, tie_word_embeddings=True, rope_theta=1000000.0)),
}


def random_model(shape: str, device: str, dtype):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    kind, fields = SHAPES[shape]
    torch.manual_seed(0)
    config = (LlamaConfig if kind == "llama" else Qwen3Config)(**fields)
    config._attn_implementation = "sdpa"
    with torch.device(device):
        model = (LlamaForCausalLM if kind == "llama" else Qwen3ForCausalLM)(config).to(dtype)
    return model.eval()


def hf_generate(model, prompts, new: int, top_p: float = 0.9) -> float:
    """Seconds of one HF ``generate`` (dynamic cache) over the left-padded batch; every row runs to ``new``."""
    import torch
    from transformers import GenerationConfig

    ids = torch.tensor(prompts, device=model.device)
    config = GenerationConfig(do_sample=True, temperature=0.7, top_p=top_p, top_k=0, max_new_tokens=new,
                              min_new_tokens=new, pad_token_id=0, eos_token_id=None)
    torch.cuda.synchronize() if ids.is_cuda else None
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
    torch.cuda.synchronize() if ids.is_cuda else None
    assert out.shape[1] == ids.shape[1] + new
    return time.perf_counter() - started


def engine_run(engine, prompts, new: int, seed: int = 0, top_p: float = 0.9) -> tuple[float, list]:
    from pdbgym.engine import EngineRequest

    requests = [EngineRequest(p, new, 0.7, top_p, seed * 100_000 + i) for i, p in enumerate(prompts)]
    started = time.perf_counter()
    results = engine.generate(requests)
    return time.perf_counter() - started, results


def logprob_check(shape: str, device: str, graphs: str = "capture", dtype: str = "float32") -> float:
    """Largest |engine log-prob - plain forward log-prob| on 4 prompts x 32 ids, static path, both in
    ``dtype`` (fp32 by default; bf16 is what GRPO's rollouts and update run in)."""
    import torch

    from pdbgym.engine import EngineSettings, LocalEngine

    model = random_model(shape, device, getattr(torch, dtype))
    engine = LocalEngine(model, set(), 0, EngineSettings(static=device.startswith("cuda"), max_batch=4, graphs=graphs))
    prompts = [list(range(10 + i, 200 + 37 * i)) for i in range(4)]
    _, results = engine_run(engine, prompts, 32, seed=3)
    engine.close()
    worst = 0.0
    with torch.inference_mode():
        for prompt, result in zip(prompts, results, strict=True):
            logits = model(torch.tensor([prompt + result.ids], device=device)).logits[0].float()
            lp = torch.log_softmax(logits / 0.7, -1)[len(prompt) - 1:-1].gather(-1, torch.tensor(result.ids, device=device)[:, None])
            worst = max(worst, float((lp[:, 0].cpu() - torch.tensor(result.logprobs)).abs().max()))
    return worst


def decode(args: argparse.Namespace) -> dict:
    import torch

    from pdbgym.engine import EngineSettings, LocalEngine

    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    figures: dict = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                     "batch": args.batch, "prompt_ids": args.prompt, "new_ids": args.new, "top_p": args.top_p}
    for shape in args.shapes.split(","):
        model = random_model(shape, args.device, dtype)
        vocab = model.config.vocab_size
        gen = torch.Generator().manual_seed(1)
        prompts = torch.randint(10, vocab, (args.batch, args.prompt), generator=gen).tolist()
        tokens = args.batch * args.new
        row: dict = {}
        hf_generate(model, prompts[:2], 4)  # kernels loaded, allocator warm
        seconds = hf_generate(model, prompts, args.new, args.top_p)
        row["hf_generate_dynamic"] = {"seconds": round(seconds, 2), "tok_s": round(tokens / seconds, 1)}
        variants = [("engine_static", True, "capture")] + ([] if args.static_only else [("engine_dynamic", False, "capture")])
        if args.compiled:
            variants.insert(1, ("engine_static_compiled", True, "compiled"))
        for name, static, graphs in variants:
            if static and not args.device.startswith("cuda"):
                continue
            engine = LocalEngine(model, set(), 0, EngineSettings(static=static, max_batch=max(64, args.batch),
                                                                 graphs=graphs))
            engine.expect(args.batch)
            warm, _ = engine_run(engine, prompts, args.new, seed=1, top_p=args.top_p)  # compiles the shape
            seconds, results = engine_run(engine, prompts, args.new, seed=2, top_p=args.top_p)
            assert all(len(r.ids) == args.new for r in results)
            stats = engine.stats.to_dict()
            row[name] = {"seconds": round(seconds, 2), "tok_s": round(tokens / seconds, 1),
                         "first_call_seconds": round(warm, 1), "compiles": stats["compiles"],
                         "prefill_seconds_both_calls": stats["prefill_seconds"],
                         "draw_seconds_both_calls": stats["draw_seconds"],
                         "stats_both_calls": {k: v for k, v in stats.items() if k != "compiles"},
                         "ratio_vs_hf_generate": round(row["hf_generate_dynamic"]["seconds"] / seconds, 2)}
            engine.close()
            print(shape, name, {k: row[name][k] for k in ("tok_s", "first_call_seconds", "ratio_vs_hf_generate")},
                  "HF generate", row["hf_generate_dynamic"]["tok_s"], "tok/s", flush=True)  # a run cut short keeps it
        if args.static_only:
            figures[shape] = row
            del model
            continue
        if shape == "smollm2-135m":
            engine = LocalEngine(model, set(), 0, EngineSettings(static=False))
            alone = prompts[:2]
            started = time.perf_counter()
            for i, prompt in enumerate(alone):
                engine_run(engine, [prompt], args.new, seed=10 + i, top_p=args.top_p)
            seconds = time.perf_counter() - started
            row["batch1_loop"] = {"seconds": round(seconds, 2), "tok_s": round(len(alone) * args.new / seconds, 1)}
            engine.close()
        row["logprob_max_abs_diff_fp32"] = logprob_check(shape, args.device)
        if args.compiled and args.device.startswith("cuda"):
            row["compiled_logprob_max_abs_diff_fp32"] = logprob_check(shape, args.device, "compiled")
            for graphs in ("capture", "compiled"):
                row[f"{graphs}_logprob_max_abs_diff_bf16"] = logprob_check(shape, args.device, graphs, "bfloat16")
        figures[shape] = row
        del model
        torch.cuda.empty_cache() if args.device.startswith("cuda") else None
    return figures


def decode_against(args: argparse.Namespace) -> dict:
    """``decode`` of the tree of ``args.against`` (a subprocess), then of this tree, and the ratios."""
    import subprocess
    import tempfile

    from grpo_step import checkout  # bench/: a revision's tree, or a folder holding one

    if args.top_p != 0.9:
        raise SystemExit("--against compares at top-p 0.9, which older trees' decode fixes; drop --top-p")
    with tempfile.TemporaryDirectory(prefix="pdbgym-decode-against-") as tmp:
        tree = checkout(args.against, Path(tmp) / "tree")
        out = Path(tmp) / "before.json"
        command = [sys.executable, "bench/engine_throughput.py", "--json", str(out), "decode", "--device", args.device,
                   "--shapes", args.shapes, "--batch", str(args.batch), "--prompt", str(args.prompt),
                   "--new", str(args.new)]
        done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{args.against}'s decode failed (rc {done.returncode}):\n{done.stderr[-3000:]}")
        before = json.loads(out.read_text())
    now = decode(args)
    ratios = {shape: {"before_tok_s": before[shape]["engine_static" if "engine_static" in before[shape] else
                                                  "engine_dynamic"]["tok_s"],
                      "now_tok_s": now[shape]["engine_static" if "engine_static" in now[shape] else
                                              "engine_dynamic"]["tok_s"]}
              for shape in args.shapes.split(",")}
    for row in ratios.values():
        row["now_over_before"] = round(row["now_tok_s"] / row["before_tok_s"], 2)
    return {"against": args.against, "before": before, "now": now, "engine": ratios}


def episodes(args: argparse.Namespace) -> dict:
    import tempfile

    from generate_sampler import GenerateSampler  # bench/: the batched HF generate baseline

    from pdbgym.agent import policies
    from pdbgym.agent.backends import hf as hf_module
    from pdbgym.agent.backends.base import stop_token_ids
    from pdbgym.agent.backends.hf import load_model_and_tokenizer, pad_id
    from pdbgym.agent.executor import ExecutorConfig
    from pdbgym.engine import EngineSettings, engine_for
    from pdbgym.engine.shared import serve_with
    from pdbgym.episode_defaults import EpisodeSettings
    from pdbgym.evaluate.procedures import EvalConfig, run_evaluation
    from pdbgym.modelload import embedded_model_dir

    path = embedded_model_dir() if args.model == "embedded" else Path(args.model)
    figures: dict = {"model": args.model, "device": args.device, "turn_budget": args.turn_budget,
                     "max_new_tokens": args.new}
    import shutil

    from pdbgym.tasks.suites import resolve_tasks

    few = Path(tempfile.mkdtemp(prefix="pdbgym-bench-tasks-"))
    for task in resolve_tasks(args.tasks)[:args.baseline_tasks]:  # the slow baseline plays a few tasks
        shutil.copytree(task.path, few / task.path.name)
    arms = [("engine", args.local_episodes, None, args.runs, args.tasks),
            ("hf_generate", args.local_episodes, None, args.runs, args.tasks)]  # the same tasks, runs and concurrency
    if args.baseline_tasks:
        arms.append(("batch1", 1, False, 1, str(few)))
    for name, local, static, runs, tasks in arms:
        hf_module._LOADED.clear()  # a fresh model and backend per arm: each arm's shared engine has its settings
        policies._BACKENDS.clear()
        model, tokenizer = load_model_and_tokenizer(path, args.device)
        if name == "hf_generate":  # the model's turns batched through HF generate instead of the engine
            engine = GenerateSampler(model, stop_token_ids(tokenizer, model), pad_id(tokenizer),
                                     max_batch=max(64, local))
            serve_with(model, engine)
        else:
            engine = engine_for(model, stop_token_ids(tokenizer, model), pad_id(tokenizer),
                                EngineSettings(static=static, max_batch=max(64, local)))
        with tempfile.TemporaryDirectory() as out:
            config = EvalConfig(arms=[f"{name}={args.model}"], tasks=tasks, runs=runs, out=Path(out) / "eval",
                                episode=EpisodeSettings(turn_budget=args.turn_budget, max_new_tokens=args.new),
                                device=args.device,
                                executor=ExecutorConfig(local_episodes=local), force=True)
            started = time.perf_counter()
            run_evaluation(config)
            seconds = time.perf_counter() - started
            played = len((Path(out) / "eval" / "episodes.jsonl").read_text().splitlines())
        stats = engine.stats.to_dict()
        figures[name] = {"local_episodes": local, "episodes": played, "seconds": round(seconds, 1),
                         "episodes_per_hour": round(played * 3600 / seconds, 1),
                         "generated_tokens": stats["tokens"], "tok_s": round(stats["tokens"] / seconds, 1),
                         "engine_busy_seconds": stats["busy_seconds"], "mean_live_rows": stats["mean_live_rows"],
                         "compiles": stats["compiles"]}
        engine.close()
    for baseline in ("hf_generate", "batch1"):
        if baseline in figures:
            figures[f"over_{baseline}"] = {
                "tok_s": round(figures["engine"]["tok_s"] / figures[baseline]["tok_s"], 2),
                "episodes_per_hour": round(figures["engine"]["episodes_per_hour"]
                                           / figures[baseline]["episodes_per_hour"], 2)}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("decode")
    one.add_argument("--device", default="cuda")
    one.add_argument("--shapes", default="smollm2-135m,qwen3-4b")
    one.add_argument("--batch", type=int, default=48)
    one.add_argument("--prompt", type=int, default=1500)
    one.add_argument("--new", type=int, default=128)
    one.add_argument("--compiled", action="store_true", help="also time the decode step compiled by inductor before its capture (graphs=compiled)")
    one.add_argument("--top-p", type=float, default=0.9, help="the draw's nucleus (1: none, as GRPO's rollouts)")
    one.add_argument("--static-only", action="store_true", help="HF generate and the static arms alone: no dynamic "
                     "arm, batch-1 loop or log-prob checks (a short device call)")
    one.add_argument("--against", default=None,
                     help="a git revision (or a folder holding its tree): its decode first, then this tree's, and the ratio")
    two = sub.add_parser("episodes")
    two.add_argument("--device", default="cuda")
    two.add_argument("--model", default="embedded")
    two.add_argument("--tasks", default="builtin")
    two.add_argument("--runs", type=int, default=4)
    two.add_argument("--baseline-tasks", type=int, default=3, help="tasks (one run each) of the batch-1 baseline")
    two.add_argument("--local-episodes", type=int, default=48)
    two.add_argument("--turn-budget", type=int, default=4)
    two.add_argument("--new", type=int, default=128)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.what == "decode":
        figures = decode_against(args) if args.against else decode(args)
    else:
        figures = episodes(args)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
