"""Logs and command output are read with bounded memory.

A 400 MB nccl-tests log took 0.8 GB to parse (read whole, split whole); a node that
prints without end filled validate's memory through ssh's captured output. Now the
parser reads line by line and keeps only what it needs, and validate's ssh runner
cuts a command's output at a limit. Measured here with tracemalloc (peak bytes),
not with time.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkctl import nccl_parse
from sparkctl.remote import ssh

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl"
LOG = FIXTURES / "gb10-2.19.6-all-gather.log"


def _noisy(lines: int, width: int) -> Iterator[str]:
    """A real GB10 log with ``lines`` lines of mpirun noise before it (some of them the
    failure words the parser keeps), as a file would yield them."""
    noise = "[spark-1:12345] mca_btl_tcp: " + "x" * width + "\n"
    warning = "NCCL WARN something failed " + "y" * width + "\n"
    for i in range(lines):
        yield warning if i % 1000 == 0 else noise
    yield from LOG.read_text().splitlines(keepends=True)


def test_a_huge_log_parses_in_bounded_memory() -> None:
    assert LOG.exists(), sorted(p.name for p in FIXTURES.iterdir())
    small = nccl_parse.parse(LOG.read_text(), str(LOG))
    tracemalloc.start()
    try:
        big = nccl_parse.parse(_noisy(40_000, 400), "noisy.log")  # ~17 MB of text
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.size for r in big.rows] == [r.size for r in small.rows]
    assert big.avg_busbw == small.avg_busbw
    assert peak < 4 << 20, f"peak {peak / 2**20:.1f} MiB for a 17 MB log"


def test_the_cli_reads_a_log_file_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "noisy.log"
    with path.open("w") as fh:
        fh.writelines(_noisy(20_000, 400))
    tracemalloc.start()
    try:
        with path.open(errors="replace") as lines:
            report = nccl_parse.parse(lines, str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.rows and peak < 4 << 20, peak


def _fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")


def test_the_ssh_runner_cuts_endless_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ssh that prints forever: validate's runner stops reading at its limit."""
    _fake_ssh(tmp_path, monkeypatch, "exec yes 'NCCL INFO endless output from a broken node'")
    code, out = ssh.ssh_runner(tmp_path / "ssh_config", limit=1 << 20)("spark1", "x", 60)
    assert code == 125
    assert out.endswith("sparkctl: spark1 printed more than 1 MiB; the rest was not read\n")
    assert len(out) < (1 << 20) + 200


def test_the_ssh_runner_keeps_stdout_before_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_ssh(tmp_path, monkeypatch, "echo out1; echo err1 >&2; echo out2; exit 3")
    code, out = ssh.ssh_runner(tmp_path / "ssh_config")("spark1", "x", 60)
    assert (code, out) == (3, "out1\nout2\nerr1\n")
