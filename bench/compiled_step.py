"""One static decode step three ways, at one shape, timed on the device: what inductor's fusion buys.

- ``captured``: the model's own kernels recorded in a CUDA graph (the engine's default, the baseline);
- ``compiled_eager``: the step compiled by inductor (``graphs="compiled"``), launched kernel by kernel
  without a graph: fewer kernels, each launch paid on the host;
- ``compiled_captured``: that compiled step recorded in the engine's own graph (what ``graphs="compiled"``
  does), or, where its compile or capture fails, the exception and its traceback.

Each is the median of ``--steps`` steps (CUDA events around each), after one warm-up, on a model of
``--shape``'s shape with random weights, bf16, every slot live and every position visible. Prints JSON with
each path's milliseconds a step, ``compile_seconds``, and the ratio of each to ``captured``.

    python bench/compiled_step.py --device cuda --slots 48 --length 2048
    python bench/compiled_step.py --device cpu --slots 4 --length 512 --steps 5   # a smoke run: no graphs

``--variant`` swaps what is compiled: ``engine`` (the engine's: each decoder layer through one compile of the
layers' code, its slot and position dimensions dynamic, the draw's own kernels recorded beside it), ``forward``
(the model's whole forward in one compile, what the engine did before), ``static`` (the forward compiled for this
shape alone), ``whole`` (the forward and the draw compiled together, which failed on an H100 with torch
2.11: inductor's GPU code generation refused the draw's integer hashing).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def step_ms(run, steps: int, cuda: bool = True) -> float:
    import torch

    run()
    times = []
    for _ in range(steps):
        if not cuda:  # the CPU's smoke run: wall time
            started = time.perf_counter()
            run()
            times.append((time.perf_counter() - started) * 1000)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return round(statistics.median(times), 3)


def compile_variant(variant: str, engine) -> None:
    """Swap ``engine``'s compiled step for ``variant``'s (the module docstring lists them)."""
    import torch

    from pdbgym.engine import static

    if variant == "engine":
        return
    if variant == "forward":  # the model's whole forward in one compile (the engine's before regional compiles)
        compiled = torch.compile(engine.model.forward, dynamic=None)
        static.compiled_forward = lambda model: compiled
        return
    if variant == "static":  # the forward compiled for this shape alone
        compiled = torch.compile(engine.model.forward, dynamic=False)
        static.compiled_forward = lambda model: compiled
        static._mark_dynamic = lambda shape: None
        return
    whole = torch.compile(static.decode_step, dynamic=None, fullgraph=False)  # the forward and the draw

    def step(model, shape, nucleus, engine=engine):
        return whole(engine._forward, model, shape.cache, shape.input_ids, shape.mask, shape.positions, shape.head,
                     shape.live, shape.temperature, shape.top_p, shape.seeds, shape.steps, shape.modes, nucleus)

    engine._step = step


def main() -> None:
    import torch
    from engine_throughput import random_model  # bench/: the SmolLM2-135M and Qwen3-4B shapes

    from pdbgym.engine import EngineSettings, LocalEngine
    from pdbgym.engine.attention import decode_attention
    from pdbgym.engine.static import _set_head

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", default="smollm2-135m")
    p.add_argument("--slots", type=int, default=48)
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--variant", default="engine", choices=["engine", "forward", "static", "whole"])
    args = p.parse_args()
    cuda = args.device.startswith("cuda")
    model = random_model(args.shape, args.device, torch.bfloat16 if cuda else torch.float32)
    out: dict = {"device": torch.cuda.get_device_name() if cuda else "cpu", "shape": args.shape, "variant": args.variant,
                 "slots": args.slots, "length": args.length}
    for graphs in ("capture", "compiled"):
        engine = LocalEngine(model, set(), 0, EngineSettings(static=True, graphs=graphs))
        if graphs == "compiled":
            compile_variant(args.variant, engine)
        with torch.inference_mode(), decode_attention(model):
            shape = engine._shape(model, args.slots, args.length)
            head = args.length - args.steps * 4 - 8
            shape.mask.fill_(True)
            shape.live.fill_(1)

            def restart(shape=shape, head=head) -> None:
                _set_head(shape, head)

            if graphs == "compiled":
                started = time.perf_counter()
                try:
                    restart()
                    engine._step(model, shape, False)  # the compile
                    torch.cuda.synchronize() if cuda else None
                    out["compile_seconds"] = round(time.perf_counter() - started, 1)
                    restart()
                    out["compiled_eager"] = step_ms(lambda e=engine, s=shape: e._step(model, s, False), args.steps,
                                                    cuda)
                except Exception:  # noqa: BLE001 - the probe's point: say why
                    out["compiled_eager_error"] = traceback.format_exc()[-6000:]
            if not cuda:  # no graphs on the CPU: the model's own step, launched as it is
                restart()
                if graphs == "capture":
                    out["eager"] = step_ms(lambda e=engine, s=shape: e._step(model, s, False), args.steps, cuda)
                engine.close()
                continue
            try:
                restart()
                engine._capture(model, shape, False, head)
                out["captured" if graphs == "capture" else "compiled_captured"] = step_ms(
                    shape.graphs[False].replay, args.steps)
            except Exception:  # noqa: BLE001
                out[f"{graphs}_capture_error"] = traceback.format_exc()[-6000:]
        engine.close()
    if "eager" in out and "compiled_eager" in out:
        out["compiled_eager_over_eager"] = round(out["compiled_eager"] / out["eager"], 3)
    if "captured" in out:
        out["over_captured"] = {k: round(out[k] / out["captured"], 3) for k in ("compiled_eager", "compiled_captured")
                                if k in out}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
