"""Running the sparkctl CLI in-process from unit tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sparkctl import cli


def check_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path
) -> tuple[int, str]:
    """``sparkctl inventory check PATH`` in-process: (exit code, stdout + stderr)."""
    return run_cli(monkeypatch, capsys, "inventory", "check", str(path))


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str]:
    """``sparkctl ARGS`` in-process: (exit code, stdout + stderr)."""
    monkeypatch.setattr(sys, "argv", ["sparkctl", *args])
    code = 0
    try:
        cli.main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err
