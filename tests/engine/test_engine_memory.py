"""The engine on a device short of memory (CPU, a tiny random model): a batch that runs out of memory is
played again in smaller batches and its rows draw what they would have drawn; a row that cannot fit fails by
name; the static caches kept for reuse stay within their byte budget.

The shortage is the one thing simulated here: CPU tensors do not run out the way a shared GPU does, so the
model's forward raises PyTorch's own ``OutOfMemoryError`` where a device of that size would."""

from __future__ import annotations

import copy
import functools
import itertools

import torch

from pdbgym.engine import EngineError, EngineRequest, EngineSettings, LocalEngine

STOP = 299


def short_of_memory(model, fails):
    """A copy of ``model`` whose forward raises ``torch.OutOfMemoryError`` where ``fails(rows, call)``."""
    twin = copy.deepcopy(model)
    forward, calls = twin.forward, itertools.count(1)

    @functools.wraps(forward)
    def guarded(*args, **kwargs):
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        if fails(ids.shape[0], next(calls)):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")
        return forward(*args, **kwargs)

    twin.forward = guarded
    return twin


REQUESTS = [EngineRequest(list(range(1, 4 + 5 * i)), 10, temperature=0.9, seed=i) for i in range(6)]


def alone(model, static: bool) -> list[list[int]]:
    engine = LocalEngine(model, {STOP}, 0, EngineSettings(static=static, min_length=64))
    return [engine.generate([request])[0].ids for request in REQUESTS]


def test_a_batch_the_device_has_no_memory_for_is_played_again_in_smaller_batches(model):
    small = short_of_memory(model, lambda rows, call: rows > 2)  # room for two rows a batch
    engine = LocalEngine(small, {STOP}, 0, EngineSettings(static=False))
    results = engine.generate(REQUESTS)
    assert [r.ids for r in results] == alone(model, static=False)  # each row drew what it draws alone
    assert engine.stats.oom_retries >= 1 and engine._row_cap <= 2


def test_a_static_session_cut_short_by_the_device_replays_its_rows(model):
    once = short_of_memory(model, lambda rows, call: call == 5)  # mid-decode, once (another process's peak)
    engine = LocalEngine(once, {STOP}, 0, EngineSettings(static=True, min_length=64))
    results = engine.generate(REQUESTS)
    assert [r.ids for r in results] == alone(model, static=True)
    assert engine.stats.oom_retries == 1


def test_a_row_the_device_cannot_fit_fails_by_name_and_the_engine_serves_on(model):
    none = short_of_memory(model, lambda rows, call: call <= 3)  # no memory for its first three calls
    engine = LocalEngine(none, {STOP}, 0, EngineSettings(static=False))
    futures = [engine.submit(request) for request in REQUESTS[:2]]
    errors = [future.exception(timeout=60) for future in futures]
    assert all(isinstance(e, EngineError) and "ran out of memory" in str(e) for e in errors)
    assert len(engine.generate([REQUESTS[0]])[0].ids) >= 1  # memory came back: it serves again


def test_the_static_caches_kept_for_reuse_stay_within_twice_the_session_budget(model):
    prompts = [EngineRequest([i % 250 + 1 for i in range(n)], 4, temperature=0.9, seed=n) for n in (10, 300, 700, 1500)]
    default = LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64))
    for request in prompts:
        default.generate([request])
    assert len(default._shapes) >= 3  # a shape per length bucket, all kept within 4 GiB
    per_position = default._slot_position_bytes(model)
    one = min(slots * length for slots, length in default._shapes) * per_position
    tight = LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64, session_bytes=one))
    got = [tight.generate([request])[0].ids for request in prompts]
    kept = sum(slots * length for slots, length in tight._shapes) * per_position
    assert kept <= 2 * one or len(tight._shapes) == 1  # the least recently used dropped
    assert len(tight._shapes) < len(default._shapes)
    again = LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64))
    assert got == [again.generate([request])[0].ids for request in prompts]  # what it draws is unchanged
