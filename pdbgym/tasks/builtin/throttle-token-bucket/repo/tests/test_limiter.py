from throttle import Decision, KeyedLimiter


def test_keys_have_separate_buckets():
    limiter = KeyedLimiter(capacity=1, rate=0.5)
    assert limiter.check("alice", now=10.0).allowed
    assert limiter.check("bob", now=10.0).allowed
    assert limiter.check("alice", now=10.0) == Decision(False, 2.0)


def test_idle_buckets_are_forgotten():
    limiter = KeyedLimiter(capacity=5, rate=1, idle_ttl_s=60)
    limiter.check("alice", now=1000.0)
    limiter.check("bob", now=1050.0)
    assert limiter.forget_idle(now=1070.0) == ["alice"]
    assert len(limiter) == 1


def test_retry_after_from_the_start_of_a_test_clock():
    limiter = KeyedLimiter(capacity=2, rate=4)
    decisions = [limiter.check("svc", now=t) for t in (0.0, 0.0, 0.0, 0.25)]
    assert [d.allowed for d in decisions] == [True, True, False, True]
    assert decisions[2].retry_after_s == 0.25
