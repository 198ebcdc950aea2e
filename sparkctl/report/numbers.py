"""Numbers for people, as the report prints them (baseline messages and report.html)."""

from __future__ import annotations

from sparkctl.units import human_bytes


def human_size(n: int) -> str:
    """``n`` bytes in 1024-based units: 8 B, 1 KiB, 32 MiB, 1.5 GiB."""
    return human_bytes(n)


def tick(n: int) -> str:
    """A short axis label: 8B, 1K, 64M, 1G."""
    return human_size(n).replace("iB", "").replace(" ", "")


def gbs(x: float) -> str:
    """A bandwidth in GB/s as nccl-tests precision allows: 25, 11.98, 0.081."""
    if x != 0 and abs(x) < 0.01:
        return f"{x:.2g}"
    return f"{x:.3f}".rstrip("0").rstrip(".")


def pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"
