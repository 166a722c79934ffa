"""Data-parallel divergence scoring: ``pdbgym divergence --devices N``, or the same flags under torchrun.

Every rank runs the whole comparison (reads the cache, loads each model in turn on its own device) but
scores only its shard of each scoring pass: the forward batches ``score_records`` would run over the
whole cache (``plan_record_batches``) are dealt to ranks by padded-token cost, longest first, and the
per-token results are all-gathered back into record order. A record's values depend only on the
batch it ran in, so the gathered arrays equal a one-process run's, and rank 0 builds the same report
(identical to the last digit on CPU in fp32). Student samples are drawn round-robin over ranks with
the per-prompt seeds of the one-process run. Only rank 0 writes the resume folder; every rank follows
rank 0's "already stored?" answer so all enter the same collectives.

Launch: ``pdbgym divergence ... --devices N`` spawns N processes on this host (nccl on CUDA, one GPU
each; gloo on CPU); ``torchrun --nproc-per-node N -m pdbgym.divergence ...`` (the same
flags) runs the same code in torchrun's processes (``pdbgym/divergence/__main__.py``).

This module knows nothing of the comparison itself: ``compare`` hands it ``compare_here``, the
one-process comparison each rank runs with its ``Execution`` hooks.
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

import numpy as np

from pdbgym.divergence.config import DivergenceConfig, DivergenceOutcome
from pdbgym.divergence.pipeline import Execution
from pdbgym.divergence.sampling import generate_samples, with_own_logprobs
from pdbgym.divergence.scoring import ScoringConfig, plan_record_batches, record_lengths, score_records
from pdbgym.errors import PdbgymError
from pdbgym.modelload import pick_device
from pdbgym.policyname import is_server_url
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedModel

Part = TypeVar("Part")  # what each rank holds by index: score arrays or samples

# compare_here(config, execution, build_report): one rank's comparison (None where no report is built)
RunHere = Callable[[DivergenceConfig, Execution, bool], DivergenceOutcome | None]


class DevicesError(PdbgymError):
    """A data-parallel run was asked for devices or a layout it cannot use."""


def shard_batches(batches: Sequence[Sequence[int]], lengths: Sequence[int], world: int) -> list[list[list[int]]]:
    """Deal forward ``batches`` (lists of record indices) to ``world`` ranks, balancing padded tokens.

    Greedy longest-processing-time: batches by cost (rows x longest row) descending, ties by plan
    position, each to the rank with the least cost so far (ties: lowest rank). Deterministic, so every
    rank computes the same deal; each rank's batches keep plan order.
    """
    if world < 1:
        raise ValueError(f"world must be >= 1, got {world}")
    cost = [len(b) * max((lengths[i] for i in b), default=0) for b in batches]
    loads = [0] * world
    owned: list[list[int]] = [[] for _ in range(world)]
    for position in sorted(range(len(batches)), key=lambda p: (-cost[p], p)):
        rank = min(range(world), key=lambda r: (loads[r], r))
        loads[rank] += cost[position]
        owned[rank].append(position)
    return [[list(batches[p]) for p in sorted(positions)] for positions in owned]


class DataParallel:
    """The ``Execution`` hooks of one rank of an initialized torch.distributed process group."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    def execution(self) -> Execution:
        return Execution(score=self.score, sample=self.sample, writes=self.rank == 0, agree=self.agree)

    def agree(self, found: bool) -> bool:
        import torch.distributed as dist  # optional: torch (pdbgym[hf])

        box = [found]
        dist.broadcast_object_list(box, src=0)
        return bool(box[0])

    def _gather(self, part: dict[int, Part]) -> dict[int, Part]:
        import torch.distributed as dist  # optional: torch (pdbgym[hf])

        parts: list[dict[int, Part] | None] = [None] * self.world
        dist.all_gather_object(parts, part)
        filled = cast(list[dict[int, Part]], parts)  # every rank's part, in rank order
        return {index: value for piece in filled for index, value in piece.items()}

    def score(self, model: PreTrainedModel, records: Sequence[RolloutRecord], semantics: LogprobSemantics,
              config: ScoringConfig | None = None) -> list[np.ndarray]:
        """``score_records`` over this rank's shard of the planned batches, gathered in record order."""
        config = config or ScoringConfig()
        mine = shard_batches(plan_record_batches(records, config), record_lengths(records), self.world)[self.rank]
        local = score_records(model, records, semantics, config, batches=mine)
        gathered = self._gather({i: local[i] for batch in mine for i in batch})
        return [gathered.get(i, np.zeros(0)) for i in range(len(records))]

    def sample(self, model: PreTrainedModel, prompts: Sequence[RolloutRecord], semantics: LogprobSemantics,
               max_new_tokens: int, sampler_name: str, seed: int = 0,
               scoring: ScoringConfig | None = None) -> list[RolloutRecord]:
        """``sample_continuations``: prompts round-robin over ranks, then scored by ``score``."""
        indices = list(range(self.rank, len(prompts), self.world))
        local = generate_samples(model, prompts, semantics, max_new_tokens, sampler_name, seed, indices)
        gathered = self._gather(dict(zip(indices, local, strict=True)))
        samples = [gathered[i] for i in range(len(prompts))]
        return with_own_logprobs(samples, self.score(model, samples, semantics, scoring))


