"""The local engine on a tiny random model (CPU): log-probs equal a plain forward pass, rows batch and join
without changing what they sample, stops and budgets end rows, bad requests and failing calls are
reported to their callers, and the engine keeps serving after a failure."""

from __future__ import annotations

import copy
import time

import pytest
import torch

from pdbgym.engine import EngineError, EngineRequest, EngineResult, EngineSettings, LocalEngine
from pdbgym.nucleus import nucleus_logprobs

STOP = 299


def engine_of(model, static: bool) -> LocalEngine:
    return LocalEngine(model, {STOP}, 0, EngineSettings(static=static, min_length=64))


def forward_logprobs(model, request: EngineRequest, ids: list[int]) -> torch.Tensor:
    """What the engine should report for ``ids`` after ``request``'s prompt, from one plain forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([list(request.prompt_ids) + ids])).logits[0].float()
    steps = logits[len(request.prompt_ids) - 1:-1]
    tempered = torch.log_softmax(steps / request.temperature, -1)
    if request.logprob_mode == "processed":
        tempered = nucleus_logprobs(tempered, request.top_p)
    return tempered.gather(-1, torch.tensor(ids)[:, None])[:, 0]


REQUESTS = [EngineRequest(list(range(1, 4 + 9 * i)), 12, temperature=0.8, top_p=1.0 if i % 2 else 0.7, seed=i,
                          logprob_mode="processed" if i % 2 == 0 else "tempered") for i in range(5)]


@pytest.mark.parametrize("static", [False, True])
def test_logprobs_equal_a_plain_forward_pass_and_rows_sample_alike_alone_or_together(model, static):
    engine = engine_of(model, static)
    together = engine.generate(REQUESTS)
    for request, result in zip(REQUESTS, together, strict=True):
        assert 1 <= len(result.ids) <= request.max_new_tokens
        expected = forward_logprobs(model, request, result.ids)
        assert result.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
        if result.finish == "stop":
            assert result.ids[-1] == STOP and STOP not in result.ids[:-1]
        else:
            assert result.finish == "length" and len(result.ids) == request.max_new_tokens and STOP not in result.ids
    alone = [engine.generate([r])[0] for r in REQUESTS[:3]]
    assert [a.ids for a in alone] == [t.ids for t in together[:3]]
    engine.close()


def test_static_and_dynamic_paths_sample_the_same_ids(model):
    results = [engine_of(model, static).generate(REQUESTS) for static in (False, True)]
    assert [r.ids for r in results[0]] == [r.ids for r in results[1]]


class SubmitAtStep:
    """A mask that changes nothing but, at one step of its row, submits another request to the engine
    (from inside the decode loop, as a second episode asking for a turn would)."""

    def __init__(self, engine: LocalEngine, at: int, request: EngineRequest):
        self.engine, self.at, self.request = engine, at, request
        self.steps = 0
        self.future = None

    def apply(self, logits, left):
        self.steps += 1
        if self.steps == self.at:
            self.future = self.engine.submit(self.request)
        return logits

    def accept(self, token):
        return None


def test_a_request_arriving_mid_decode_joins_the_running_batch(model):
    engine = LocalEngine(model, set(), 0, EngineSettings(static=True, min_length=64))
    late = EngineRequest([5, 6, 7], 6, temperature=0.9, seed=11)
    hook = SubmitAtStep(engine, 4, late)
    first = engine.submit(EngineRequest([1, 2, 3, 4, 5, 6, 7, 8], 24, temperature=0.9, seed=10, mask=hook)).result()
    joined = hook.future.result()
    assert len(first.ids) == 24 and len(joined.ids) == 6
    assert engine.stats.batches == 1  # one session served both: the late request did not wait for the first
    assert engine.stats.to_dict()["mean_live_rows"] > 1
    assert joined.logprobs == pytest.approx(forward_logprobs(model, late, joined.ids).tolist(), abs=1e-4)
    assert joined.ids == engine.generate([late])[0].ids  # and it sampled what it samples alone


class Forbid:
    """A grammar mask that forbids some ids at every step (applied on the host, row by row)."""

    def __init__(self, ids: list[int]):
        self.ids = ids

    def apply(self, logits, left):
        logits[self.ids] = float("-inf")
        return logits

    def accept(self, token):
        return None


def test_a_static_session_with_a_masked_row_keeps_its_mask_and_the_others_draws(model):
    """Unmasked rows draw inside the recorded step and are read a step late; a grammar-masked row in the
    same session makes every step be read at once and that row drawn again on the host under its mask.
    Each row samples what it samples on the dynamic path, and the masked row never draws a forbidden id."""
    forbidden = list(range(0, 300, 2))
    requests = [*REQUESTS[:3], EngineRequest([9, 8, 7, 6], 10, temperature=1.0, seed=21, mask=Forbid(forbidden))]
    drawn = [engine_of(model, static).generate(requests) for static in (True, False)]
    assert [r.ids for r in drawn[0]] == [r.ids for r in drawn[1]]
    assert not set(drawn[0][3].ids) & set(forbidden)
    for request, result in zip(requests[:3], drawn[0][:3], strict=True):
        assert result.logprobs == pytest.approx(forward_logprobs(model, request, result.ids).tolist(), abs=1e-4)


class SubmitAtForward:
    """A forward hook submitting requests at given decode forwards (one id a row) of the model: turns that
    arrive while a step runs and the next is already launched, with no mask to make the steps synchronous."""

    def __init__(self, engine: LocalEngine, plan: dict[int, EngineRequest]):
        self.engine, self.plan, self.futures, self.calls = engine, plan, {}, 0

    def __call__(self, module, args, kwargs, output):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None and ids.shape[1] == 1:
            self.calls += 1
            if self.calls in self.plan:
                self.futures[self.calls] = self.engine.submit(self.plan[self.calls])


def test_turns_joining_a_pipelined_session_masked_or_not_sample_what_they_sample_alone(model):
    """Rows read a step late: turns admitted while a step is in flight, and a grammar-masked turn joining
    unmasked rows (from then on every step is read before the next), each sample what they sample alone,
    with a plain forward pass's log-probs; the masked turn never draws a forbidden id."""
    stops = set(range(240, 300))
    engine = LocalEngine(model, stops, 0, EngineSettings(static=True, min_length=64, admit_wait_s=0.0))
    first = [EngineRequest(list(range(1, 5 + 3 * i)), 20, temperature=1.0, seed=100 + i) for i in range(3)]
    forbidden = list(range(0, 300, 2))
    plan = {k: EngineRequest([7, 8, 9, k], 12, temperature=1.0, seed=500 + k) for k in (2, 4, 6)}
    plan[3] = EngineRequest([9, 8, 7], 12, temperature=1.0, seed=503, mask=Forbid(forbidden))
    hook = SubmitAtForward(engine, plan)
    handle = model.register_forward_hook(hook, with_kwargs=True)
    try:
        drawn = engine.generate(first)
        joined = {k: f.result() for k, f in hook.futures.items()}
    finally:
        handle.remove()
    assert set(joined) == set(plan) and engine.stats.batches == 1  # every turn joined the running session
    assert not set(joined[3].ids) & set(forbidden)
    dynamic = LocalEngine(model, stops, 0, EngineSettings(static=False))
    for request, result in [*zip(first, drawn, strict=True), *((plan[k], joined[k]) for k in plan)]:
        assert result.ids == dynamic.generate([request])[0].ids, request
        if request.mask is None:  # a masked row's log-probs are its masked distribution's
            assert result.logprobs == pytest.approx(forward_logprobs(model, request, result.ids).tolist(), abs=1e-4)


