"""A load level's figures by bench_serving's definitions, worked out by hand.

tests/contract/test_bench_definitions.py holds the same requests to the release's own
``calculate_metrics``.
"""

from __future__ import annotations

import pytest

from sparkctl.bench.stats import RequestRecord, Spread, summarize

pytestmark = pytest.mark.unit

# Three requests over a 2-second level: two complete, one refused by the server.
RECORDS = (
    RequestRecord(
        True, 0.0, ttft=0.100, itl=(0.020, 0.030, 0.040), latency=0.190, output_len=4, input_len=10
    ),
    RequestRecord(True, 0.5, ttft=0.300, itl=(0.050,), latency=0.350, output_len=2, input_len=20),
    RequestRecord(False, 1.0, error="Service Unavailable: the group is restarting"),
)


def test_throughput_counts_completed_requests_over_the_wall_time() -> None:
    f = summarize(RECORDS, 2.0)
    assert (f.requests, f.completed, f.errors) == (3, 2, 1)
    assert f.output_tokens == 6 and f.output_tokens_per_s == 3.0
    assert f.requests_per_s == 1.0 and f.input_tokens_per_s == 15.0
    assert f.error_samples == ("Service Unavailable: the group is restarting",)


def test_ttft_tpot_itl_and_e2e_are_bench_servings() -> None:
    f = summarize(RECORDS, 2.0)
    # TTFT over the completed: 100 and 300 ms; median 200; p99 linear: 100 + 0.99 x 200
    assert f.ttft_ms.p50 == pytest.approx(200.0)
    assert f.ttft_ms.p99 == pytest.approx(298.0)
    # TPOT: (190 - 100) / 3 = 30 ms and (350 - 300) / 1 = 50 ms
    assert f.tpot_ms.mean == pytest.approx(40.0)
    # ITL pooled: 20, 30, 40, 50 ms; median 35; p99 = 40 + 0.97 x 10
    assert f.itl_ms.p50 == pytest.approx(35.0)
    assert f.itl_ms.p99 == pytest.approx(49.7)
    assert f.e2e_ms.p50 == pytest.approx(270.0)


def test_an_empty_list_counts_as_zero_and_a_level_needs_a_duration() -> None:
    assert Spread.of([]) == Spread(0.0, 0.0, 0.0)
    one_token = summarize([RequestRecord(True, 0.0, ttft=0.1, latency=0.1, output_len=1)], 1.0)
    assert one_token.tpot_ms == Spread(0.0, 0.0, 0.0)  # no request of two tokens or more
    with pytest.raises(ValueError, match="positive"):
        summarize(RECORDS, 0.0)
