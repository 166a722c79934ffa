"""Benchmark: reading and writing teacher caches, against the source evaluation's bare loader.

Baseline (``bare-torch-load``): what the source evaluation does, ``torch.load(weights_only=True)`` of
every ``.pt`` file a manifest lists, no checks. Measured in the same run, on the same synthetic cache:

* ``read_cache-pt``: pdbgym's reader over the same ``.pt`` folder (adds strict type conversion and the
  manifest/file identity check);
* ``load_validated_cache-pt``: read + full validation in one pass;
* ``read_parquet``: the same records from one Parquet file;
* ``read_cache-parquet``: a folder of per-instance Parquet files;
* writes: ``write_cache`` (.pt folder) and ``write_parquet``.

Prints seconds (best of ``--repeats`` interleaved rounds), tokens/s, the ratio of each read against the baseline (> 1:
faster), and sizes on disk; ``--json`` prints the same as JSON.

  python bench/cache_io.py --instances 100 --min-len 2000 --max-len 32000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pdbgym.rollouts.cache import entry_file, read_cache, read_manifest, write_cache
from pdbgym.rollouts.parquet import read_parquet, write_parquet
from pdbgym.rollouts.synthetic import make_synthetic_records
from pdbgym.rollouts.validate import load_validated_cache


def best_seconds(action: Callable[[], Any], repeats: int) -> float:
    """Fastest of ``repeats`` runs (the least disturbed by other load on the machine)."""
    return interleaved_best({"action": action}, repeats)["action"]


def interleaved_best(actions: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Fastest of ``repeats`` rounds per action, the actions taking turns within each round, so that
    load from other processes that comes and goes hits baseline and contenders alike."""
    best = {name: float("inf") for name in actions}
    for _ in range(repeats):
        for name, action in actions.items():
            start = time.perf_counter()
            action()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def bare_torch_load(folder: Path) -> list[Any]:
    return [torch.load(entry_file(folder, e), map_location="cpu", weights_only=True) for e in read_manifest(folder)]


def folder_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(instances: int, samples: int, lengths: tuple[int, int], repeats: int, seed: int) -> dict[str, Any]:
    records = make_synthetic_records(instances, samples, lengths=lengths, seed=seed)
    tokens = sum(len(r.tokens) for r in records)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        counter = iter(range(10**6))
        write_pt = best_seconds(lambda: write_cache(root / f"pt{next(counter)}", records), repeats)
        pt_dir = write_cache(root / "pt", records)
        write_pq = best_seconds(lambda: write_parquet(root / "all.parquet", records), repeats)
        pq_dir = write_cache(root / "pq", records, fmt="parquet")
        reads = {
            "bare-torch-load": lambda: bare_torch_load(pt_dir),
            "read_cache-pt": lambda: read_cache(pt_dir),
            "load_validated_cache-pt": lambda: load_validated_cache(pt_dir),
            "read_parquet": lambda: read_parquet(root / "all.parquet"),
            "read_cache-parquet": lambda: read_cache(pq_dir),
        }
        seconds = interleaved_best(reads, repeats)
        sizes = {"pt-folder": folder_bytes(pt_dir), "parquet-file": folder_bytes(root / "all.parquet"),
                 "parquet-folder": folder_bytes(pq_dir)}
    baseline = seconds["bare-torch-load"]
    return {
        "records": len(records), "tokens": tokens, "repeats": repeats, "baseline": "bare-torch-load",
        "read": {name: {"seconds": s, "tokens_per_s": tokens / s, "speedup_vs_baseline": baseline / s}
                 for name, s in seconds.items()},
        "write": {"write_cache-pt": write_pt, "write_parquet": write_pq},
        "bytes": sizes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--min-len", type=int, default=2000)
    parser.add_argument("--max-len", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.instances, args.samples, (args.min_len, args.max_len), args.repeats, args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['records']} records, {result['tokens']:,} tokens, best of {result['repeats']}")
    for name, row in result["read"].items():
        print(f"  read  {name:<24} {row['seconds']:7.3f} s  {row['tokens_per_s'] / 1e6:6.2f} M tok/s  "
              f"x{row['speedup_vs_baseline']:.2f} vs {result['baseline']}")
    for name, seconds in result["write"].items():
        print(f"  write {name:<24} {seconds:7.3f} s")
    for name, size in result["bytes"].items():
        print(f"  size  {name:<24} {size / 2**20:7.1f} MiB")


if __name__ == "__main__":
    main()
