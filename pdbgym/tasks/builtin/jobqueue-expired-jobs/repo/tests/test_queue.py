import pytest

from jobqueue import Job, JobQueue, JobState, QueueError


def ids(queue, now):
    leased = []
    while (job := queue.lease(now)) is not None:
        leased.append(job.job_id)
    return leased


def test_priority_then_deadline_then_fifo():
    queue = JobQueue()
    queue.submit(Job("report", priority=1))
    queue.submit(Job("email-b", priority=5, deadline=90))
    queue.submit(Job("email-a", priority=5, deadline=60))
    queue.submit(Job("cleanup", priority=1))
    assert ids(queue, now=0) == ["email-a", "email-b", "report", "cleanup"]


def test_complete_requires_a_lease():
    queue = JobQueue()
    queue.submit(Job("thumb"))
    job = queue.lease(now=0)
    queue.complete(job.job_id)
    assert job.state is JobState.DONE
    with pytest.raises(QueueError, match="not leased"):
        queue.complete("thumb")


def test_dead_worker_lease_is_reclaimed():
    queue = JobQueue(lease_s=10, max_attempts=2)
    queue.submit(Job("resize"))
    assert queue.lease(now=0).job_id == "resize"
    assert queue.lease(now=5) is None
    assert queue.lease(now=10).attempts == 2
    assert queue.lease(now=20) is None
    assert queue.expired == ["resize"]


def test_single_expired_job_is_dropped():
    queue = JobQueue()
    queue.submit(Job("stale", deadline=10))
    queue.submit(Job("fresh", deadline=100))
    assert queue.drop_expired(now=50) == ["stale"]
    assert ids(queue, now=50) == ["fresh"]


def test_burst_of_expired_jobs_is_dropped_together():
    queue = JobQueue()
    for n in range(4):
        queue.submit(Job(f"sms-{n}", priority=2, deadline=10 + n))
    queue.submit(Job("digest", priority=1, deadline=500))
    assert queue.drop_expired(now=60) == ["sms-0", "sms-1", "sms-2", "sms-3"]
    assert len(queue) == 1


def test_workers_never_receive_expired_jobs():
    queue = JobQueue()
    queue.submit(Job("otp-1", priority=9, deadline=30))
    queue.submit(Job("otp-2", priority=9, deadline=31))
    queue.submit(Job("newsletter", priority=0))
    assert ids(queue, now=45) == ["newsletter"]
