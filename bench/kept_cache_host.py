"""Host time of the engine's per-row cache work in a static session: keeping a row that ended (``kv.cut_row``),
placing prefilled rows (``kv.place_rows``) and moving the write head (``kv.set_head``), with the static cache's
layers in one tensor each (now, ``new_static_cache(stacked=True)``) against a tensor a layer (the baseline,
``stacked=False``), measured in one run, alone and beside ``--busy`` threads of pure Python. Also an empty
dynamic cache (``empty_cache``), which each kept row and prefill pass makes: copied from one made once
(``kv.new_dynamic_cache``, now) against made from the model's config (the baseline). Both arms keep rows
with today's ``new_dynamic_cache``, so the ``keep`` ratio is the stacking's alone.

Why: in a real GRPO step on an H100 a kept cache cost the engine's thread 7.9 ms of host time, of which under
1 ms in operators, against 2.6 ms in the engine-only bench (docs/benchmarks.md, sixth session). The same process
plays the step's episodes on other threads; every PyTorch call of the engine's thread gives up the interpreter's
lock and waits to take it back while they run Python. The busy threads here stand in for them: each runs
``--burst-ms`` of Python, then sleeps ``--sleep-ms`` (a turn's parsing, then its wait on the sandbox). On the
CPU the rows are short (``--positions``), so that the copies are small and the calls' host cost is what is timed.

    .venv/bin/python bench/kept_cache_host.py [--device cpu|cuda] [--busy 0,4] [--rounds 300] [--switch-ms 0.2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class Shaped(torch.nn.Module):
    """SmolLM2-135M's cache shape (30 layers, 3 key-value heads of 64): a config and one parameter, which is
    all ``new_static_cache`` reads of a model."""

    def __init__(self, device: str, dtype: torch.dtype):
        super().__init__()
        from transformers import LlamaConfig

        self.config = LlamaConfig(vocab_size=64, hidden_size=576, intermediate_size=64, num_hidden_layers=30,
                                  num_attention_heads=9, num_key_value_heads=3, head_dim=64)
        self.weight = torch.nn.Parameter(torch.zeros(1, device=device, dtype=dtype))


def busy(stop: threading.Event, burst_s: float, sleep_s: float) -> None:
    while not stop.is_set():
        end = time.perf_counter() + burst_s
        while time.perf_counter() < end:
            sum(i * i for i in range(200))
        time.sleep(sleep_s)


def timed(args: argparse.Namespace, stacked: bool, threads: int) -> dict[str, float]:
    from pdbgym.engine.kv import cut_row, new_dynamic_cache, new_static_cache, place_rows, set_head

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model = Shaped(args.device, dtype)
    cache = new_static_cache(model, args.slots, args.length, stacked=stacked)
    prefill = new_dynamic_cache(model)
    for index in range(len(cache.layers)):
        prefill.update(*(torch.randn(1, 3, args.positions, 64, device=args.device, dtype=dtype) for _ in range(2)), index)
    slot = torch.tensor([1], device=args.device)
    stop = threading.Event()
    workers = [threading.Thread(target=busy, args=(stop, args.burst_ms / 1e3, args.sleep_ms / 1e3), daemon=True)
               for _ in range(threads)]
    for worker in workers:
        worker.start()
    seconds: dict[str, list[float]] = {"keep": [], "place": [], "head": [], "empty_cache": []}
    from transformers import DynamicCache

    # an empty dynamic cache, as every kept row and prefill pass makes one: from the config each time (the
    # baseline arm) against a copy of one made once (new_dynamic_cache, now)
    empty = (lambda: new_dynamic_cache(model)) if stacked else (lambda: DynamicCache(config=model.config))
    try:
        for round_ in range(args.rounds):
            end = args.length - 1 - round_ % 8
            for name, call in (("keep", lambda e=end: cut_row(cache, model, 1, e - args.positions, e)),
                               ("place", lambda e=end: place_rows(cache, prefill, slot, e)),
                               ("head", lambda e=end: set_head(cache, e)), ("empty_cache", empty)):
                started = time.perf_counter()
                call()
                seconds[name].append(time.perf_counter() - started)
        if args.device == "cuda":
            torch.cuda.synchronize()
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    return {name: round(statistics.mean(values) * 1e3, 4) for name, values in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--busy", default="0,4", help="busy Python threads beside the engine's, comma-separated arms")
    parser.add_argument("--burst-ms", type=float, default=1.0)
    parser.add_argument("--sleep-ms", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--positions", type=int, default=16, help="positions of the row kept and the row placed")
    parser.add_argument("--switch-ms", type=float, default=None,
                        help="the interpreter's switch interval in ms for the run (sys.setswitchinterval; default: "
                             "Python's own, 5 ms): how long a thread that gave up the lock may wait to take it back")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.switch_ms is not None:
        sys.setswitchinterval(args.switch_ms / 1e3)
    out: dict[str, object] = {"device": args.device, "switch_interval_s": sys.getswitchinterval()}
    for threads in (int(x) for x in args.busy.split(",")):
        arms = {}
        for stacked in (False, True, False, True):  # each arm twice, interleaved; the better of the two kept
            name = "stacked" if stacked else "per_layer"
            result = timed(args, stacked, threads)
            arms[name] = {k: min(v, arms.get(name, {}).get(k, v)) for k, v in result.items()}
        ratio = {k: round(arms["per_layer"][k] / arms["stacked"][k], 2) for k in arms["stacked"]}
        out[f"busy_{threads}"] = {**arms, "per_layer_over_stacked": ratio}
        print(f"{threads} busy thread(s): ms a call, a tensor a layer (baseline) {arms['per_layer']}, "
              f"one tensor (now) {arms['stacked']}; baseline / now {ratio}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
