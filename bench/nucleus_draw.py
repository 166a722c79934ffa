"""The top-p draw of one decode step: the nucleus looked for among the first ``FIRST_LOOK`` tokens of a
partial sort (``pdbgym.nucleus``, now) against one full sort of the vocabulary (the baseline, as before).

Logits: the embedded SmolLM2-135M's own, at 48 positions of real text (pdbgym's source), vocabulary
49,152; and the same rows spread over a 151,936-token vocabulary (Qwen3's size) with the added tokens
far below (as a large vocabulary's rare tokens are). Each arm runs ``draw_rows`` at T = 0.7, top-p 0.9
(the nucleus, the Gumbel draw and the log-probs), median of ``--repeats``; both arms' draws must be equal.

    .venv/bin/python bench/nucleus_draw.py [--device cpu|cuda] [--repeats 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch


def real_logits(device: str) -> torch.Tensor:
    from pdbgym.modelload import EMBEDDED, load_model

    loaded = load_model(EMBEDDED, device=device)
    source = (Path(__file__).resolve().parents[1] / "pdbgym" / "engine" / "core.py").read_text()
    ids = torch.tensor([loaded.tokenizer(source)["input_ids"][:48]], device=device)
    with torch.no_grad():
        return loaded.model(input_ids=ids).logits[0].float()


def timed(function, repeats: int, device: str) -> tuple[float, object]:
    result = function()
    seconds = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        result = function()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


def main() -> None:
    import pdbgym.nucleus as nucleus
    from pdbgym.engine.draw import draw_rows

    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    logits = real_logits(args.device)
    wide = torch.cat([logits, logits.min(-1, keepdim=True).values - 8 + torch.randn(
        logits.shape[0], 151_936 - logits.shape[1], device=args.device)], dim=-1)
    rows = logits.shape[0]
    temperature = torch.full((rows,), 0.7, device=args.device)
    top_p = torch.full((rows,), 0.9, device=args.device)
    seeds = torch.arange(rows, device=args.device)
    steps = torch.zeros(rows, dtype=torch.long, device=args.device)
    first_look = nucleus.FIRST_LOOK
    for name, batch in (("SmolLM2-135M logits, vocabulary 49,152", logits), ("the same, vocabulary 151,936", wide)):
        def draw(batch=batch):
            return draw_rows(batch, temperature, top_p, seeds, steps, ["processed"] * rows)

        nucleus.FIRST_LOOK = batch.shape[-1]  # the baseline: every row sorted whole
        before, (ids_before, lp_before) = timed(draw, args.repeats, args.device)
        nucleus.FIRST_LOOK = first_look
        after, (ids_after, lp_after) = timed(draw, args.repeats, args.device)
        assert torch.equal(ids_before, ids_after) and torch.allclose(lp_before, lp_after, atol=1e-6)
        probs = torch.softmax(batch / 0.7, -1)
        sizes = nucleus.nucleus_mask(torch.log(probs), 0.9).sum(-1).float()
        print(f"{name}, {rows} rows on {args.device}: full sort {before * 1e3:.2f} ms, first look of "
              f"{first_look} {after * 1e3:.2f} ms: {before / after:.2f}x (same draws; nucleus sizes "
              f"median {sizes.median():.0f}, max {sizes.max():.0f})")


if __name__ == "__main__":
    main()
