"""docs/guarantees.md names a test for each promise: every name must exist, and
every fault-injection test (marker `fault`) must be listed there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _section() -> str:
    return (REPO / "docs" / "guarantees.md").read_text()


def _references() -> list[tuple[str, str | None]]:
    refs: list[tuple[str, str | None]] = []
    last = ""
    for m in re.finditer(r"`(tests/[\w/]+\.py)(?:::(\w+))?`|`::(\w+)`", _section()):
        path, name, cont = m.groups()
        last = path or last
        refs.append((last, name or cont))
    return refs


def test_every_test_named_in_guarantees_exists() -> None:
    refs = _references()
    assert len(refs) >= 20
    for path, name in refs:
        source = (REPO / path).read_text()
        if name is not None:
            assert re.search(rf"^def {name}\(", source, re.MULTILINE), f"{path}::{name}"


def test_every_fault_test_is_listed() -> None:
    listed = {f"{p}::{n}" for p, n in _references() if n}
    faults = set()
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        for m in re.finditer(r"@pytest\.mark\.fault\n(?:@.*\n)*def (\w+)\(", path.read_text()):
            faults.add(f"{path.relative_to(REPO)}::{m.group(1)}")
    assert len(faults) >= 8
    assert faults <= listed, sorted(faults - listed)
