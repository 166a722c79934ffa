"""A local model's episodes over several processes, each with its own copy of the model and its own engine.

One process plays ``local_episodes`` at once in threads, so every turn's host work (rendering and
tokenizing the conversation, the agent loop, the engine's scheduling) shares one interpreter. On a GPU
that interpreter, not the device, bounded a held-out campaign: with 160 episodes in one process an
episode took about 150 s and the GPU sat mostly idle, while two processes of 96 each played 100
episodes a minute apiece (``docs/runs/2026-12-06-smollm2-ladder-seeds-run3.md``). ``Spread`` gives
the jobs to ``processes`` spawned children instead:

- **Which child plays what.** The jobs, ordered by policy, are cut into one contiguous share per child,
  so a child loads as few models as it can (four arms over four children: one model each). A child
  whose share is done takes jobs from the others' (work stealing), so a share of slower episodes does
  not leave the other children idle at the end.
- **Results stream back** the moment each job ends, down a pipe per child (the caller
  saves each at once, as for jobs played in this process). A child marks each job it takes in shared
  memory before playing it, so a child that dies (killed, out of memory) costs only the jobs it had in
  flight: each comes back as a failed job naming the exit code, and its untaken share is played by the
  others.
- **Stopping.** The parent's Ctrl-C (or the caller leaving the loop) sends each child SIGTERM, which
  ends its episodes cleanly (``pdbgym.interrupts``); a child still running after ``grace`` seconds is
  killed. A child whose parent dies stops on its own (``end_with_parent``).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING

from pdbgym.fdwait import raise_descriptor_limit
from pdbgym.interrupts import end_with_parent, stop_on_sigterm, stop_requested

if TYPE_CHECKING:  # annotations only
    from multiprocessing.sharedctypes import Array, Synchronized

    from pdbgym.agent.jobs import EpisodeJob, JobResult

    Play = Callable[[EpisodeJob], JobResult]
    Ended = tuple[EpisodeJob, JobResult | None, BaseException | None]  # a job, its result or what stopped it



def shares(jobs: list[EpisodeJob], processes: int) -> list[list[int]]:
    """Job indices cut into ``processes`` contiguous shares of the policy-ordered list, sizes within one.

    Ordering by policy (policies as they first appear, each one's jobs in their order) keeps each model in as few
    children as the counts allow; a policy's jobs are never interleaved with another's inside a share.
    """
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    groups: dict[str, list[int]] = {}  # each policy's jobs, policies in the order they first appear
    for index, job in enumerate(jobs):
        groups.setdefault(_policy_key(job), []).append(index)
    order = [index for group in groups.values() for index in group]
    size, extra = divmod(len(order), processes)
    cut, start = [], 0
    for share in range(processes):
        end = start + size + (1 if share < extra else 0)
        cut.append(order[start:end])
        start = end
    return cut


def _policy_key(job: EpisodeJob) -> str:
    policy = job.policy
    return f"{policy.kind}\0{policy.target}\0{policy.device}"


class Spread:
    """``jobs`` played in ``processes`` spawned children, ``local`` at once in each.

    ``poll`` returns the jobs that ended since the last call (waiting up to ``timeout`` for the first),
    ``finished`` says whether every job came back, ``stop`` ends the children's episodes (SIGTERM, then
    SIGKILL after ``grace`` seconds). Each child sends its results down a pipe of its own, each send
    whole before the next job starts, so what a child finished reaches this process even if it is
    killed the moment after.
    """

    def __init__(self, jobs: list[EpisodeJob], play: Play, processes: int, local: int, *,
                 grace: float, descriptors: int = 0, torch_threads: int | None = None) -> None:
        context = multiprocessing.get_context("spawn")  # torch's thread pools and CUDA do not survive fork
        self.jobs, self.grace = jobs, grace
        self.cut = [share for share in shares(jobs, processes) if share]
        self.counters = [context.Value("i", 0) for _ in self.cut]
        # which child took each job (-1: none yet), written under the share's lock when the job is taken:
        # shared memory, not a message, so a child killed at once still tells what it had taken
        self.owners = context.RawArray("i", [-1] * len(jobs))
        threads = torch_threads or max(1, (os.cpu_count() or 1) // max(1, len(self.cut)))
        self.children: list[multiprocessing.process.BaseProcess] = []
        self.readers: dict[int, Connection] = {}  # child -> the end its results arrive on, until it closes
        self.left = set(range(len(jobs)))
        try:
            for n in range(len(self.cut)):
                reader, writer = context.Pipe(duplex=False)
                self.readers[n] = reader
                child = context.Process(target=_child, name=f"pdbgym-local-{n}", daemon=False,
                                        args=(n, jobs, self.cut, self.counters, self.owners, writer, play, local,
                                              grace, descriptors, threads))
                self.children.append(child)
                child.start()
                writer.close()  # the child holds the only writing end: its exit closes the pipe
        except BaseException:  # Ctrl-C (or a failed start) while starting: no child is left playing
            self.children = [child for child in self.children if child.pid is not None]
            self.stop()
            self.close()
            raise

    @property
    def finished(self) -> bool:
        return not self.left

    def poll(self, timeout: float) -> list[Ended]:
        done: list[Ended] = []
        ready = set(wait([*self.readers.values(), *(c.sentinel for c in self.children if c.exitcode is None)],
                         timeout))
        for n, reader in list(self.readers.items()):
            if reader in ready or not self.children[n].is_alive():
                done += self._read(n, block=False)
        done += self._lost()
        if self.finished:
            for child in self.children:
                child.join()
        return done

    def terminate(self) -> None:
        """Tell every child to end its episodes (SIGTERM); ``stop`` waits for them."""
        _signal(self.children, signal.SIGTERM)

    def stop(self) -> None:
        """End the children's episodes: SIGTERM, up to ``grace`` seconds to unwind, then SIGKILL."""
        _signal(self.children, signal.SIGTERM)
        with suppress(KeyboardInterrupt):  # a second Ctrl-C stops the waiting, not the killing below
            deadline = time.monotonic() + self.grace
            for child in self.children:
                child.join(timeout=max(0.0, deadline - time.monotonic()))
        for child in self.children:
            if child.is_alive():  # an episode that did not end in time: its sandbox dies with its process
                child.kill()
                child.join()

    def close(self) -> None:
        for reader in self.readers.values():
            reader.close()
        self.readers.clear()

    def _read(self, n: int, *, block: bool) -> list[Ended]:
        """What child ``n`` has sent; until its pipe closes when ``block`` (a child that has ended)."""
        reader, done = self.readers[n], []
        try:
            while block or reader.poll():
                index, result, error = reader.recv()
                self.left.discard(index)
                done.append((self.jobs[index], result, error))
        except (EOFError, OSError):  # the child ended and everything it sent was read
            reader.close()
            del self.readers[n]
        return done

    def _lost(self) -> list[Ended]:
        """Once a child has ended and its pipe is read: the jobs it had taken and not finished, as failures."""
        gone = {n for n, child in enumerate(self.children) if not child.is_alive()}
        done: list[Ended] = []
        for n in gone & set(self.readers):
            done += self._read(n, block=True)
        for index in sorted(self.left):
            owner = self.owners[index]
            if owner in gone:
                self.left.discard(index)
                done.append((self.jobs[index], None, RuntimeError(
                    f"the process playing this episode (pdbgym-local-{owner}) ended with exit code "
                    f"{self.children[owner].exitcode} before the episode did (killed, or out of memory); "
                    "run again to play it (campaigns resume)")))
        if len(gone) == len(self.children) and self.left:  # nobody is left to take the rest
            for n, share in enumerate(self.cut):
                with self.counters[n].get_lock():
                    untaken, self.counters[n].value = share[self.counters[n].value:], len(share)
                for index in untaken:
                    self.left.discard(index)
                    done.append((self.jobs[index], None, RuntimeError(
                        "every episode process ended before this episode started; run again to play it")))
        return done


