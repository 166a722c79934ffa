"""Episodes' later turns in the engine's static sessions: each turn continuing the keys and values its
row left (now) against each turn prefilling its whole context again (the baseline, ``reuse_prefix=False``).

``--episodes`` episodes play ``--turns`` turns at once through one engine, as GRPO's rollouts do: the
first prompt is ``--prompt`` ids of real text (pdbgym's source, through the embedded tokenizer), each
turn samples up to ``--new`` ids, and the next turn's prompt is the last one, what it sampled and a
"tool output" of ``--tool`` ids. Both arms run in one process on the embedded SmolLM2-135M, one after
the other; printed: seconds, prefill ids, the engine's prefill seconds, and the ratio.

    .venv/bin/python bench/static_reuse.py [--device cpu|cuda] [--episodes 8] [--turns 4] [--random-weights]

``--profile FILE`` plays the kept-caches arm alone under ``torch.profiler`` (every thread, the kernels and the
host's syncs) and writes its tables to FILE (``pdbgym.train.grpo.steptrace.summary``: the wall, the kernels'
share of it, and the operators and the engine's named ranges by device and by host time), beside the engine's
own timers: where a GRPO step's prefill passes and kept caches spend their time, without the environment.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace


def play(engine, first: list[int], tool: list[int], turns: int, new: int, seed: int) -> int:
    from pdbgym.engine import EngineRequest

    prompt, sampled = list(first), 0
    for turn in range(turns):
        result = engine.submit(EngineRequest(prompt, new, temperature=1.0, seed=seed * 100 + turn)).result()
        sampled += len(result.ids)
        prompt = prompt + result.ids + tool
    return sampled


def setup(tool: int) -> tuple:
    """The command line (``--tool`` defaulting to ``tool``), the embedded model and its tokenizer, the
    ids of real text and each episode's first prompt."""
    from pdbgym.modelload import EMBEDDED, load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=600)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--tool", type=int, default=tool)
    parser.add_argument("--random-weights", action="store_true",
                        help="SmolLM2-135M's architecture with random weights and random ids: the same work "
                             "(no stop id: every turn samples --new ids), without the embedded model's file")
    parser.add_argument("--profile", type=Path, default=None,
                        help="profile the kept-caches arm alone and write the tables here")
    args = parser.parse_args()
    if args.random_weights:
        loaded, ids = random_smollm2(args.device), list(range(1000, 9000))
    else:
        loaded = load_model(EMBEDDED, device=args.device)
        text = (Path(__file__).resolve().parents[1] / "pdbgym" / "engine" / "core.py").read_text()
        ids = loaded.tokenizer(text)["input_ids"]
    return args, loaded, ids, [ids[i * 7:i * 7 + args.prompt] for i in range(args.episodes)]


def random_smollm2(device: str) -> SimpleNamespace:
    """A model shaped as SmolLM2-135M-Instruct (its config's sizes), random weights, in the dtype
    ``load_model`` would give it; ``.tokenizer.pad_token_id`` as the benches read it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from pdbgym.modelload import torch_dtype

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                         rope_theta=100000.0, tie_word_embeddings=True, attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(device=device, dtype=torch_dtype(None, device)).eval()
    return SimpleNamespace(model=model, tokenizer=SimpleNamespace(pad_token_id=0))


def timed(engine, args, firsts: list[list[int]], tools: list[list[int]]) -> tuple[float, int]:
    """Seconds and ids sampled for every episode played at once (episode e with tool output ``tools[e]``),
    the shape's first use (capture or compile) and the engine's counters reset outside the clock."""
    play(engine, firsts[0], tools[0], 1, 2, 0)
    stats = engine.stats
    stats.prefill_tokens = stats.prefill_seconds = stats.prefills = 0
    stats.keep_seconds = stats.draw_seconds = stats.decode_steps = 0
    started = time.perf_counter()
    with ThreadPoolExecutor(args.episodes) as pool:
        sampled = sum(pool.map(lambda e: play(engine, firsts[e], tools[e], args.turns, args.new, e),
                               range(args.episodes)))
    return time.perf_counter() - started, sampled


def main() -> None:
    from pdbgym.engine import EngineSettings, LocalEngine

    args, loaded, ids, firsts = setup(100)
    tool = ids[-args.tool:]
    figures = {}
    for reuse in (True,) if args.profile else (False, True):
        engine = LocalEngine(loaded.model, set(), loaded.tokenizer.pad_token_id or 0,
                             EngineSettings(static=True, reuse_prefix=reuse))
        engine.expect(args.episodes, args.prompt + args.turns * (args.new + args.tool))
        seconds, sampled = (profiled(engine, args, firsts, [tool] * args.episodes) if args.profile
                            else timed(engine, args, firsts, [tool] * args.episodes))
        figures[reuse] = seconds
        stats = engine.stats
        print(f"{'kept caches continued' if reuse else 'whole context each turn (baseline)':36s} "
              f"{args.episodes} episodes x {args.turns} turns on {args.device}: {seconds:.2f} s, {sampled} ids "
              f"sampled, {stats.prefill_tokens} ids prefilled in {stats.prefill_seconds:.2f} s "
              f"({stats.prefills} passes); kept caches {stats.keep_seconds:.2f} s, draw {stats.draw_seconds:.2f} s, "
              f"{stats.decode_steps} decode steps")
        engine.close()
    if len(figures) == 2:
        print(f"speedup of the kept caches: {figures[False] / figures[True]:.2f}x")


def profiled(engine, args, firsts: list[list[int]], tools: list[list[int]]) -> tuple[float, int]:
    """``timed`` under the profiler; the tables written to ``args.profile`` and printed."""
    import torch

    from pdbgym.train.grpo.steptrace import every_thread_profiler, summary

    profiler = every_thread_profiler()
    profiler.start()
    seconds, sampled = timed(engine, args, firsts, tools)
    profiler.stop()
    text = summary(profiler, seconds, torch.cuda.is_available() and torch.cuda.is_initialized())
    args.profile.write_text(text)
    print(text)
    return seconds, sampled


if __name__ == "__main__":
    main()