def test_free_slots_start_again_at_position_0_so_session_after_session_decodes(model):
    """A step moves only the occupied slots' positions on, and a freed slot starts again at 0. Moved on
    with the head, the free slots' positions grew session after session (a turn arriving before a session
    ends joins it) until a model with absolute position embeddings (here 128 of them) indexed past them."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    small = GPT2LMHeadModel(GPT2Config(vocab_size=300, n_positions=128, n_embd=32, n_layer=2, n_head=2)).eval()
    engine = LocalEngine(small, set(), 0, EngineSettings(static=True, min_length=64))
    assert engine.mode == "static"
    for i in range(10):
        assert len(engine.generate([EngineRequest([1, 2, 3], 20, seed=i)])[0].ids) == 20
        (shape,) = engine._shapes.values()
        assert int(shape.positions.max()) <= 3 + 20  # the last row's own, until its slot is freed


class SubmitAtSteps(SubmitAtStep):
    """``SubmitAtStep`` for several requests, each at its own step."""

    def __init__(self, engine: LocalEngine, plan: dict[int, EngineRequest]):
        super().__init__(engine, 0, None)
        self.plan, self.futures = plan, []

    def apply(self, logits, left):
        self.steps += 1
        if self.steps in self.plan:
            self.futures.append(self.engine.submit(self.plan[self.steps]))
        return logits


@pytest.mark.parametrize("wait, passes", [(0.0, 4), (60.0, 2)])
def test_requests_arriving_one_by_one_are_admitted_together_when_they_may_wait(model, wait, passes):
    """Three turns arrive at steps 4, 6 and 8 of a running row: admitted at once, each costs a prefill pass
    that holds up the live rows; allowed to wait, they join in one pass (here when the first row ends) and
    sample what they sample alone."""
    engine = LocalEngine(model, set(), 0, EngineSettings(static=True, min_length=64, admit_wait_s=wait))
    late = {step: EngineRequest([5, 6, 7 + step], 6, temperature=0.9, seed=step) for step in (4, 6, 8)}
    hook = SubmitAtSteps(engine, late)
    engine.submit(EngineRequest([1, 2, 3, 4, 5, 6, 7, 8], 24, temperature=0.9, seed=10, mask=hook)).result()
    joined = [future.result() for future in hook.futures]
    assert engine.stats.batches == 1 and engine.stats.prefills == passes
    for request, result in zip(late.values(), joined, strict=True):
        assert result.logprobs == pytest.approx(forward_logprobs(model, request, result.ids).tolist(), abs=1e-4)


LONG_PROMPT = EngineRequest([(7 * i) % 250 + 1 for i in range(300)], 6, temperature=0.9, seed=11)


def late_join(model, expected_prompt: int, session_bytes: int = 4 << 30) -> tuple[LocalEngine, EngineResult]:
    """A 24-id turn of an 8-id prompt, and at its 4th step a request whose prompt (300 ids) is longer
    than the first's: as an episode's later turn is, its context having grown."""
    engine = LocalEngine(model, set(), 0, EngineSettings(static=True, min_length=64, session_bytes=session_bytes))
    engine.expect(2, expected_prompt)
    late = LONG_PROMPT
    hook = SubmitAtStep(engine, 4, late)
    engine.submit(EngineRequest([1, 2, 3, 4, 5, 6, 7, 8], 24, temperature=0.9, seed=10, mask=hook)).result()
    joined = hook.future.result()
    assert joined.logprobs == pytest.approx(forward_logprobs(model, late, joined.ids).tolist(), abs=1e-4)
    return engine, joined


def test_a_longer_prompt_joins_a_running_session_when_its_length_was_expected(model):
    engine, joined = late_join(model, expected_prompt=512)
    assert engine.stats.batches == 1  # room below the head for the expected prompts: it joined
    deadline = time.monotonic() + 30  # the session has ended (its time is counted at its end): a request
    while not engine.stats.busy_seconds and time.monotonic() < deadline:  # sent now cannot join it
        time.sleep(0.01)
    engine.generate([LONG_PROMPT])  # alone (its ids may differ in a flip: the logits' last bits depend on the batch)
    assert engine.stats.batches == 2 and len(engine._shapes) == 1  # that session found its shape ready


@pytest.mark.parametrize("expected, session_bytes", [(0, 4 << 30), (512, 1 << 10)])
def test_a_longer_prompt_waits_for_the_session_without_an_expected_length_or_the_bytes_for_it(
        model, expected, session_bytes):
    engine, _ = late_join(model, expected_prompt=expected, session_bytes=session_bytes)
    assert engine.stats.batches == 2  # it did not fit below the head: a session of its own after the first


def test_bad_requests_are_refused_by_name(model):
    engine = engine_of(model, False)
    for bad, what in ((EngineRequest([], 4), "empty prompt"), (EngineRequest([1], 0), "max_new_tokens"),
                      (EngineRequest([1], 4, top_p=0.0), "top_p"), (EngineRequest([1], 4, temperature=-1), "temperature"),
                      (EngineRequest([1], 4, logprob_mode="vllm"), "logprob_mode")):
        with pytest.raises(EngineError, match=what):
            engine.submit(bad)


def test_a_failing_batch_reaches_its_callers_and_the_engine_serves_on(model):
    engine = engine_of(model, False)
    broken = engine.submit(EngineRequest([1, 2, 10_000], 4, seed=1))  # an id past the embedding table
    with pytest.raises(IndexError):
        broken.result(timeout=60)
    assert len(engine.generate([EngineRequest([1, 2, 3], 4, seed=1)])[0].ids) >= 1
    engine.close()
    with pytest.raises(EngineError, match="closed"):
        engine.submit(EngineRequest([1, 2, 3], 4))


@pytest.mark.parametrize("static", [False, True])
def test_weights_holding_nan_fail_the_request_by_name_instead_of_sampling_garbage(model, static):
    # What a training step with NaN gradients leaves behind: a NaN weight makes every logit NaN, and an
    # argmax over NaN still returns an id, so without the check every turn decoded id 0 to its budget.
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.model.layers[1].mlp.down_proj.weight[0, 0] = float("nan")
    engine = engine_of(broken, static)
    with pytest.raises(EngineError, match="logits are not finite .* in 2 of 2 rows"):
        engine.generate([EngineRequest([1, 2, 3], 4, seed=1), EngineRequest([4, 5, 6, 7], 4, seed=2)])
    engine.close()
    engine = engine_of(model, static)  # the same requests on the finite weights are served
    assert all(len(r.ids) >= 1 for r in engine.generate([EngineRequest([1, 2, 3], 4, seed=1)]))
    engine.close()


def test_greedy_rows_take_the_argmax_and_report_the_t1_logprob(model):
    engine = engine_of(model, True)
    request = EngineRequest([3, 4, 5], 5, temperature=0.0, seed=None, logprob_mode="processed")
    result = engine.generate([request])[0]
    with torch.no_grad():
        logits = model(torch.tensor([[3, 4, 5] + result.ids])).logits[0, 2:-1].float()
    assert result.ids[:len(logits)] == logits.argmax(-1).tolist()[:len(result.ids)]
    assert result.logprobs == pytest.approx(torch.log_softmax(logits, -1).gather(
        -1, torch.tensor(result.ids)[:, None])[:, 0].tolist(), abs=1e-4)


def test_a_cancelled_request_is_dropped_and_the_batch_goes_on(model):
    engine = engine_of(model, True)
    stopper = None

    class CancelAtStep(SubmitAtStep):
        def apply(self, logits, left):
            self.steps += 1
            if self.steps == 3:
                stopper.cancel()  # the caller of the other row gives up mid-decode (Ctrl-C)
            return logits

    hook = CancelAtStep(engine, 0, REQUESTS[0])
    stopper = engine.submit(EngineRequest([9, 8, 7], 30, temperature=0.9, seed=5))
    kept = engine.submit(EngineRequest([1, 2, 3], 12, temperature=0.9, seed=6, mask=hook))
    assert len(kept.result(timeout=60).ids) >= 1 and stopper.cancelled()
    assert engine.generate([EngineRequest([1, 2], 3, seed=1)])[0].ids  # the engine serves on


def next_turns(requests: list[EngineRequest], results, tool: list[int]) -> list[EngineRequest]:
    """Each episode's next turn: its prompt, what it sampled and a tool output, as an agent would send."""
    return [EngineRequest(list(r.prompt_ids) + res.ids + tool, 6, temperature=0.9, seed=r.seed + 100)
            for r, res in zip(requests, results, strict=True)]


