"""base's cluster_ssh_check module: a peer address never reaches ssh as an option."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.unit.pathload import load_file

REPO = Path(__file__).resolve().parents[2]
module = load_file(
    "cluster_ssh_check",
    REPO
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "plugins"
    / "modules"
    / "cluster_ssh_check.py",
)


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``ssh`` first on PATH that records its arguments and answers as the peer."""
    log = tmp_path / "argv"
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\necho spark2\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    return log


def test_the_address_follows_a_double_dash(recorded: Path) -> None:
    out = module.check_peer("root", "root", {"name": "spark2", "address": "192.168.100.12"})
    assert out["ok"], out
    argv = recorded.read_text().splitlines()
    assert argv[-3:] == ["--", "192.168.100.12", "hostname"]


@pytest.mark.parametrize("address", ["-oProxyCommand=touch x", "a b", "", "spark2\nx", "-p2222"])
def test_an_address_that_is_not_one_is_not_contacted(recorded: Path, address: str) -> None:
    out = module.check_peer("root", "root", {"name": "spark2", "address": address})
    assert not out["ok"]
    assert "is not a host name or an address; not contacted" in out["reason"]
    assert not recorded.exists()
