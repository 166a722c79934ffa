"""Episodes' later turns admitted together: every continued row's new part prefilled in one forward pass
(now) against one pass per row (the baseline, the engine before: ``RowByRow`` below).

``--episodes`` episodes play ``--turns`` turns at once through one engine in static sessions, as GRPO's
rollouts do on a GPU: the first prompt is ``--prompt`` ids of real text (pdbgym's source, through the
embedded tokenizer), each turn samples up to ``--new`` ids, and the next turn's prompt is the last one,
what it sampled and a "tool output" whose length differs by episode (``--tool`` ids and 30 more for each
episode after the first), so the new parts batched together differ in length. Both arms run in one
process on the embedded SmolLM2-135M, one after the other; printed: seconds, prefill passes, ids
prefilled, the engine's prefill seconds, and the ratio.

    .venv/bin/python bench/batched_extend.py [--device cpu|cuda] [--episodes 8] [--turns 4]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def row_by_row_engine():
    """The baseline: a ``LocalEngine`` that extends each continued row with a forward pass of its own and
    joins the rows after, as the engine did before."""
    from pdbgym.engine import LocalEngine
    from pdbgym.engine.kv import join_rows

    class RowByRow(LocalEngine):
        def _extend(self, model, rows, prefixes):
            import torch

            parts = [LocalEngine._extend(self, model, [row], [prefix]) for row, prefix in zip(rows, prefixes, strict=True)]
            if len(parts) == 1:
                return parts[0]
            cache = join_rows([cache for _, cache, _ in parts], model, max(r.position for r in rows))
            return torch.cat([logits for logits, _, _ in parts]), cache, self._right_mask(rows)

    return RowByRow


def play(engine, first: list[int], tool: list[int], turns: int, new: int, seed: int) -> int:
    from pdbgym.engine import EngineRequest

    prompt, sampled = list(first), 0
    for turn in range(turns):
        result = engine.submit(EngineRequest(prompt, new, temperature=1.0, seed=seed * 100 + turn)).result()
        sampled += len(result.ids)
        prompt = prompt + result.ids + tool
    return sampled


def main() -> None:
    from pdbgym.engine import EngineSettings, LocalEngine
    from pdbgym.modelload import EMBEDDED, load_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=600)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--tool", type=int, default=20)
    args = parser.parse_args()
    loaded = load_model(EMBEDDED, device=args.device)
    text = (Path(__file__).resolve().parents[1] / "pdbgym" / "engine" / "core.py").read_text()
    ids = loaded.tokenizer(text)["input_ids"]
    firsts = [ids[i * 7:i * 7 + args.prompt] for i in range(args.episodes)]
    tools = [ids[-(args.tool + 30 * e):] for e in range(args.episodes)]
    longest = args.prompt + args.turns * (args.new + len(tools[-1]))
    figures = {}
    for name, kind in (("one pass per row (baseline)", row_by_row_engine()), ("one pass for all rows", LocalEngine)):
        engine = kind(loaded.model, set(), loaded.tokenizer.pad_token_id or 0, EngineSettings(static=True))
        engine.expect(args.episodes, longest)
        play(engine, firsts[0], tools[0], 1, 2, 0)  # the shape's first use (capture or compile) outside the clock
        engine.stats.prefill_tokens = engine.stats.prefill_seconds = engine.stats.prefills = 0
        started = time.perf_counter()
        with ThreadPoolExecutor(args.episodes) as pool:
            sampled = sum(pool.map(lambda e, engine=engine: play(engine, firsts[e], tools[e], args.turns, args.new, e),
                                   range(args.episodes)))
        seconds = time.perf_counter() - started
        figures[name] = seconds
        print(f"{name:28s} {args.episodes} episodes x {args.turns} turns on {args.device}: {seconds:.2f} s, "
              f"{sampled} ids sampled, {engine.stats.prefills} prefill passes, {engine.stats.prefill_tokens} ids "
              f"prefilled in {engine.stats.prefill_seconds:.2f} s")
        engine.close()
    base, now = figures.values()
    print(f"speedup of one pass for all rows: {base / now:.2f}x")


if __name__ == "__main__":
    main()
