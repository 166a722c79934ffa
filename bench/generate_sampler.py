"""A baseline sampler for the engine's benches: the turns of concurrent episodes batched through HF ``generate``.

``GenerateSampler`` takes the engine's requests (``submit``/``generate``/``expect``/``close``, ``stats``)
and serves them the way a plain transformers program would batch them: requests pending together (within
``window_s``, at most ``max_batch``, of one temperature and top-p) are left-padded into one ``generate``
call with a dynamic cache, run to the longest budget or until every row sampled a stop id, and each row
cut at its own budget and first stop. Nothing is kept between turns (each turn's whole prompt is
prefilled) and nothing is compiled. Log-probs come from the call's logits (``raw``, ``tempered``) or its
processed scores (``processed``), so records keep their semantics. Draws use torch's global generator,
not the engine's per-row hashed noise: episodes differ from the engine's, the workload does not.

``bench/engine_throughput.py episodes`` plays the same tasks and runs at the same concurrency through
this sampler and through the engine (``pdbgym.engine.shared.serve_with`` puts it behind the model's
backend), which is the comparison issue 41 asks for.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import torch

from pdbgym.engine import EngineError, EngineRequest, EngineResult, EngineStats

Pending = tuple[EngineRequest, "Future[EngineResult]", float]


class GenerateSampler:
    def __init__(self, model: Any, stops: set[int] | Sequence[int], pad_id: int, window_s: float = 0.003,
                 max_batch: int = 64):
        self.model, self.stops, self.pad_id = model, sorted(stops), pad_id
        self.window_s, self.max_batch = window_s, max_batch
        self.stats = EngineStats()
        self._pending: queue.SimpleQueue[Pending | None] = queue.SimpleQueue()  # None: close
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="generate-sampler", daemon=True)
        self._thread.start()

    def expect(self, rows: int, prompt_ids: int = 0) -> None:
        return None  # nothing to size: generate allocates per call

    def forget_prefixes(self) -> None:
        return None  # nothing kept between turns

    def submit(self, request: EngineRequest) -> Future[EngineResult]:
        request.check()
        if request.mask is not None:
            raise EngineError("the generate baseline samples without grammar masks")
        if self._closed:
            raise EngineError("the sampler is closed")
        future: Future[EngineResult] = Future()
        self._pending.put((request, future, time.perf_counter()))
        return future

    def generate(self, requests: Sequence[EngineRequest]) -> list[EngineResult]:
        return [f.result() for f in [self.submit(r) for r in requests]]

    def close(self) -> None:
        self._closed = True
        self._pending.put(None)
        self._thread.join(timeout=60)

    def _serve(self) -> None:
        held: list[Pending] = []  # taken from the queue, not yet played (another temperature than the batch's)
        while True:
            first = held.pop(0) if held else self._pending.get()
            if first is None:
                return
            time.sleep(max(0.0, first[2] + self.window_s - time.perf_counter()))
            closing = False
            while True:  # everything that arrived within the window
                try:
                    item = self._pending.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    closing = True
                    break
                held.append(item)
            key = (first[0].temperature, first[0].top_p)
            batch = [first] + [item for item in held if (item[0].temperature, item[0].top_p) == key]
            batch = batch[:self.max_batch]
            held = [item for item in held if item not in batch]
            self._play([item for item in batch if not item[1].cancelled()])
            if closing:
                for item in held:
                    self._play([item])
                return

    def _play(self, batch: list[Pending]) -> None:
        if not batch:
            return
        started = time.perf_counter()
        try:
            for (_, future, submitted), result in zip(batch, self._batch([b[0] for b in batch]), strict=True):
                result.queued_seconds = started - submitted
                if not future.cancelled():
                    future.set_result(result)
        except Exception as exc:  # noqa: BLE001 - every caller of the batch learns of it
            for _, future, _ in batch:
                if not future.done():
                    future.set_exception(exc)
        finally:
            self.stats.busy_seconds += time.perf_counter() - started
            self.stats.batches += 1

    def _batch(self, requests: list[EngineRequest]) -> list[EngineResult]:
        from transformers import GenerationConfig  # optional: transformers (pdbgym[hf])

        started = time.perf_counter()
        device = next(self.model.parameters()).device
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for i, r in enumerate(requests):
            ids[i, width - len(r.prompt_ids):] = torch.tensor(list(r.prompt_ids))
            mask[i, width - len(r.prompt_ids):] = 1
        temperature, top_p = requests[0].temperature, requests[0].top_p
        config = GenerationConfig(do_sample=temperature > 0, temperature=temperature or 1.0, top_p=top_p, top_k=0,
                                  max_new_tokens=max(r.max_new_tokens for r in requests), pad_token_id=self.pad_id,
                                  eos_token_id=self.stops or None, return_dict_in_generate=True, output_logits=True,
                                  output_scores=True)
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
        new = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, 1).float()  # [rows, steps, vocab]
        scores = torch.stack(out.scores, 1).float()
        seconds = time.perf_counter() - started
        self.stats.requests += len(requests)
        self.stats.prefills += 1
        self.stats.prefill_tokens += int(mask.sum())
        self.stats.decode_steps += new.shape[1]
        self.stats.row_steps += new.shape[1] * len(requests)
        results = []
        for i, r in enumerate(requests):
            row = new[i, :r.max_new_tokens].tolist()
            stop = next((j for j, t in enumerate(row) if t in self.stops), None)
            row = row[:stop + 1] if stop is not None else row
            if r.logprob_mode == "processed":
                table = scores[i, :len(row)]
            else:
                scale = temperature if r.logprob_mode == "tempered" and temperature > 0 else 1.0
                table = logits[i, :len(row)] / scale
            picked = torch.log_softmax(table, -1).gather(-1, torch.tensor(row, device=table.device)[:, None])[:, 0]
            self.stats.tokens += len(row)
            results.append(EngineResult(row, picked.cpu().tolist(), "stop" if stop is not None else "length",
                                        model_seconds=seconds, queued_seconds=0.0))
        return results
