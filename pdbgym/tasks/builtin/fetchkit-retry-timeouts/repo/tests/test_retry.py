import pytest

from fetchkit import RetryPolicy, call_with_retry


def failing(*outcomes):
    """An operation that raises/returns the given outcomes in turn."""
    calls = iter(outcomes)

    def operation():
        outcome = next(calls)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return operation


def test_backoff_delays():
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=3.0)
    assert [policy.delay_before(n) for n in (2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0]


def test_connection_errors_are_retried():
    slept = []
    result = call_with_retry(failing(ConnectionResetError(), ConnectionRefusedError(), "ok"),
                             RetryPolicy(), sleep=slept.append)
    assert result == "ok"
    assert slept == [0.2, 0.4]


def test_gives_up_after_max_attempts():
    slept = []
    with pytest.raises(ConnectionRefusedError):
        call_with_retry(failing(*[ConnectionRefusedError()] * 5), RetryPolicy(max_attempts=3),
                        sleep=slept.append)
    assert len(slept) == 2


def test_programming_errors_are_not_retried():
    slept = []
    with pytest.raises(KeyError):
        call_with_retry(failing(KeyError("id"), "ok"), RetryPolicy(), sleep=slept.append)
    assert slept == []
