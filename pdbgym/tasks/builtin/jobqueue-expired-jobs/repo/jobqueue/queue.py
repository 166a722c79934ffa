"""The queue: submit, lease to a worker, complete, and drop jobs past their deadline."""

from __future__ import annotations

from jobqueue.jobs import Job, JobState


class QueueError(Exception):
    """An operation refers to a job in the wrong state."""


class JobQueue:
    def __init__(self, lease_s: float = 30.0, max_attempts: int = 3) -> None:
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self._pending: list[tuple[int, Job]] = []  # (submission sequence, job), kept sorted
        self._leased: dict[str, Job] = {}
        self._sequence = 0
        self.expired: list[str] = []

    def __len__(self) -> int:
        return len(self._pending)

    def submit(self, job: Job) -> None:
        self._sequence += 1
        self._pending.append((self._sequence, job))
        self._pending.sort(key=lambda entry: entry[1].sort_key(entry[0]))

    def drop_expired(self, now: float) -> list[str]:
        """Remove queued jobs whose deadline has passed; returns their ids in queue order."""
        dropped = []
        for entry in self._pending:
            job = entry[1]
            if job.is_expired(now):
                job.state = JobState.EXPIRED
                self._pending.remove(entry)
                dropped.append(job.job_id)
        self.expired.extend(dropped)
        return dropped

    def lease(self, now: float) -> Job | None:
        """Hand the most urgent live job to a worker, or None when nothing is runnable."""
        self.reclaim(now)
        self.drop_expired(now)
        if not self._pending:
            return None
        _, job = self._pending.pop(0)
        job.state = JobState.LEASED
        job.lease_until = now + self.lease_s
        job.attempts += 1
        self._leased[job.job_id] = job
        return job

    def complete(self, job_id: str) -> None:
        job = self._leased.pop(job_id, None)
        if job is None:
            raise QueueError(f"job {job_id!r} is not leased")
        job.state = JobState.DONE

    def reclaim(self, now: float) -> list[str]:
        """Requeue jobs whose lease ran out (the worker died); give up after max_attempts."""
        reclaimed = []
        for job_id, job in sorted(self._leased.items()):
            if job.lease_until is not None and now >= job.lease_until:
                del self._leased[job_id]
                if job.attempts >= self.max_attempts:
                    job.state = JobState.EXPIRED
                    self.expired.append(job_id)
                    continue
                job.state = JobState.QUEUED
                self.submit(job)
                reclaimed.append(job_id)
        return reclaimed
