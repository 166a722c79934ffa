"""Benchmark: pdbgym's chunked scorer against a bare forward and the naive full-logit path.

For each sequence length, in the same process and on the same random-weight model:

* ``bare``: the base model to final hidden states (no lm_head): the floor any scorer pays;
* ``naive``: ``model(ids).logits`` -> fp32 ``log_softmax`` -> gather (full [T, V] logits);
* ``pdbgym-all``: ``score_records`` scoring every position (lm_head over all T rows, chunked);
* ``pdbgym-mask``: ``score_records`` with a realistic loss mask (assistant turns only, ~30% of tokens).

Prints tokens/s and the peak memory above the weights for each, and the ratios against ``bare``.
``--cache-records N`` also scores an N-record synthetic cache of realistic lengths end to end (write
cache -> read_cache -> score -> report) and a bare forward over the same sequences. ``--devices N``
(with ``--cache-records``) runs ``pdbgym divergence``'s library call (``compare``) on that cache with 1
and with N data-parallel ranks in the same run, wall clock of the whole call each (process start, model
load, scoring, gather, report), and prints the speed-up and scaling efficiency (speed-up / N).

  GPU: python bench/divergence_scoring.py --shape qwen3-4b --lengths 8192,32768 --cache-records 100
  GPU, 4 ranks, ~4M tokens: python bench/divergence_scoring.py --shape qwen3-4b --phases bare --lengths 1024 \
       --cache-records 240 --devices 4
  CPU: python bench/divergence_scoring.py --shape small --lengths 1024,4096
On CPU each measurement runs in a child process and memory is the peak RSS growth.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

from pdbgym.divergence.scoring import ScoringConfig, score_records
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord

SHAPES = {
    # Qwen3-4B(-Instruct-2507): 4.02 B parameters.
    "qwen3-4b": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
                     intermediate_size=9728, vocab_size=151936, head_dim=128, tie_word_embeddings=True),
    # SmolLM2-135M-shaped, for the 2-core CPU machine.
    "small": dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                  intermediate_size=1536, vocab_size=49152, head_dim=64, tie_word_embeddings=True),
}
SEMANTICS = LogprobSemantics(engine="bench", temperature=0.7, top_p=0.9, top_p_renormalized=False)
GIB = 2**30


def build_model(shape: str, device: str):
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(max_position_embeddings=40960, **SHAPES[shape])
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=dtype)
    return model.eval()


def make_record(length: int, vocab: int, mask: str, seed: int) -> RolloutRecord:
    from pdbgym.rollouts.synthetic import synthetic_loss_mask

    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, vocab, size=length).tolist()
    prompt_len = 1 if mask == "all" else length // 5
    response = length - prompt_len
    loss_mask = np.ones(response, dtype=np.int64) if mask == "all" else synthetic_loss_mask(response, rng)
    loss_mask[-1] = 1  # the whole sequence runs through the model in every variant
    return RolloutRecord(instance_id="bench", dataset="bench", tokens=tokens, prompt_len=prompt_len,
                         response_length=response, loss_mask=loss_mask.tolist(),
                         rollout_log_probs=[0.0] * response)


def phase_fn(model, phase: str, length: int):
    """A callable running one measurement of ``phase`` on a fresh random sequence of ``length``."""
    vocab = model.config.vocab_size
    device = next(model.parameters()).device
    ids = torch.randint(0, vocab, (1, length), device=device)
    config = ScoringConfig(show_progress=False)
    if phase == "bare":
        return lambda: model.get_decoder()(input_ids=ids, use_cache=False).last_hidden_state
    if phase == "naive":
        def naive():
            logits = model(input_ids=ids, use_cache=False).logits[0, :-1]
            return torch.log_softmax(logits.float() / SEMANTICS.temperature, -1).gather(-1, ids[0, 1:, None])
        return naive
    record = make_record(length, vocab, "all" if phase == "pdbgym-all" else "realistic", seed=length)
    return lambda: score_records(model, [record], SEMANTICS, config)


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(model, phase: str, length: int, device: str, repeats: int) -> dict:
    """tokens/s (median of ``repeats`` after one warm-up) and peak memory above what was allocated."""
    run = phase_fn(model, phase, length)
    with torch.inference_mode():
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            run()
            sync(device)
            extra = torch.cuda.max_memory_allocated() - before
        else:
            before = rss_bytes()
            run()
            extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        times = []
        for _ in range(repeats):
            sync(device)
            start = time.perf_counter()
            run()
            sync(device)
            times.append(time.perf_counter() - start)
    return {"phase": phase, "tokens": length, "tokens_per_s": length / float(np.median(times)),
            "extra_memory_gib": extra / GIB}


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child_measure(args) -> None:
    model = build_model(args.shape, "cpu")
    print(json.dumps(measure(model, args.child, args.child_length, "cpu", args.repeats)))


def bare_pass(model, records, device: str) -> float:
    """Seconds for the base model over every record alone: no padding, no lm_head."""
    decoder = model.get_decoder()
    sync(device)
    start = time.perf_counter()
    with torch.inference_mode():
        for record in records:
            decoder(input_ids=torch.tensor([record.tokens], device=model.device), use_cache=False)
    sync(device)
    return time.perf_counter() - start


def cache_end_to_end(model, n_records: int, lengths: tuple[int, int], device: str) -> dict:
    """Write a synthetic cache, then: bare forward over it (baseline), pdbgym end to end (read_cache ->
    score_records -> build_report), and pdbgym's scorer with batching off."""
    from pdbgym.divergence.report import ReportConfig, SampleSet, StudentScores, build_report
    from pdbgym.divergence.scoring import masked_rollout_logprobs
    from pdbgym.rollouts.cache import read_cache
    from pdbgym.rollouts.synthetic import make_synthetic_cache

    with tempfile.TemporaryDirectory() as folder:
        make_synthetic_cache(folder, n_instances=n_records, vocab=model.config.vocab_size, lengths=lengths)
        bare = bare_pass(model, read_cache(folder), device)
        start = time.perf_counter()
        records = read_cache(folder)
        read_s = time.perf_counter() - start
        scored = score_records(model, records, SEMANTICS, ScoringConfig(show_progress=False))
        sync(device)
        score_s = time.perf_counter() - start - read_s
        teacher = [masked_rollout_logprobs(r) for r in records]
        report = build_report([StudentScores("bench", SampleSet([r.instance_id for r in records], teacher, scored))],
                              ReportConfig())
        elapsed = time.perf_counter() - start
    start = time.perf_counter()
    score_records(model, records, SEMANTICS, ScoringConfig(show_progress=False, token_budget=1))
    sync(device)
    unbatched_s = time.perf_counter() - start
    tokens = sum(len(r.tokens) for r in records)
    return {"records": len(records), "tokens": tokens, "scored_tokens": int(sum(len(s) for s in scored)),
            "bare_forward_s": bare, "end_to_end_s": elapsed, "read_cache_s": read_s, "score_s": score_s,
            "report_s": elapsed - read_s - score_s, "score_unbatched_s": unbatched_s,
            "tokens_per_s": tokens / elapsed, "end_to_end_vs_bare": bare / elapsed,
            "score_vs_bare": bare / score_s, "score_unbatched_vs_bare": bare / unbatched_s,
            "kl_fwd_mean": report["students"][0]["compat"]["kl_fwd_mean"]}