def test_batched_episodes_prefill_only_each_turns_new_part_and_sample_what_a_fresh_prefill_samples(model):
    first = [EngineRequest(list(range(1, 5 + 7 * i)), 6, temperature=0.9, seed=i) for i in range(3)]
    reusing, fresh = (LocalEngine(model, {STOP}, 0, EngineSettings(static=False, reuse_prefix=r)) for r in (True, False))
    turns = [first]
    for tool in ([40, 41, 42], [43, 44]):
        results = reusing.generate(turns[-1])
        assert [r.ids for r in results] == [r.ids for r in fresh.generate(turns[-1])]
        for request, result in zip(turns[-1], results, strict=True):
            assert result.logprobs == pytest.approx(forward_logprobs(model, request, result.ids).tolist(), abs=1e-4)
        turns.append(next_turns(turns[-1], results, tool))
    # turns 2 and 3 reused every row's earlier prompt and every id it sampled but the last
    assert reusing.stats.batches == 2 and fresh.stats.reused_tokens == 0
    assert reusing.stats.reused_tokens == sum(len(r.prompt_ids) - 3 - 1 for r in turns[1])
    # a round where one row continues its episode and two are new: the new ones are prefilled together
    mixed = [turns[2][1], EngineRequest([9, 8, 7], 5, seed=7), EngineRequest([3, 3, 3, 3, 3], 4, seed=8)]
    before = reusing.stats.reused_tokens
    results = reusing.generate(mixed)
    assert reusing.stats.reused_tokens - before == len(turns[2][1].prompt_ids) - 2 - 1
    for request, result in zip(mixed, results, strict=True):
        assert result.logprobs == pytest.approx(forward_logprobs(model, request, result.ids).tolist(), abs=1e-4)
    assert [r.ids for r in results] == [r.ids for r in fresh.generate(mixed)]


