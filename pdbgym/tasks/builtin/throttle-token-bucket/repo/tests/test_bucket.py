import pytest

from throttle import TokenBucket


def test_invalid_parameters():
    with pytest.raises(ValueError, match="must be positive"):
        TokenBucket(0, 1)


def test_burst_then_refill():
    bucket = TokenBucket(capacity=3, rate=2)
    assert [bucket.try_take(now=100.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.try_take(now=100.5)
    assert not bucket.try_take(now=100.5)


def test_refill_is_capped_at_capacity():
    bucket = TokenBucket(capacity=2, rate=10)
    bucket.try_take(now=50.0)
    bucket.try_take(now=60.0)
    assert bucket.tokens == 1


def test_clock_starting_at_zero():
    bucket = TokenBucket(capacity=2, rate=1)
    assert [bucket.try_take(now=0.0) for _ in range(3)] == [True, True, False]
    assert bucket.try_take(now=1.0)
