"""sparkctl.units: the one byte formatter, in each of its three roundings."""

from __future__ import annotations

import pytest

from sparkctl.units import human_bytes

MiB, GiB = 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (1000, "1000 B"), (1536, "1.5 KiB"), (32 * MiB, "32 MiB"), (3 << 40, "3 TiB")],
)
def test_three_significant_digits_whole_numbers_without_a_point(count: int, text: str) -> None:
    assert human_bytes(count) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [(512, "512 B"), (1024, "1.0 KiB"), (1536, "1.5 KiB"), (5 * GiB // 2, "2.5 GiB")],
)
def test_fixed_decimals_past_bytes(count: float, text: str) -> None:
    assert human_bytes(count, decimals=1) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [(16 * MiB, "16 MiB"), (4 * GiB, "4 GiB"), (512 << 10, "512 KiB"), (3 * MiB + 1, "3145729 B")],
)
def test_exact_takes_the_largest_unit_that_divides(count: int, text: str) -> None:
    assert human_bytes(count, exact=True) == text