@pytest.mark.parametrize("static,keeps_logits", [(False, True), (True, True), (False, False)])
def test_episodes_whose_new_parts_differ_in_length_continue_in_one_prefill_pass(model, static, keeps_logits):
    """Four episodes' next turns, tool outputs of 1 to 8 ids: one forward pass prefills every new part
    (right-padded after the joined prefixes), with the log-probs of a plain forward pass; also for a model
    whose forward() takes no ``logits_to_keep`` (every column's logits computed, each row's picked)."""
    engine = LocalEngine(model, {STOP}, 0, EngineSettings(static=static, min_length=64))
    if not keeps_logits:
        engine._keeps_logits = False
    first = [EngineRequest(list(range(1, 5 + 7 * i)), 6, temperature=0.9, seed=i) for i in range(4)]
    results = engine.generate(first)
    tools = [[40], [41, 42, 43, 44, 45], [46, 47], [48, 49, 50, 51, 52, 53, 54, 55]]
    second = [EngineRequest(list(r.prompt_ids) + res.ids + tool, 6, temperature=0.9, seed=r.seed + 100)
              for r, res, tool in zip(first, results, tools, strict=True)]
    prefills, reused = engine.stats.prefills, engine.stats.reused_tokens
    for request, result in zip(second, engine.generate(second), strict=True):
        assert result.logprobs == pytest.approx(forward_logprobs(model, request, result.ids).tolist(), abs=1e-4)
    assert engine.stats.prefills - prefills == 1
    assert engine.stats.reused_tokens - reused == sum(len(r.prompt_ids) + len(res.ids) - 1
                                                      for r, res in zip(first, results, strict=True))


