"""What a sandboxed command may use (``Limits``) and what came back from it (``RunResult``)."""

from __future__ import annotations

from dataclasses import dataclass

from pdbgym.errors import SandboxError

# The least the tree's memory limit exceeds one process's: room for the other processes a command may
# have (up to ``max_processes`` interpreters or forks of a few MB each) and its ``/tmp`` files, so a single
# process at its own limit gets MemoryError, deterministically, rather than the OOM killer.
MIN_TREE_HEADROOM_BYTES = 512 * 1024**2


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandboxed command (or one pdb session process tree).

    ``max_processes`` counts the processes the command may add. It is enforced with a cgroup pids
    limit where ``/sys/fs/cgroup/pids`` is writable, else with RLIMIT_NPROC set to the caller's current
    process count plus this number (RLIMIT_NPROC is never enforced for root: see docs/sandbox.md).

    ``memory_bytes`` bounds each process's address space (RLIMIT_AS: a process past it gets MemoryError).
    ``tree_memory_bytes`` bounds the memory (resident, page cache, tmpfs, no swap) of all the command's
    processes together, through a memory cgroup where one can be made (see docs/sandbox.md). It must
    exceed ``memory_bytes`` by at least ``MIN_TREE_HEADROOM_BYTES``: the difference (the headroom) is what
    the rest of the tree (other processes, ``/tmp`` files) may hold while one process grows to its own
    limit and gets MemoryError; only beyond that does the kernel's OOM killer end a process. None means
    ``memory_bytes`` plus the larger of half of it and ``MIN_TREE_HEADROOM_BYTES`` (3 GiB for 2 GiB).
    """

    wall_time_s: float = 30.0  # whole command, wall clock, seconds
    cpu_time_s: int = 60  # RLIMIT_CPU, seconds of CPU per process
    memory_bytes: int = 2 * 1024**3  # RLIMIT_AS, bytes of address space per process
    tree_memory_bytes: int | None = None  # memory cgroup, bytes for the whole tree; None: 1.5 x memory_bytes
    file_size_bytes: int = 64 * 1024**2  # RLIMIT_FSIZE, bytes per written file
    max_processes: int = 128  # processes the command may add
    output_limit_bytes: int = 16_000  # kept output: head + tail halves, with a note of what was cut

    def __post_init__(self) -> None:
        for name in ("wall_time_s", "cpu_time_s", "memory_bytes", "file_size_bytes", "max_processes"):
            if getattr(self, name) <= 0:
                raise SandboxError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")
        if self.tree_memory_bytes is not None and self.tree_memory_bytes <= 0:
            raise SandboxError(f"Limits.tree_memory_bytes must be positive or None, got {self.tree_memory_bytes!r}")
        if self.tree_memory_bytes is not None and \
                self.tree_memory_bytes < self.memory_bytes + MIN_TREE_HEADROOM_BYTES:
            raise SandboxError(
                f"Limits.tree_memory_bytes ({self.tree_memory_bytes}) must exceed memory_bytes "
                f"({self.memory_bytes}) by at least {MIN_TREE_HEADROOM_BYTES} bytes, so that one process "
                "reaching its own limit gets MemoryError rather than the OOM killer; raise it or leave it None"
            )
        if self.output_limit_bytes < 64:
            raise SandboxError(
                f"Limits.output_limit_bytes must be at least 64 bytes, got {self.output_limit_bytes}"
            )

    @property
    def tree_memory_limit(self) -> int:
        """Bytes the whole process tree may use (``tree_memory_bytes``, or ``memory_bytes`` plus the larger
        of half of it and ``MIN_TREE_HEADROOM_BYTES``)."""
        if self.tree_memory_bytes is not None:
            return self.tree_memory_bytes
        return self.memory_bytes + max(self.memory_bytes // 2, MIN_TREE_HEADROOM_BYTES)


@dataclass
class RunResult:
    """The outcome of ``Sandbox.run``.

    ``output`` is stdout and stderr merged, decoded as UTF-8 (invalid bytes replaced) and bounded to
    ``Limits.output_limit_bytes`` (head and tail kept, the middle replaced by a note). ``bytes_total``
    counts every byte the command wrote; ``truncated`` says whether anything was cut.
    ``returncode`` is negative for a signal (Popen convention) and None only if it could not be reaped.
    """

    argv: list[str]
    returncode: int | None
    output: str
    timed_out: bool
    duration_s: float
    bytes_total: int
    truncated: bool

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within its time limit."""
        return self.returncode == 0 and not self.timed_out
