"""Registration is atomic: two processes claiming different parents for one adapter at the same moment
cannot both succeed; the loser is refused exactly as it would be one after the other."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path

import pytest
from adapters_testkit import shared_world

from pdbgym.adapters.errors import LineageError
from pdbgym.adapters.operations import register_path
from pdbgym.adapters.store import Store

ROUNDS = 6


@pytest.fixture
def world(tmp_path_factory):
    return shared_world(tmp_path_factory)


def _register(root: str, adapter: str, parent: str, barrier, results) -> None:
    """In a child process: wait for the other one, then register ``adapter`` on ``parent``."""
    store = Store(Path(root))
    barrier.wait(timeout=60)
    try:
        register_path(store, Path(adapter), parent, [], None)
        results.put((parent, "registered"))
    except LineageError as exc:
        results.put((parent, str(exc)))


def _sequential_refusal(prepared: Path, tmp_path: Path, adapter: Path, first: str, second: str) -> str:
    root = tmp_path / f"sequential-{first}"
    shutil.copytree(prepared, root)
    register_path(Store(root), adapter, first, [], None)
    with pytest.raises(LineageError) as refused:
        register_path(Store(root), adapter, second, [], None)
    return str(refused.value)


def test_concurrent_registrations_with_different_parents_have_one_winner(world, tmp_path):
    prepared = tmp_path / "prepared"
    setup = Store(prepared)
    register_path(setup, world.base, None, ["base"], None)
    register_path(setup, world.sft, "base", ["sft"], None)
    expected = {winner: _sequential_refusal(prepared, tmp_path, world.top, winner, loser)
                for winner, loser in (("base", "sft"), ("sft", "base"))}
    context = multiprocessing.get_context("fork")
    for round_index in range(ROUNDS):
        root = tmp_path / f"round-{round_index}"
        shutil.copytree(prepared, root)
        barrier, results = context.Barrier(2), context.Queue()
        workers = [context.Process(target=_register, args=(str(root), str(world.top), parent, barrier, results))
                   for parent in ("base", "sft")]
        for worker in workers:
            worker.start()
        outcomes = dict(results.get(timeout=120) for _ in workers)
        for worker in workers:
            worker.join(timeout=60)
        winners = [parent for parent, said in outcomes.items() if said == "registered"]
        assert len(winners) == 1, f"round {round_index}: {outcomes}"
        (loser,) = set(outcomes) - set(winners)
        assert outcomes[loser] == expected[winners[0]]
        stored_parent = Store(root).get(Store(root).resolve(_top_id(world.top)))["parent"]
        assert stored_parent == Store(root).resolve(winners[0])


def _top_id(folder: Path) -> str:
    from pdbgym.adapters.peft_format import adapter_content_hash, load_adapter

    return adapter_content_hash(load_adapter(folder))
