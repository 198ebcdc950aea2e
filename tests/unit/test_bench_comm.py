"""The communication share: the model's all-reduces per token on the measured curve."""

from __future__ import annotations

import pytest

from sparkctl.bench.comm import allreduce_us, comm_share

pytestmark = pytest.mark.unit

# A latency curve as validate measures it: 8 B .. 64 KiB, time doubling from 4 KiB on
CURVE = [(8, 20.0), (1024, 22.0), (4096, 25.0), (16384, 50.0), (65536, 200.0)]


def test_the_curve_is_read_log_log_between_sizes_and_held_or_extended_outside() -> None:
    assert allreduce_us(CURVE, 4096) == 25.0  # a measured size: its time
    # halfway between 4 KiB and 16 KiB on a log axis: sqrt(25 x 50)
    assert allreduce_us(CURVE, 8192) == pytest.approx((25.0 * 50.0) ** 0.5)
    assert allreduce_us(CURVE, 2) == 20.0  # below the smallest: latency's floor
    # above the largest: the last segment's slope (150 us per 48 KiB) carried on
    assert allreduce_us(CURVE, 131072) == pytest.approx(200.0 + 150.0 / 49152 * 65536)
    with pytest.raises(ValueError, match="no all_reduce latency"):
        allreduce_us([], 64)


def test_a_llama_70b_token_at_tp4_batch_4() -> None:
    """8192-wide bf16 activations, 80 layers: 160 all-reduces of 8192 x 2 x 4 = 64 KiB
    a step; at 200 us each that is 32 ms of a 40 ms token (80 %)."""
    c = comm_share(
        hidden=8192, layers=80, element_bytes=2, tp=4, batch=4, token_ms=40.0, curve=CURVE
    )
    assert (c.message_bytes, c.allreduces, c.allreduce_us) == (65536, 160, 200.0)
    assert c.comm_ms == pytest.approx(32.0) and c.share == pytest.approx(0.8)
    assert c.line().startswith("communication ~ 32.00 ms of the 40.00 ms per token (80%)")
    # a fractional mean batch rounds up to the requests a step carried
    assert (
        comm_share(
            hidden=8192, layers=80, element_bytes=2, tp=4, batch=2.3, token_ms=40.0, curve=CURVE
        ).message_bytes
        == 8192 * 2 * 3
    )


def test_tp1_has_no_all_reduce() -> None:
    c = comm_share(
        hidden=2048, layers=16, element_bytes=2, tp=1, batch=8, token_ms=10.0, curve=CURVE
    )
    assert (c.allreduces, c.comm_ms, c.share) == (0, 0.0, 0.0)