def test_a_static_session_keeps_each_ended_row_so_its_episodes_next_turn_prefills_only_the_new_part(model):
    first = [EngineRequest(list(range(1, 5 + 7 * i)), 6, temperature=0.9, seed=i) for i in range(3)]
    reusing, fresh = (LocalEngine(model, {STOP}, 0, EngineSettings(static=True, min_length=64, reuse_prefix=r))
                      for r in (True, False))
    turns = [first]
    for tool in ([40, 41, 42], [43, 44]):
        results = reusing.generate(turns[-1])
        for request, result in zip(turns[-1], results, strict=True):
            assert result.logprobs == pytest.approx(forward_logprobs(model, request, result.ids).tolist(), abs=1e-4)
        assert [len(r.ids) for r in results] == [len(r.ids) for r in fresh.generate(turns[-1])]
        turns.append(next_turns(turns[-1], results, tool))
    # turn 2 joined a session with its rows' kept keys and values: only each tool output was prefilled
    assert reusing.stats.reused_tokens == sum(len(r.prompt_ids) - 3 - 1 for r in turns[1])
    assert fresh.stats.reused_tokens == 0 and reusing.stats.prefill_tokens < fresh.stats.prefill_tokens
    # one row continuing its episode and two new ones admitted together, placed as one joined cache
    reusing.forget_prefixes()  # the weights changed: nothing kept is reused
    assert not reusing.prefixes
    before = reusing.stats.reused_tokens
    last = reusing.generate(turns[2][1:2])
    assert reusing.stats.reused_tokens == before
    mixed = next_turns(turns[2][1:2], last, [45]) + [EngineRequest([9, 8, 7], 5, seed=7),
                                                     EngineRequest([3, 3, 3, 3, 3], 4, seed=8)]
    for request, result in zip(mixed, reusing.generate(mixed), strict=True):
        assert result.logprobs == pytest.approx(forward_logprobs(model, request, result.ids).tolist(), abs=1e-4)
    assert reusing.stats.reused_tokens - before == len(mixed[0].prompt_ids) - 1 - 1


