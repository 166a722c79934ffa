"""Which attention kernels the engines' batches may take: torch's switch is process-wide, so the engines
turn cuDNN off while any of them runs a batch and put the process's own setting back after the last; a run
that asks for cuDNN (``cudnn_attention(True)``) keeps it. The switch is a flag on any torch build, so
this runs on the CPU. The same holds for the decode attention a model's engines switch it to: overlapping blocks
on one model keep it until the last ends."""

from __future__ import annotations

import pytest
import torch

from pdbgym.engine.cuda import cudnn_attention, engine_attention


@pytest.fixture
def allowed():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


def test_overlapping_batches_keep_cudnn_off_until_the_last_ends_then_the_setting_comes_back(allowed):
    first, second = engine_attention(), engine_attention()
    first.__enter__()
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    second.__enter__()
    first.__exit__(None, None, None)  # the first ends while the second still runs: still off
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    second.__exit__(None, None, None)
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_a_run_that_asks_for_cudnn_keeps_it_in_its_engines_batches_and_a_run_without_it_loses_it(allowed):
    with cudnn_attention(True), engine_attention():
        assert torch.backends.cuda.cudnn_sdp_enabled()
    with cudnn_attention(False):
        with engine_attention():
            assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    with engine_attention():  # outside any run: the engines' default, off
        assert not torch.backends.cuda.cudnn_sdp_enabled()


def test_a_failing_batch_still_puts_the_setting_back(allowed):
    with pytest.raises(RuntimeError), engine_attention():
        raise RuntimeError("the batch failed")
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_a_run_and_an_engine_batch_that_overlap_in_either_order_leave_each_its_setting(allowed):
    """An engine batch on another thread may begin before a run's block and end inside it, or begin inside
    it and outlive it: while the run's block is in force its setting holds, and when both have ended the
    process's own comes back."""
    batch, run = engine_attention(), cudnn_attention(True)
    batch.__enter__()
    run.__enter__()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    batch.__exit__(None, None, None)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # the run asked for cuDNN
    run.__exit__(None, None, None)
    assert torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)  # a process that keeps cuDNN off, and a run that allows it
    run, batch = cudnn_attention(True), engine_attention()
    run.__enter__()
    batch.__enter__()
    run.__exit__(None, None, None)
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # the batch alone: off
    batch.__exit__(None, None, None)
    assert not torch.backends.cuda.cudnn_sdp_enabled()  # the process's own setting


def test_overlapping_decode_attention_blocks_on_one_model_keep_it_until_the_last_ends():
    """Two engines of one model: the first's session ends while the second's runs. Switched back to sdpa by the
    first, the second's compiled layers saw sdpa mid-session and compiled again."""
    from types import SimpleNamespace

    from pdbgym.engine.attention import ATTENTION, decode_attention

    model = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa"))
    first, second = decode_attention(model), decode_attention(model)
    assert first.__enter__() and model.config._attn_implementation == ATTENTION
    assert second.__enter__()
    first.__exit__(None, None, None)  # the first ends while the second still runs: still switched
    assert model.config._attn_implementation == ATTENTION
    second.__exit__(None, None, None)
    assert model.config._attn_implementation == "sdpa"
    eager = SimpleNamespace(config=SimpleNamespace(_attn_implementation="eager"))
    with decode_attention(eager) as switched:  # a model not on sdpa is left as it is
        assert not switched and eager.config._attn_implementation == "eager"
    with pytest.raises(RuntimeError), decode_attention(model):  # a failing batch still switches it back
        raise RuntimeError("batch failed")
    assert model.config._attn_implementation == "sdpa"
