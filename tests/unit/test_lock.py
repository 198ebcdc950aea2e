"""Two sparkctl runs never share a host: the per-host flock of sparkctl/lock.py.

The holder is a real second process (flock conflicts only between open file
descriptions, so a thread would prove nothing about another run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.lock import host_lock_path, host_locks, inventory_lock

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "inventory" / "sim.ini"
TWO_GROUPS = REPO / "inventory" / "sim-two-groups.ini"

HOLDER = textwrap.dedent("""
    import sys
    from sparkctl.lock import host_locks
    hosts = [tuple(h.split("=")) for h in sys.argv[1:]]
    with host_locks(hosts, "provision", "inventory/other.ini"):
        print("held", flush=True)
        sys.stdin.readline()
""")


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _hold(*hosts: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, *hosts],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
        cwd=REPO,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def holder() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_a_second_run_on_a_held_host_is_refused_naming_host_command_pid_and_since(
    holder: list[subprocess.Popen[str]],
) -> None:
    holder.append(_hold("spark2=10.0.0.12"))
    hosts = [("spark1", "10.0.0.11"), ("spark2", "10.0.0.12")]
    with pytest.raises(SparkctlError) as err, host_locks(hosts, "validate", "x.ini"):
        pytest.fail("entered a held lock")
    assert err.value.code is ExitCode.LOCKED
    msg = err.value.message
    assert msg.startswith(
        "spark2 (10.0.0.12) is in use by another sparkctl run: already "
        f"running (provision of inventory/other.ini, pid {holder[0].pid}, "
        "since "
    ), msg


def test_all_or_nothing_a_refused_run_releases_what_it_took(
    holder: list[subprocess.Popen[str]],
) -> None:
    holder.append(_hold("spark2=10.0.0.12"))
    hosts = [("spark1", "10.0.0.11"), ("spark2", "10.0.0.12")]
    with pytest.raises(SparkctlError), host_locks(hosts, "validate", "x"):
        pass
    # spark1 was taken first (sorted order) and must be free again for another process
    holder.append(_hold("spark1=10.0.0.11"))


def test_disjoint_hosts_run_side_by_side(holder: list[subprocess.Popen[str]]) -> None:
    holder.append(_hold("spark1=10.0.0.11"))
    with host_locks([("spark3", "10.0.0.13")], "validate", "x"):
        pass


def test_a_crashed_holder_leaves_no_stale_lock(holder: list[subprocess.Popen[str]]) -> None:
    proc = _hold("spark2=10.0.0.12")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert host_lock_path("10.0.0.12").is_file()  # the file stays, the flock does not
    with host_locks([("spark2", "10.0.0.12")], "validate", "x"):
        pass


def test_the_same_process_may_take_its_hosts_again_sparkctl_up(
    holder: list[subprocess.Popen[str]],
) -> None:
    hosts = [("spark1", "10.0.0.11")]
    with host_locks(hosts, "up", "x"), host_locks(hosts, "provision", "x"):
        pass
    # still held by the outer block? No: both exited, so another process gets it
    holder.append(_hold("spark1=10.0.0.11"))


def test_two_inventories_of_the_same_machines_conflict(holder: list[subprocess.Popen[str]]) -> None:
    # sim-two-groups.ini describes the same four lab Sparks as sim.ini
    holder.append(_hold("spark4=10.77.0.14"))
    with pytest.raises(SparkctlError) as err, inventory_lock(TWO_GROUPS, "serve up"):
        pass
    assert "spark4 (10.77.0.14)" in err.value.message
    with pytest.raises(SparkctlError), inventory_lock(SIM, "validate"):
        pass


def test_cli_exits_6_and_contacts_nothing_while_another_run_holds_a_host(
    holder: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    holder.append(_hold("spark3=10.77.0.13"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "contacted"
    for tool in ("ssh", "scp", "sftp", "ansible-playbook"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\nexit 255\n')
        script.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"}
    for args in (
        ["validate", str(SIM), "--no-nccl"],
        ["serve", "verify", str(SIM)],
        ["serve", "down", str(SIM)],
        ["provision", str(SIM)],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "sparkctl", *args],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == ExitCode.LOCKED, (args, proc.stdout, proc.stderr)
        assert "spark3 (10.77.0.13) is in use by another sparkctl run" in proc.stderr, args
        assert "Traceback" not in proc.stderr
    assert not marker.exists(), marker.read_text()
