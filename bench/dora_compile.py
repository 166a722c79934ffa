"""What the fused DoRA function's compile costs a GRPO run's first update, two ways, each in a fresh process.

- ``autograd`` (the baseline, what ``pdbgym.train.dora`` did before): ``_combine`` compiled as it is and
  called on tensors that require gradients, so autograd has inductor trace the forward and the backward as
  one joint graph; a pass without gradients (grad mode off) compiles the function again;
- ``written`` (now, ``dora_combine``): the backward written out (``_combine_backward``), the forward and the
  backward each compiled as a plain function; a pass with or without gradients takes the same forward graph.

Each arm runs in a process of its own with inductor's caches off, so each compiles from nothing, as a fresh
machine's first GRPO update does. The calls are a small model's update at SmolLM2-135M's layer widths (576,
192 and 1,536 features): a forward with gradients and its backward at each width and several id counts,
then a forward without gradients. Printed: the seconds of those first calls (the compiles), the graphs
dynamo made, and the steady call's milliseconds afterwards (forward and backward, median of ``--steps``),
so a cheaper compile that ran slower kernels would show. The arms alternate ``--repeats`` times.

    python bench/dora_compile.py --device cuda --ids 8192 --repeats 2
    python bench/dora_compile.py --device cpu --ids 512              # the CPU's C++ code generation
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (576, 192, 1536)


def arm(name: str, device: str, ids: int, steps: int) -> dict[str, float]:
    import torch
    from torch._dynamo.utils import counters

    sys.path.insert(0, str(ROOT))
    from pdbgym.train import dora

    if name == "autograd":
        function = torch.compile(dora._combine, dynamic=True, fullgraph=True)

        def call(base, lora, scale):
            return function(base.reshape(-1, base.shape[-1]), lora.reshape(-1, base.shape[-1]), scale, 2.0)
    else:
        def call(base, lora, scale):
            return dora.dora_combine(base, lora, scale, 2.0, compiled=True)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def tensors(rows: int, width: int, grad: bool):
        generator = torch.Generator(device="cpu").manual_seed(rows * width)
        made = [torch.randn(rows, width, generator=generator).to(device, torch.bfloat16) for _ in range(2)]
        scale = (torch.rand(width, generator=generator) + 0.5).to(device)
        return [t.requires_grad_(grad) for t in (*made, scale)]

    def update(rows: int, width: int) -> None:
        base, lora, scale = tensors(rows, width, True)
        call(base, lora, scale).float().square().mean().backward()

    started = time.perf_counter()
    for rows in (ids // 2, ids, ids + ids // 3):  # a step's rows come in other lengths each time
        for width in WIDTHS:
            update(rows, width)
    with torch.no_grad():  # the old log-probs' pass (TRL scores them with the policy in train mode)
        call(*tensors(ids, WIDTHS[0], False))
    sync()
    compile_s = time.perf_counter() - started
    graphs = counters["stats"]["unique_graphs"]
    times = []
    for _ in range(steps):
        sync()
        began = time.perf_counter()
        for width in WIDTHS:
            update(ids, width)
        sync()
        times.append(time.perf_counter() - began)
    return {"compile_s": round(compile_s, 2), "graphs": graphs, "step_ms": round(statistics.median(times) * 1e3, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--ids", type=int, default=512, help="ids a forward (the rows' ids together)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--arm", default=None, help=argparse.SUPPRESS)  # one arm, in its own process
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm, args.device, args.ids, args.steps)))
        return
    env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    results: dict[str, list[dict[str, float]]] = {"autograd": [], "written": []}
    for _ in range(args.repeats):
        for name in results:
            done = subprocess.run([sys.executable, __file__, "--arm", name, "--device", args.device, "--ids",
                                   str(args.ids), "--steps", str(args.steps)], env=env, capture_output=True,
                                  text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"arm {name} failed:\n{done.stderr[-3000:]}")
            results[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(name, results[name][-1], flush=True)
    best = {name: {k: min(r[k] for r in runs) for k in runs[0]} for name, runs in results.items()}
    ratio = {k: round(best["autograd"][k] / best["written"][k], 2) for k in ("compile_s", "step_ms")}
    print(f"compile seconds: autograd {best['autograd']['compile_s']} / written {best['written']['compile_s']} "
          f"({ratio['compile_s']}x); graphs {best['autograd']['graphs']} / {best['written']['graphs']}; a step's "
          f"forward and backward at three widths: {best['autograd']['step_ms']} / {best['written']['step_ms']} ms "
          f"({ratio['step_ms']}x)")
    if args.json:
        args.json.write_text(json.dumps({"runs": results, "best": best, "autograd_over_written": ratio}, indent=2) + "\n")


if __name__ == "__main__":
    main()
