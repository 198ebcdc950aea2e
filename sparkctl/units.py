"""Byte counts as people read them: the one formatter, 1024-based (B, KiB ... PiB).

Three roundings, one per kind of figure: a report's sizes and totals (three
significant digits), a transfer in progress (one decimal, so the width does
not jump as it grows) and nccl-tests' sweep sizes (exact: a power of two must
never read rounded).
"""

from __future__ import annotations

from typing import Final

UNITS: Final = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(count: float, *, decimals: int | None = None, exact: bool = False) -> str:
    """``count`` bytes in the largest unit it reaches.

    By default three significant digits, whole numbers without a point: 8 B,
    1 KiB, 32 MiB, 1.5 GiB. ``decimals``: that many decimals past bytes (5 B,
    1.0 KiB, 2.3 GiB). ``exact``: the largest unit that divides ``count``,
    else bytes (16 MiB, 512 KiB, 3145729 B).
    """
    if exact:
        size = int(count)
        for power in range(len(UNITS) - 1, 0, -1):
            step = 1 << (10 * power)
            if size >= step and size % step == 0:
                return f"{size // step} {UNITS[power]}"
        return f"{size} B"
    value = float(count)
    unit = UNITS[0]
    for unit in UNITS:
        if abs(value) < 1024 or unit == UNITS[-1]:
            break
        value /= 1024
    if decimals is not None:
        return f"{value:.0f} B" if unit == "B" else f"{value:.{decimals}f} {unit}"
    if value == int(value):
        return f"{int(value)} {unit}"
    return f"{value:.3g} {unit}"
