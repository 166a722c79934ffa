"""Episodes' later turns admitted together: every continued row's new part prefilled in one forward pass
(now) against one pass per row (the baseline, the engine before: ``RowByRow`` below).

``--episodes`` episodes play ``--turns`` turns at once through one engine in static sessions, as GRPO's
rollouts do on a GPU: the first prompt is ``--prompt`` ids of real text (pdbgym's source, through the
embedded tokenizer), each turn samples up to ``--new`` ids, and the next turn's prompt is the last one,
what it sampled and a "tool output" whose length differs by episode (``--tool`` ids and 30 more for each
episode after the first), so the new parts batched together differ in length. Both arms run in one
process on the embedded SmolLM2-135M, one after the other; printed: seconds, prefill passes, ids
prefilled, the engine's prefill seconds, and the ratio.

    .venv/bin/python bench/batched_extend.py [--device cpu|cuda] [--episodes 8] [--turns 4] [--random-weights]
"""

from __future__ import annotations

from static_reuse import setup, timed  # the same command line and episode loop (bench/ is this folder)


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


def main() -> None:
    from pdbgym.engine import EngineSettings, LocalEngine

    args, loaded, ids, firsts = setup(20)
    tools = [ids[-(args.tool + 30 * e):] for e in range(args.episodes)]
    figures = {}
    for name, kind in (("one pass per row (baseline)", row_by_row_engine()), ("one pass for all rows", LocalEngine)):
        engine = kind(loaded.model, set(), loaded.tokenizer.pad_token_id or 0, EngineSettings(static=True))
        engine.expect(args.episodes, args.prompt + args.turns * (args.new + len(tools[-1])))
        seconds, sampled = timed(engine, args, firsts, tools)
        figures[name] = seconds
        print(f"{name:28s} {args.episodes} episodes x {args.turns} turns on {args.device}: {seconds:.2f} s, "
              f"{sampled} ids sampled, {engine.stats.prefills} prefill passes, {engine.stats.prefill_tokens} ids "
              f"prefilled in {engine.stats.prefill_seconds:.2f} s")
        engine.close()
    base, now = figures.values()
    print(f"speedup of one pass for all rows: {base / now:.2f}x")


if __name__ == "__main__":
    main()