def launched_by_torchrun() -> bool:
    """True inside a process that torchrun (or another launcher setting its env) started."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and "RANK" in os.environ


def compare_on_devices(config: DivergenceConfig, run_here: RunHere) -> DivergenceOutcome | None:
    """``compare`` over ``config.devices`` ranks: torchrun's world when launched by it, else spawned.
    Each rank runs ``run_here`` (a module-level function: spawned ranks import it by name).

    Returns rank 0's outcome (None on the other ranks of a torchrun world)."""
    if launched_by_torchrun():
        world = int(os.environ["WORLD_SIZE"])
        if config.devices not in (1, world):
            raise DevicesError(f"--devices {config.devices} under a launcher of {world} processes; "
                               f"leave --devices out or give {world}")
        return _rank_main(config, run_here)
    return _spawn(config, run_here)


def _device_of(config: DivergenceConfig, local_rank: int, world: int) -> str:
    import torch  # optional: torch (pdbgym[hf])

    wanted = config.device or pick_device()
    if wanted == "cpu":
        return "cpu"
    if config.device not in (None, "cuda"):
        raise DevicesError(f"--device {wanted} with several devices: give --device cuda (rank r uses "
                           "cuda:r) or cpu")
    if torch.cuda.device_count() < world:
        raise DevicesError(f"{world} ranks but only {torch.cuda.device_count()} visible GPU(s); lower --devices")
    return f"cuda:{local_rank}"


def _check(config: DivergenceConfig) -> None:
    if config.teacher is not None and is_server_url(config.teacher):
        raise DevicesError("a teacher server scores on its own machines; run a server teacher with --devices 1")
    if config.teacher_device_map is not None:
        raise DevicesError("--teacher-device-map spreads one teacher over every GPU, which data-parallel ranks "
                           "(one GPU each) cannot share; use it with --devices 1")


def _rank_main(config: DivergenceConfig, run_here: RunHere) -> DivergenceOutcome | None:
    import torch  # heavy: only ranks load it
    import torch.distributed as dist  # optional: torch (pdbgym[hf])

    _check(config)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = _device_of(config, local_rank, world)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    try:
        ranked = replace(config, device=device, devices=1, show_progress=config.show_progress and rank == 0)
        outcome = run_here(ranked, DataParallel(rank, world).execution(), rank == 0)
        if owned:
            # Ranks leave together: a rank tearing its gloo pairs down while rank 0 still builds the
            # report could abort in gloo's teardown ("terminate called without an active exception").
            dist.barrier()
        return outcome
    finally:
        if owned:
            dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _worker(rank: int, config: DivergenceConfig, world: int, port: int, folder: str, run_here: RunHere) -> None:
    import torch  # optional: torch (pdbgym[hf])

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    # N processes share the host's cores; oversubscribed threads only slow every rank down.
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // world)))
    try:
        outcome = _rank_main(config, run_here)
    except Exception as exc:
        Path(folder, f"error-{rank}.pkl").write_bytes(pickle.dumps(exc))
        raise
    if rank == 0:
        Path(folder, "outcome.pkl").write_bytes(pickle.dumps(outcome))


def _spawn(config: DivergenceConfig, run_here: RunHere) -> DivergenceOutcome:
    """Run ``config.devices`` ranks as child processes on this host; rank 0's outcome."""
    import torch.multiprocessing as mp  # optional: torch (pdbgym[hf])

    _check(config)
    with tempfile.TemporaryDirectory(prefix="pdbgym-dp-") as folder:
        try:
            mp.start_processes(_worker, args=(config, config.devices, _free_port(), folder, run_here),
                               nprocs=config.devices, start_method="spawn")
        except mp.ProcessRaisedException:
            errors = sorted(Path(folder).glob("error-*.pkl"))
            if errors:  # the rank's own error (a PdbgymError says what to do), not a traceback string
                raise pickle.loads(errors[0].read_bytes()) from None
            raise
        return pickle.loads(Path(folder, "outcome.pkl").read_bytes())