def data_parallel(shape: str, devices: int, n_records: int, lengths: tuple[int, int], device: str) -> dict:
    """Seconds of ``compare`` on one synthetic cache with 1 rank and with ``devices`` ranks; same report?"""
    from pdbgym.divergence.compare import DivergenceConfig, compare
    from pdbgym.rollouts.cache import read_cache
    from pdbgym.rollouts.synthetic import make_synthetic_cache

    with tempfile.TemporaryDirectory() as folder:
        model = build_model(shape, device)
        model.save_pretrained(f"{folder}/model")
        vocab = model.config.vocab_size
        del model
        cache = make_synthetic_cache(f"{folder}/cache", n_instances=n_records, vocab=vocab, lengths=lengths)
        tokens = sum(len(r.tokens) for r in read_cache(cache))
        seconds, reports = {}, {}
        for ranks in (1, devices):
            config = DivergenceConfig(students=[f"{folder}/model"], cache=cache, bootstrap=200,
                                      show_progress=False, devices=ranks)
            start = time.perf_counter()
            outcome = compare(config)
            seconds[ranks] = time.perf_counter() - start
            reports[ranks] = outcome.report if outcome is not None else None
    speedup = seconds[1] / seconds[devices]
    headline = [r["students"][0]["compat"]["kl_fwd_mean"] if r else None for r in (reports[1], reports[devices])]
    # Identical reports need the same kernels on both sides: on CPU that means the same thread count
    # per process (OMP_NUM_THREADS=1), as the tests run; otherwise the last digits may differ.
    return {"devices": devices, "records": n_records, "tokens": tokens, "one_rank_s": seconds[1],
            "n_ranks_s": seconds[devices], "speedup": speedup, "scaling_efficiency": speedup / devices,
            "same_report": reports[1] == reports[devices], "kl_fwd_mean_1_vs_n": headline}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--lengths", default="1024,4096")
    parser.add_argument("--phases", default="bare,naive,pdbgym-all,pdbgym-mask")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache-records", type=int, default=0)
    parser.add_argument("--cache-lengths", default="2048,32768", help="shortest,longest record (tokens)")
    parser.add_argument("--devices", type=int, default=1,
                        help="with --cache-records: also score it on N data-parallel ranks vs 1")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-length", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_measure(args)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else f"cpu x{os.cpu_count()}",
               "shape": args.shape, "rows": []}
    model = build_model(args.shape, device) if device == "cuda" else None
    for length in map(int, args.lengths.split(",")):
        rows = {}
        for phase in args.phases.split(","):
            if model is not None:
                rows[phase] = measure(model, phase, length, device, args.repeats)
            else:
                out = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--child", phase,
                                      "--child-length", str(length), "--repeats", str(args.repeats)],
                                     check=True, capture_output=True, text=True).stdout
                rows[phase] = json.loads(out.strip().splitlines()[-1])
        bare = rows.get("bare")
        for row in rows.values():
            if bare:
                row["throughput_vs_bare"] = row["tokens_per_s"] / bare["tokens_per_s"]
                row["memory_minus_bare_gib"] = row["extra_memory_gib"] - bare["extra_memory_gib"]
            print(f"{length:>6} {row['phase']:<12} {row['tokens_per_s']:>10.0f} tok/s  "
                  f"+{row['extra_memory_gib']:.2f} GiB  x{row.get('throughput_vs_bare', 1):.3f} of bare  "
                  f"{row.get('memory_minus_bare_gib', 0):+.2f} GiB vs bare", flush=True)
            results["rows"].append(row)
    if args.cache_records:
        model = model or build_model(args.shape, device)
        results["cache"] = cache_end_to_end(model, args.cache_records,
                                            tuple(map(int, args.cache_lengths.split(","))), device)
        print("cache end to end:", json.dumps(results["cache"]), flush=True)
    if args.cache_records and args.devices > 1:
        del model
        lengths = tuple(map(int, args.cache_lengths.split(",")))
        results["data_parallel"] = row = data_parallel(args.shape, args.devices, args.cache_records, lengths, device)
        print(f"data parallel: {row['tokens']} tokens, 1 rank {row['one_rank_s']:.1f} s, {args.devices} ranks "
              f"{row['n_ranks_s']:.1f} s: x{row['speedup']:.2f} ({row['scaling_efficiency']:.0%} efficiency), "
              f"same report: {row['same_report']} (kl_fwd_mean {row['kl_fwd_mean_1_vs_n']})", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
