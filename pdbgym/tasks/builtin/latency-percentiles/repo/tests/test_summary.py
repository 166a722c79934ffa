from latency import check_slo, summarize

# 20 requests from a load test, in ms
RUN = [112, 98, 105, 130, 101, 97, 450, 120, 99, 103, 108, 115, 100, 96, 125, 104, 102, 310, 110, 107]


def test_summary_keys_and_exact_values():
    summary = summarize(RUN)
    assert list(summary) == ["count", "mean", "max", "p50", "p90", "p95", "p99"]
    assert (summary["count"], summary["mean"], summary["max"]) == (20.0, 134.6, 450.0)


def test_tail_latency_slo():
    results = check_slo(RUN, {95: 320.0, 99: 400.0})
    assert [(r.pct, round(r.observed_ms, 2), r.met) for r in results] == [(95, 317.0, True), (99, 423.4, False)]


def test_slo_on_a_fast_run():
    fast = [20, 22, 21, 25, 30]
    assert all(result.met for result in check_slo(fast, {50: 25, 99: 40}))
