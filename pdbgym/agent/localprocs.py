"""A local model's episodes over several processes, each with its own copy of the model and its own engine.

One process plays ``local_episodes`` at once in threads, so every turn's host work (rendering and
tokenizing the conversation, the agent loop, the engine's scheduling) shares one interpreter. On a GPU
that interpreter, not the device, bounded a held-out campaign: with 160 episodes in one process an
episode took about 150 s and the GPU sat mostly idle, while two processes of 96 each played 100
episodes a minute apiece (``docs/runs/2026-12-06-smollm2-ladder-seeds-run3.md``). ``Spread`` gives
the jobs to ``processes`` spawned children instead:

- **Which child plays what.** The jobs, ordered by policy, are cut into one contiguous share per child,
  so a child loads as few models as it can (four arms over four children: one model each). A child asks
  this process for a job whenever one of its episode threads is free, and gets the next of its own share,
  or once that is done the next of the share with the most left (work stealing), so a share of slower
  episodes does not leave the other children idle at the end. Only this process hands jobs out, so it
  knows which child holds which: no lock or shared memory that a killed child could leave held.
- **Results stream back** the moment each job ends, down the child's pipe (the caller saves each at once,
  as for jobs played in this process). A child that dies (killed, out of memory) costs only the jobs it
  had in flight: each comes back as a failed job naming the exit code, and the rest are played by the
  others. A result or error that cannot cross the pipe comes back as that job's error.
- **Stopping.** The parent's Ctrl-C (or the caller leaving the loop) sends each child SIGTERM, which
  ends its episodes cleanly (``pdbgym.interrupts``); the pipes are read meanwhile, so no child waits on a
  full one, and a child still running after ``grace`` seconds is killed. A child whose parent dies stops
  on its own (``end_with_parent``).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING

from pdbgym.fdwait import raise_descriptor_limit
from pdbgym.interrupts import end_with_parent, stop_on_sigterm, stop_requested

if TYPE_CHECKING:  # annotations only
    from pdbgym.agent.jobs import EpisodeJob, JobResult
    from pdbgym.agent.policies import PolicySpec

    Play = Callable[[EpisodeJob], JobResult]
    Ended = tuple[EpisodeJob, JobResult | None, BaseException | None]  # a job, its result or what stopped it



def shares(jobs: list[EpisodeJob], processes: int) -> list[list[int]]:
    """Job indices cut into ``processes`` contiguous shares of the policy-ordered list, sizes within one.

    Ordering by policy (policies as they first appear, each one's jobs in their order) keeps each model in as few
    children as the counts allow; a policy's jobs are never interleaved with another's inside a share.
    """
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    groups: dict[PolicySpec, list[int]] = {}  # each policy's jobs, policies in the order they first appear
    for index, job in enumerate(jobs):
        groups.setdefault(job.policy, []).append(index)
    order = [index for group in groups.values() for index in group]
    size, extra = divmod(len(order), processes)
    cut, start = [], 0
    for share in range(processes):
        end = start + size + (1 if share < extra else 0)
        cut.append(order[start:end])
        start = end
    return cut


class Spread:
    """``jobs`` played in ``processes`` spawned children, ``local`` at once in each.

    ``poll`` returns the jobs that ended since the last call (waiting up to ``timeout`` for the first),
    ``finished`` says whether every job came back, ``terminate`` tells the children to end their episodes
    and ``stop`` waits for them (SIGKILL after ``grace`` seconds), as it does at the end of a run.
    """

    def __init__(self, jobs: list[EpisodeJob], play: Play, processes: int, local: int, *,
                 grace: float, descriptors: int = 0, torch_threads: int | None = None) -> None:
        context = multiprocessing.get_context("spawn")  # torch's thread pools and CUDA do not survive fork
        self.jobs, self.grace = jobs, grace
        self.cut = [share for share in shares(jobs, processes) if share]
        self.next = [0] * len(self.cut)  # each share's first job not handed out yet
        self.held: dict[int, set[int]] = {n: set() for n in range(len(self.cut))}  # child -> jobs in flight
        self.left = set(range(len(jobs)))
        self.children: list[multiprocessing.process.BaseProcess] = []
        self.pipes: dict[int, Connection] = {}  # child -> its end of the pipe, until the child is gone
        self._terminated: float | None = None
        threads = torch_threads or max(1, (os.cpu_count() or 1) // max(1, len(self.cut)))
        try:
            for n in range(len(self.cut)):
                mine, theirs = context.Pipe(duplex=True)
                self.pipes[n] = mine
                child = context.Process(target=_child, name=f"pdbgym-local-{n}", daemon=False,
                                        args=(n, jobs, theirs, play, local, grace, descriptors, threads))
                self.children.append(child)
                child.start()
                theirs.close()  # the child holds the only other end: its exit closes the pipe
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
        ready = wait([*self.pipes.values(), *(c.sentinel for c in self.children if c.exitcode is None)], timeout)
        for n in list(self.pipes):
            if self.pipes[n] in ready or not self.children[n].is_alive():
                done += self._read(n)
        done += self._lost()
        return done

    def terminate(self) -> None:
        """Tell every child to end its episodes (SIGTERM); ``stop`` waits for them."""
        if self._terminated is None:
            self._terminated = time.monotonic()
        signal_processes(self.children, signal.SIGTERM)

    def stop(self) -> None:
        """Wait for the children to end, up to ``grace`` seconds after they were told to (now, unless every
        job came back or ``terminate`` told them earlier), reading their pipes meanwhile and keeping nothing;
        a child still running then is killed."""
        if not self.finished:
            self.terminate()
        deadline = (self._terminated or time.monotonic()) + self.grace
        with suppress(KeyboardInterrupt):  # a second Ctrl-C stops the waiting, not the killing below
            while any(child.is_alive() for child in self.children) and time.monotonic() < deadline:
                wait([*self.pipes.values(), *(c.sentinel for c in self.children if c.exitcode is None)],
                     min(0.5, max(0.0, deadline - time.monotonic())))
                for n in list(self.pipes):  # a child blocked on a full pipe could not end otherwise
                    self._read(n, keep=False)
        for child in self.children:
            if child.is_alive():  # an episode that did not end in time: its sandbox dies with its process
                child.kill()
            child.join()

    def close(self) -> None:
        for pipe in self.pipes.values():
            pipe.close()
        self.pipes.clear()

    def _read(self, n: int, keep: bool = True) -> list[Ended]:
        """What child ``n`` has sent: a job's end, or a request for a job (answered). Its pipe is dropped once
        it closes (the child ended)."""
        pipe, done = self.pipes[n], []
        try:
            while pipe.poll():
                kind, index, payload = pipe.recv()
                if kind == "want":
                    self._hand_out(n, keep)
                    continue
                self.held[n].discard(index)
                if keep and index in self.left:
                    self.left.discard(index)
                    done.append((self.jobs[index], *_unpacked(payload)))
        except (EOFError, OSError):  # the child ended (a message cut short by its death included)
            pipe.close()
            del self.pipes[n]
        return done

    def _hand_out(self, n: int, keep: bool) -> None:
        """Answer child ``n``'s request: the next job of its own share, else of the share with most left."""
        index = None
        if keep and self._terminated is None:
            order = [n, *sorted(range(len(self.cut)), key=lambda m: self.next[m] - len(self.cut[m]))]
            share = next((m for m in order if self.next[m] < len(self.cut[m])), None)
            if share is not None:
                index = self.cut[share][self.next[share]]
                self.next[share] += 1
                self.held[n].add(index)
        with suppress(OSError):  # a child that died since it asked: what it held is reported as lost
            self.pipes[n].send(index)

    def _lost(self) -> list[Ended]:
        """Once a child has ended and its pipe is read to the end: the jobs it held, as failures; once every
        child has ended, the jobs nobody took."""
        done: list[Ended] = []
        for n, child in enumerate(self.children):
            if n in self.pipes or child.is_alive() or not self.held[n]:
                continue
            for index in sorted(self.held[n] & self.left):
                self.left.discard(index)
                done.append((self.jobs[index], None, RuntimeError(
                    f"the process playing this episode (pdbgym-local-{n}) ended with exit code {child.exitcode} "
                    "before the episode did (killed, or out of memory); run again to play it (campaigns resume)")))
            self.held[n].clear()
        if self.left and not self.pipes and not any(child.is_alive() for child in self.children):
            codes = ", ".join(str(child.exitcode) for child in self.children)
            for index in sorted(self.left):
                done.append((self.jobs[index], None, RuntimeError(
                    f"every episode process ended (exit codes {codes}) before this episode started: see what "
                    "they printed above; once that is mended, run again to play it")))
            self.left.clear()
        return done


def _unpacked(payload: bytes) -> tuple[JobResult | None, BaseException | None]:
    try:
        return pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - a result this process cannot read is that job's failure
        return None, RuntimeError(f"the episode's result could not be read here ({type(exc).__name__}: {exc})")


def signal_processes(processes: Iterable[multiprocessing.process.BaseProcess], signum: int) -> None:
    """Send ``signum`` to each of ``processes`` still running (this process's children)."""
    for process in processes:
        if process.is_alive():
            with suppress(ProcessLookupError, TypeError):
                os.kill(process.pid, signum)


def init_worker(torch_threads: int, grace: float) -> None:
    """A worker process's start: SIGTERM stops its episodes as Ctrl-C does (its parent decides on SIGINT),
    it stops on its own once its parent is gone (``grace`` seconds for its episodes to unwind), no hub
    access, and its share of the cores for torch where torch is installed."""
    stop_on_sigterm()
    end_with_parent(grace)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import torch  # optional: torch (pdbgym[hf])

        torch.set_num_threads(torch_threads)
    except ImportError:
        pass


def _child(n: int, jobs: list[EpisodeJob], pipe: Connection, play: Play, local: int, grace: float,
           descriptors: int, torch_threads: int) -> None:
    init_worker(torch_threads, grace)  # the parent's Ctrl-C reaches this child as SIGTERM
    os.set_inheritable(pipe.fileno(), False)  # no process this one starts holds the pipe open after it ends
    if local > 1:
        from pdbgym.engine import expect_rows  # heavy: torch

        expect_rows(local, max(job.agent.max_context_tokens for job in jobs))
        raise_descriptor_limit(descriptors)
    sending = threading.Lock()  # one message at a time down the pipe
    handed: queue.Queue[int | None] = queue.Queue()  # the parent's answers, taken by whichever thread is free

    def send(message: tuple[str, int, bytes]) -> None:
        with sending:
            pipe.send(message)

    def answers() -> None:  # the only reader of the pipe
        with suppress(EOFError, OSError):
            while True:
                handed.put(pipe.recv())
        for _ in range(max(1, local)):  # the parent is gone: every waiting thread stops
            handed.put(None)

    def episodes() -> None:
        while not stop_requested():
            send(("want", -1, b""))
            index = handed.get()
            if index is None:
                return
            try:
                outcome: tuple[JobResult | None, BaseException | None] = (play(jobs[index]), None)
            except BaseException as exc:  # noqa: BLE001 - one failed job, reported to the parent
                outcome = (None, exc)
            send(("done", index, _packed(outcome)))

    threading.Thread(target=answers, name="pdbgym-local-answers", daemon=True).start()
    threads = [threading.Thread(target=episodes, name=f"pdbgym-episode-{n}-{t}") for t in range(max(1, local))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pipe.close()


def _packed(outcome: tuple[JobResult | None, BaseException | None]) -> bytes:
    """The outcome pickled here, so one that cannot cross the pipe fails as this job's error, not its thread."""
    try:
        return pickle.dumps(outcome)
    except Exception as exc:  # noqa: BLE001 - any result or error that cannot be pickled
        error = outcome[1]
        what = f"{type(error).__name__}: {error}" if error is not None else "its result"
        return pickle.dumps((None, RuntimeError(f"the episode ended, but {what} could not be sent back "
                                                f"({type(exc).__name__}: {exc})")))
