"""Models a campaign loaded are released when it ends (``pdbgym.agent.policies.models_released_after``).

Every stage of an experiment plays its own models (four SFT candidates, GRPO's gates, four evaluated arms);
kept for the process's life with their engines' static caches, they filled an 80 GB GPU within one
experiment and the GRPO update beside them ran out of memory. Released, nothing holds them any more: the
test watches the model and its engine through weak references. (On an accelerator the executor releases
them after every local campaign; the CPU keeps them, so the tests here ask for the release on the CPU.)
"""

from __future__ import annotations

import gc
import shutil
import weakref

from pdbgym.agent.policies import build_backend, models_released_after, parse_policy
from pdbgym.engine import EngineRequest

REQUEST = EngineRequest([1, 2, 3, 4, 5], 6, temperature=0.9, seed=7)


def _played(backend) -> list[int]:
    return backend.engine.submit(REQUEST).result().ids


def _own_copy(tiny_model_dir, tmp_path):
    """The tiny model under a folder of this test's own: no other test has loaded it in this process."""
    return parse_policy(str(shutil.copytree(tiny_model_dir, tmp_path / "model")))


def test_a_model_loaded_in_the_block_and_its_engine_are_freed_and_load_again_alike(tiny_model_dir, tmp_path):
    spec = _own_copy(tiny_model_dir, tmp_path)
    with models_released_after(keep_cpu=False):
        backend = build_backend(spec)
        first = _played(backend)  # the engine's serving thread is running
        model, engine = weakref.ref(backend.model), weakref.ref(backend.engine)
        thread = backend.engine._thread
        del backend
    gc.collect()
    assert model() is None and engine() is None, "something still holds the released model"
    assert thread is not None and not thread.is_alive()
    with models_released_after(keep_cpu=False):
        again = build_backend(spec)
        assert again.model is not None and _played(again) == first  # loaded afresh, the same draw


def test_a_model_loaded_before_the_block_is_left_to_its_users(tiny_model_dir, tmp_path):
    spec = _own_copy(tiny_model_dir, tmp_path)
    with models_released_after(keep_cpu=False):
        outer = build_backend(spec)
        with models_released_after(keep_cpu=False):
            assert build_backend(spec) is outer  # loaded before this inner block: not its to release
        assert build_backend(spec) is outer and _played(outer)
    with models_released_after(keep_cpu=False):
        assert build_backend(spec) is not outer  # the outer block loaded it, and released it


def test_blocks_open_at_once_release_together_when_the_last_ends(tiny_model_dir, tmp_path):
    """Two campaigns in threads of one process: the first to end must not close the engine of a model the
    other is playing, even one it loaded itself (the other may have picked it up since)."""
    spec = _own_copy(tiny_model_dir, tmp_path)
    first, second = models_released_after(keep_cpu=False), models_released_after(keep_cpu=False)
    first.__enter__()
    second.__enter__()
    backend = build_backend(spec)  # loaded while both are open
    first.__exit__(None, None, None)
    assert build_backend(spec) is backend and _played(backend)  # still served: the second block is open
    model = weakref.ref(backend.model)
    del backend
    second.__exit__(None, None, None)
    gc.collect()
    assert model() is None


def test_models_on_the_cpu_stay_loaded_after_a_block_by_default(tiny_model_dir, tmp_path):
    spec = _own_copy(tiny_model_dir, tmp_path)
    with models_released_after():
        backend = build_backend(spec)
    assert build_backend(spec) is backend  # the same object: a CPU model is reused by the next campaign
    with models_released_after(keep_cpu=False):
        pass  # loaded before the block: stays
    assert build_backend(spec) is backend