def test_a_batchs_seconds_split_into_disjoint_parts_within_its_busy_time(model):
    """prefill, draw, decode steps, kept caches and static admission are timed apart: none is counted in
    another, so together they fit inside the batches' busy seconds."""
    for static in (True, False):
        engine = LocalEngine(model, {STOP}, 0, EngineSettings(static=static, min_length=64))
        first = [EngineRequest(list(range(1, 5 + 7 * i)), 6, temperature=0.9, seed=i) for i in range(3)]
        engine.generate(next_turns(first, engine.generate(first), [40, 41]))
        engine.close()  # a batch's busy seconds are added when it ends, after its last result went out
        stats = vars(engine.stats)  # unrounded: to_dict's milliseconds show a part under half of one as 0
        parts = ("prefill_seconds", "draw_seconds", "step_seconds", "keep_seconds", "admit_seconds")
        assert all(stats[part] > 0 for part in parts[:4]) and (stats["admit_seconds"] > 0) == static
        assert sum(stats[part] for part in parts) <= stats["busy_seconds"] + 1e-3, stats


def test_kept_caches_stay_within_the_byte_budget_but_a_whole_round_is_kept_for_its_next_turn(model):
    first = [EngineRequest(list(range(1, 9 + i)), 3, seed=i) for i in range(6)]
    reused = {}
    for budget in (1, 2 << 30):
        engine = LocalEngine(model, {STOP}, 0, EngineSettings(static=False, prefix_bytes=budget))
        results = engine.generate(first)  # six rows: more than PREFIXES_KEPT, all kept for their next turn
        second = next_turns(first, results, [40])
        results = engine.generate(second)
        assert engine.stats.reused_tokens == sum(len(r.prompt_ids) - 1 - 1 for r in second)
        engine.generate([EngineRequest([7, 7, 7], 2, seed=9)])  # a new episode's turn in between
        third = next_turns(second, results, [41])
        engine.generate(third)
        reused[budget] = engine.stats.reused_tokens - sum(len(r.prompt_ids) - 1 - 1 for r in second)
    # over budget only PREFIXES_KEPT caches stay: the new episode's and the three newest rows' (5, 4, 3)
    assert reused[1] == sum(len(third[i].prompt_ids) - 1 - 1 for i in (3, 4, 5))
    assert reused[2 << 30] == sum(len(r.prompt_ids) - 1 - 1 for r in third)


def test_a_dora_delta_decodes_with_its_norms_computed_once_a_round_and_the_same_logprobs(model, monkeypatch):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    dora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, use_dora=True, init_lora_weights=False,
                                                           target_modules=["q_proj", "v_proj"]))
    dora.train()  # as the GRPO trainer's policy is while it plays its rollouts
    layers = sum(1 for name, _ in dora.named_modules() if name.endswith("lora_magnitude_vector.default"))
    norms = []
    original = torch.linalg.norm
    monkeypatch.setattr(torch.linalg, "norm", lambda *a, **k: norms.append(1) or original(*a, **k))
    engine = LocalEngine(dora, {STOP}, 0, EngineSettings(static=False))
    request = EngineRequest([1, 2, 3, 4, 5], 8, temperature=0.9, seed=3)
    result = engine.generate([request])[0]
    assert len(norms) == layers  # once per layer for the round, not once per layer and decode step
    assert dora.training  # given back in train mode
    monkeypatch.setattr(torch.linalg, "norm", original)
    with torch.no_grad():
        logits = dora(torch.tensor([list(request.prompt_ids) + result.ids])).logits[0].float()
    expected = torch.log_softmax(logits[len(request.prompt_ids) - 1:-1] / 0.9, -1)
    assert result.logprobs == pytest.approx(expected.gather(-1, torch.tensor(result.ids)[:, None])[:, 0].tolist(), abs=1e-4)
    with torch.no_grad():  # a weight change between rounds is seen by the next round (no stale norms)
        for name, p in dora.named_parameters():
            if "lora_B" in name:
                p.add_(0.5)
    again = engine.generate([request])[0]
    with torch.no_grad():
        logits = dora(torch.tensor([list(request.prompt_ids) + again.ids])).logits[0].float()
    expected = torch.log_softmax(logits[len(request.prompt_ids) - 1:-1] / 0.9, -1)
    assert again.logprobs == pytest.approx(expected.gather(-1, torch.tensor(again.ids)[:, None])[:, 0].tolist(), abs=1e-4)


class CancelAnother:
    """A mask that forbids nothing; its ``accept`` cancels another row's future (as Ctrl-C or a cancelled
    episode does, from another thread, while that row's result is held for the end of the round)."""

    def __init__(self):
        self.victim = None

    def apply(self, logits, left):
        return logits

    def accept(self, token):
        if self.victim is not None and not self.victim.done():
            self.victim.cancel()


def test_a_cancelled_row_whose_result_is_held_does_not_fail_the_rest_of_the_round(model):
    engine = LocalEngine(model, {STOP}, 0, EngineSettings(static=False, window_s=0.2))
    hook = CancelAnother()
    first = engine.submit(EngineRequest([1, 2, 3], 1, seed=1))  # ends at its first id, held for the round
    hook.victim = first
    second = engine.submit(EngineRequest([4, 5, 6, 7], 6, seed=2, mask=hook))
    assert len(second.result(timeout=60).ids) >= 1
    assert first.cancelled()
    engine.close()


