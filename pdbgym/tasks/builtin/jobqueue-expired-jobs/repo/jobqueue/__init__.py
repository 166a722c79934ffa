"""jobqueue: priorities, deadlines and worker leases for in-process jobs."""

from jobqueue.jobs import Job, JobState
from jobqueue.queue import JobQueue, QueueError

__all__ = ["Job", "JobQueue", "JobState", "QueueError"]
