"""latency: summarise request latencies (milliseconds) from load tests."""

from latency.histogram import histogram
from latency.stats import mean, percentile
from latency.summary import SloResult, check_slo, summarize

__all__ = ["SloResult", "check_slo", "histogram", "mean", "percentile", "summarize"]