def test_with_a_dora_delta_no_row_returns_before_the_model_is_given_back(model):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    dora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, use_dora=True, init_lora_weights=False,
                                                           target_modules=["q_proj", "v_proj"])).train()
    engine = LocalEngine(dora, set(), 0, EngineSettings(static=False, window_s=0.2))
    short = engine.submit(EngineRequest([1, 2, 3], 1, seed=1))
    engine.submit(EngineRequest([4, 5, 6, 7], 40, seed=2))  # decodes long after the short row ends
    short.result(timeout=60)
    assert dora.training  # the short row's caller finds the model in training mode, its DoRA cache off
    from peft.tuners.lora import dora as peft_dora

    assert peft_dora.ENABLE_DORA_CACHING is False
    engine.close()


def test_forgotten_prefixes_are_not_reused_after_the_weights_change(model):
    engine = LocalEngine(model, {STOP}, 0, EngineSettings(static=False))
    first = [EngineRequest([1, 2, 3, 4], 3, seed=0), EngineRequest([5, 6, 7], 3, seed=1)]
    results = engine.generate(first)
    engine.forget_prefixes()
    engine.generate(next_turns(first, results, [40]))
    assert engine.stats.reused_tokens == 0
    engine.close()


def test_a_round_of_several_rows_continues_kept_caches_before_any_such_round_was_kept(model):
    """Episode A's first turn is served alone; its second turn then shares a round with episode B's first:
    A's turn continues its kept cache (GRPO's episodes arrive so when their environments step unevenly)."""
    engine = LocalEngine(model, {STOP}, 0, EngineSettings(static=False))
    a = EngineRequest(list(range(1, 30)), 6, temperature=0.0, seed=0)
    result = engine.generate([a])[0]
    second = next_turns([a], [result], [40, 41, 42])[0]
    b = EngineRequest(list(range(50, 71)), 6, temperature=0.0, seed=1)
    before = engine.stats.prefill_tokens
    engine.generate([second, b])
    assert engine.stats.reused_tokens == len(a.prompt_ids) + len(result.ids) - 1
    assert engine.stats.prefill_tokens - before == len(second.prompt_ids) - engine.stats.reused_tokens + len(b.prompt_ids)
    engine.close()


def test_twin_episodes_of_one_greedy_group_each_continue_their_own_kept_cache(model):
    """Two episodes of one prompt, greedy: they sample the same ids, so their kept prefixes are equal. A's third
    turn takes the longest kept cache (its own second turn's), not B's newer first-turn one, so B's second turn
    still finds a cache to continue: no turn after the first prefills its whole prompt."""
    engine = LocalEngine(model, {STOP}, 0, EngineSettings(static=False))
    tools = ([40, 41, 42], [43, 44])
    turns = {name: [EngineRequest(list(range(1, 30)), 6, temperature=0.0, seed=seed)] for seed, name in enumerate("ab")}
    kept: dict[str, int] = {}  # each episode's last turn: its prompt and every id it sampled but the last
    for name in "aabab":  # A's turns 1 and 2, B's turn 1, A's turn 3, B's turn 2
        request = turns[name][-1]
        reused, prefilled = engine.stats.reused_tokens, engine.stats.prefill_tokens
        result = engine.generate([request])[0]
        assert engine.stats.reused_tokens - reused == kept.get(name, 0)
        assert engine.stats.prefill_tokens - prefilled == len(request.prompt_ids) - kept.get(name, 0)
        kept[name] = len(request.prompt_ids) + len(result.ids) - 1
        if len(turns[name]) <= len(tools):
            turns[name].append(next_turns([request], [result], tools[len(turns[name]) - 1])[0])
    assert turns["a"][1].prompt_ids == turns["b"][1].prompt_ids  # twins: equal prompts, equal kept prefixes
    engine.close()
