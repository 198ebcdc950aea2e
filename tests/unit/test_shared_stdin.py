"""What CI showed twice: a child that inherits a shared stdin can be broken by another.

OpenSSH's client sets O_NONBLOCK on a stdin that is not a terminal, on the open
file description it shares with every other child of the same parent; ansible-core
2.19 run beside it then exits 1 with "Ansible requires blocking IO on
stdin/stdout/stderr. Non-blocking file handles detected: <stdin>" (molecule's
roce_fabric create, and earlier nvidia_driver's ``ansible-playbook --version``,
while the lab bring-up's ssh ran beside them). ``proc.run`` gives its children a
/dev/null of their own; ``sshtrust.record`` rewrites a known_hosts whose keys are
not the instances' (a molecule scenario's ephemeral directory outlives the
containers of an earlier run, and strict checking then refused the new ones).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkctl.proc import run
from sparkctl_lab import sshtrust

CHILD = [sys.executable, "-c", "import os; print(os.get_blocking(0))"]


@pytest.fixture
def nonblocking_stdin() -> Iterator[None]:
    """fd 0 of this process is, for the test, a pipe set non-blocking (as ssh leaves it)."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)


@pytest.mark.usefixtures("nonblocking_stdin")
def test_children_of_proc_run_never_share_the_callers_stdin() -> None:
    inherited = subprocess.run(CHILD, capture_output=True, text=True, check=True)
    assert inherited.stdout.strip() == "False"  # the hazard is real here
    assert run(CHILD).stdout.strip() == "True"


@pytest.mark.usefixtures("nonblocking_stdin")
def test_input_text_still_reaches_the_child() -> None:
    child = [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"]
    assert run(child, input_text="spark").stdout.strip() == "SPARK"


class _Podman:
    """Instances as podman shows them: each has a host key and an active sshd."""

    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = keys
        self.written: list[tuple[str, str]] = []

    def write_file(self, name: str, path: str, text: str, mode: str) -> None:
        self.written.append((name, path))

    def exec(self, name: str, argv: list[str], check: bool = True) -> Any:
        out = f"{self.keys[name]} root@{name}\n" if argv[0] == "cat" else "active\n"
        return SimpleNamespace(returncode=0, stdout=out)


def _lab(keys: dict[str, str]) -> Any:
    hosts = tuple(SimpleNamespace(name=n, mgmt_ip=f"10.78.6.{11 + i}") for i, n in enumerate(keys))
    return SimpleNamespace(
        spec=SimpleNamespace(hosts=hosts), podman=_Podman(keys), progress=lambda message: None
    )


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``ssh`` on PATH that answers ``hostname`` with the name the address belongs to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text(
        "#!/bin/sh\n"
        "for a; do case $a in root@10.78.6.11) echo mol-a;; "
        "root@10.78.6.12) echo mol-b;; esac; done\n"
    )
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


@pytest.mark.usefixtures("fake_ssh")
def test_record_replaces_keys_of_instances_that_are_gone(tmp_path: Path) -> None:
    ssh_dir = tmp_path / "ssh"
    first = {"mol-a": "ssh-ed25519 AAAAold-a", "mol-b": "ssh-ed25519 AAAAold-b"}
    assert sshtrust.record(_lab(first), ssh_dir) is True
    known = (ssh_dir / "known_hosts").read_text()
    assert "mol-a,10.78.6.11 ssh-ed25519 AAAAold-a\n" in known

    assert sshtrust.record(_lab(first), ssh_dir) is False  # same instances: unchanged
    assert (ssh_dir / "known_hosts").read_text() == known

    again = {"mol-a": "ssh-ed25519 AAAAnew-a", "mol-b": "ssh-ed25519 AAAAold-b"}
    assert sshtrust.record(_lab(again), ssh_dir) is True
    known = (ssh_dir / "known_hosts").read_text()
    assert "AAAAold-a" not in known
    assert "mol-a,10.78.6.11 ssh-ed25519 AAAAnew-a\n" in known
    assert (ssh_dir / "known_hosts").stat().st_mode & 0o777 == 0o600
