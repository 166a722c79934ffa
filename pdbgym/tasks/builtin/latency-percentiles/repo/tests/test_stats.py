import pytest

from latency import histogram, mean, percentile


def test_mean_and_errors():
    assert mean([10, 20, 60]) == 30
    with pytest.raises(ValueError):
        mean([])
    with pytest.raises(ValueError, match="within 0..100"):
        percentile([1], 101)


def test_percentiles_on_exact_ranks():
    samples = [30, 10, 20, 50, 40]
    assert percentile(samples, 0) == 10
    assert percentile(samples, 50) == 30
    assert percentile(samples, 100) == 50


def test_percentiles_interpolate_between_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile(list(range(1, 11)), 90) == pytest.approx(9.1)


def test_histogram_buckets():
    assert histogram([1, 9, 10, 35, 250], bucket_ms=10, max_ms=40) == [
        ("0-10", 2), ("10-20", 1), ("20-30", 0), ("30-40", 1), (">=40", 1)
    ]