def _signal(children: list[multiprocessing.process.BaseProcess], signum: int) -> None:
    for child in children:
        if child.is_alive():
            with suppress(ProcessLookupError, TypeError):
                os.kill(child.pid, signum)


def _child(n: int, jobs: list[EpisodeJob], cut: list[list[int]], counters: list[Synchronized], owners: Array,
           results: Connection, play: Play, local: int, grace: float, descriptors: int,
           torch_threads: int) -> None:
    stop_on_sigterm()  # the parent's Ctrl-C reaches this child as SIGTERM
    end_with_parent(grace)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch  # optional: torch (pdbgym[hf]); local models need it

    torch.set_num_threads(torch_threads)
    if local > 1:
        from pdbgym.engine import expect_rows  # heavy: torch

        expect_rows(local, max(jobs[i].agent.max_context_tokens for share in cut for i in share))
        raise_descriptor_limit(descriptors)
    order = [n, *(m for m in range(len(cut)) if m != n)]  # its own share first, then the others' in turn
    sending = threading.Lock()  # one episode's result at a time down the pipe

    def take() -> int | None:
        for m in order:
            with counters[m].get_lock():
                position = counters[m].value
                if position < len(cut[m]):
                    counters[m].value = position + 1
                    owners[cut[m][position]] = n
                    return cut[m][position]
        return None

    def episodes() -> None:
        while not stop_requested():
            index = take()
            if index is None:
                return
            try:
                result, error = play(jobs[index]), None
            except BaseException as exc:  # noqa: BLE001 - one failed job, reported to the parent
                result, error = None, _picklable(exc)
            with sending:
                results.send((index, result, error))

    threads = [threading.Thread(target=episodes, name=f"pdbgym-episode-{n}-{t}") for t in range(max(1, local))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.close()


def _picklable(exc: BaseException) -> BaseException:
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any exception that cannot cross the process boundary
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc
