"""Peak memory and time: pdbgym's shard-wise adapter merge vs PEFT's in-memory merge_and_unload.

Builds a random Llama-shaped model (default ~0.7 B parameters, bf16, 5 safetensors shards) and a random
rank-16 DoRA (or LoRA) adapter on all seven linear projections in a temporary folder, then runs each
method in its own child process and reads that child's RSS high-water mark (VmHWM in /proc/self/status,
which includes file pages it touched). Baseline: PEFT (load base, PeftModel.from_pretrained,
merge_and_unload, save_pretrained). Both write a sharded model folder. Prints figures and ratios.

    .venv/bin/python bench/adapter_merge.py [--layers 24] [--methods dora,lora] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, VOCAB, RANK = 1536, 4096, 12, 4, 32000, 16
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _vm_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def _layer_shapes(layers: int) -> list[tuple[str, tuple[int, int]]]:
    head_dim = HIDDEN // HEADS
    per_layer = {
        "self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.k_proj": (KV_HEADS * head_dim, HIDDEN),
        "self_attn.v_proj": (KV_HEADS * head_dim, HIDDEN), "self_attn.o_proj": (HIDDEN, HIDDEN),
        "mlp.gate_proj": (INTERMEDIATE, HIDDEN), "mlp.up_proj": (INTERMEDIATE, HIDDEN),
        "mlp.down_proj": (HIDDEN, INTERMEDIATE),
    }
    shapes = [("model.embed_tokens.weight", (VOCAB, HIDDEN))]
    for layer in range(layers):
        shapes += [(f"model.layers.{layer}.{name}.weight", shape) for name, shape in per_layer.items()]
        shapes += [(f"model.layers.{layer}.input_layernorm.weight", (HIDDEN,)),
                   (f"model.layers.{layer}.post_attention_layernorm.weight", (HIDDEN,))]
    return shapes + [("model.norm.weight", (HIDDEN,)), ("lm_head.weight", (VOCAB, HIDDEN))]


def build_model(folder: Path, layers: int, shards: int) -> int:
    """Write random bf16 weights as ``shards`` safetensors files plus index and config; returns parameters."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig

    folder.mkdir(parents=True)
    LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=layers,
                num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, vocab_size=VOCAB,
                tie_word_embeddings=False, dtype="bfloat16").save_pretrained(folder)
    shapes = _layer_shapes(layers)
    per_shard = -(-len(shapes) // shards)
    weight_map, total, generator = {}, 0, torch.Generator().manual_seed(0)
    for index in range(shards):
        name = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {}
        for tensor_name, shape in shapes[index * per_shard:(index + 1) * per_shard]:
            tensor = torch.randn(shape, generator=generator) * 0.02 if len(shape) == 2 else torch.ones(shape)
            tensors[tensor_name] = tensor.to(torch.bfloat16)
            weight_map[tensor_name] = name
            total += tensor.numel()
        save_file(tensors, folder / name, metadata={"format": "pt"})
        del tensors
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total * 2}, "weight_map": weight_map}))
    return total


def build_adapter(folder: Path, model: Path, layers: int, use_dora: bool) -> None:
    """A random rank-16 adapter in PEFT's on-disk format (fp32 tensors, as trained adapters are saved)."""
    import torch
    from peft import LoraConfig
    from safetensors import safe_open
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(1)
    weights = dict(_layer_shapes(layers))
    index = json.loads((model / "model.safetensors.index.json").read_text())["weight_map"]
    tensors = {}
    for name, (out_features, in_features) in ((n, s) for n, s in weights.items() if n.split(".")[-2] in TARGETS):
        module = "base_model.model." + name.removesuffix(".weight")
        tensors[f"{module}.lora_A.weight"] = torch.randn(RANK, in_features, generator=generator) / in_features ** 0.5
        tensors[f"{module}.lora_B.weight"] = torch.randn(out_features, RANK, generator=generator) * 1e-3
        if use_dora:
            with safe_open(model / index[name], "pt") as handle:
                norms = torch.linalg.norm(handle.get_tensor(name).float(), dim=1)
            tensors[f"{module}.lora_magnitude_vector"] = norms * (1 + 0.01 * torch.randn(norms.shape, generator=generator))
    folder.mkdir(parents=True)
    save_file(tensors, folder / "adapter_model.safetensors")
    LoraConfig(r=RANK, lora_alpha=32, target_modules=TARGETS, use_dora=use_dora).save_pretrained(folder)


def child(method: str, model: Path, adapter: Path, out: Path, expected_hash: str) -> None:
    """Run one merge and print JSON: seconds, RSS after imports and peak RSS (KiB)."""
    if method == "pdbgym":
        import torch  # noqa: F401  (imported before the baseline reading, like the PEFT child's stack)

        from pdbgym.adapters.merge import StackLayer, merge_stack
        from pdbgym.adapters.peft_format import load_adapter
        after_imports = _vm_kib("VmRSS")
        start = time.perf_counter()
        merge_stack(model, [StackLayer("bench", "bench", load_adapter(adapter))], out, expected_hash, {})
    else:
        import torch
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
        after_imports = _vm_kib("VmRSS")
        start = time.perf_counter()
        base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16, use_kernels=False)
        merged = PeftModel.from_pretrained(base, adapter).merge_and_unload()
        merged.save_pretrained(out, max_shard_size="400MB")
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "rss_after_imports_kib": after_imports, "peak_rss_kib": _vm_kib("VmHWM")}))


def run_child(method: str, model: Path, adapter: Path, out: Path, expected_hash: str) -> dict[str, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    proc = subprocess.run([sys.executable, __file__, "--child", method, str(model), str(adapter), str(out),
                           expected_hash], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{method} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def max_relative_difference(ours: Path, theirs: Path, names: list[str]) -> float:
    """Largest |ours - theirs| / max|theirs| over the given tensors (bf16 rounding differences only)."""
    from safetensors import safe_open

    def locate(folder: Path, name: str) -> Path:
        if not (folder / "model.safetensors.index.json").is_file():
            return folder / "model.safetensors"
        index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
        return folder / index[name]

    worst = 0.0
    for name in names:
        with safe_open(locate(ours, name), "pt") as a, safe_open(locate(theirs, name), "pt") as b:
            x, y = a.get_tensor(name).float(), b.get_tensor(name).float()
        worst = max(worst, float((x - y).abs().max() / y.abs().max()))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--shards", type=int, default=5)
    parser.add_argument("--methods", default="dora,lora", help="adapter kinds to merge, comma separated")
    parser.add_argument("--keep", type=Path, default=None, help="work folder to keep (default: a temp dir)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="pdbgym_bench_merge_"))
    try:
        from pdbgym.adapters.fingerprint import weights_hash

        start = time.perf_counter()
        params = build_model(work / "base", args.layers, args.shards)
        size_gib = sum(p.stat().st_size for p in (work / "base").glob("*.safetensors")) / 2 ** 30
        print(f"model: {params / 1e9:.3f} B params, bf16, {size_gib:.2f} GiB in {args.shards} shards "
              f"(built in {time.perf_counter() - start:.0f} s); largest tensor {VOCAB * HIDDEN * 2 / 2**20:.0f} MiB")
        expected = weights_hash(work / "base")
        for kind in args.methods.split(","):
            build_adapter(work / f"adapter_{kind}", work / "base", args.layers, kind == "dora")
            results = {}
            for method in ("pdbgym", "peft"):
                out = work / f"out_{kind}_{method}"
                results[method] = run_child(method, work / "base", work / f"adapter_{kind}", out, expected)
                r = results[method]
                print(f"{kind:4s} {method:6s}: {r['seconds']:6.1f} s, peak RSS {r['peak_rss_kib'] / 2**20:5.2f} GiB "
                      f"({(r['peak_rss_kib'] - r['rss_after_imports_kib']) / 2**20:5.2f} GiB above imports)")
            ours, peft = results["pdbgym"], results["peft"]
            print(f"{kind:4s} ratio PEFT/pdbgym: peak RSS {peft['peak_rss_kib'] / ours['peak_rss_kib']:.2f}x, "
                  f"above imports {(peft['peak_rss_kib'] - peft['rss_after_imports_kib']) / max(1, ours['peak_rss_kib'] - ours['rss_after_imports_kib']):.2f}x, "
                  f"time {peft['seconds'] / ours['seconds']:.2f}x")
            probe = [f"model.layers.{i}.{m}.weight" for i in (0, args.layers - 1)
                     for m in ("self_attn.q_proj", "mlp.down_proj")]
            print(f"{kind:4s} outputs agree: max relative difference {max_relative_difference(work / f'out_{kind}_pdbgym', work / f'out_{kind}_peft', probe):.1e} (bf16 rounding)")
            for method in ("pdbgym", "peft"):
                shutil.rmtree(work / f"out_{kind}_{method}", ignore_errors=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]), sys.argv[6])
    else:
        main()
