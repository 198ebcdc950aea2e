"""`sparkctl trust` on the lab: every recorded host key is found unchanged; a node whose
host keys are regenerated stops trust (exit 7, naming it, with the accept command) and
validate; `--accept` makes it reachable again. The node's original keys and the lab's
known_hosts are put back afterwards, and trust finds every host unchanged again.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from sparkctl.trust import HostKey
from sparkctl_lab.podman import Podman
from tests.conftest import SIM_INVENTORY, LabSession, sparkctl
from tests.labhost import SSH_DIR, ssh

pytestmark = pytest.mark.lab

NODE = "spark2"
BACKUP = "/root/sparkctl-test-hostkeys"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
# Root's ssh sessions on the node (not the listener): ended so that no ControlMaster
# opened before the change (Ansible's, validate's) carries on without a key check.
END_SESSIONS = "pkill -f '^sshd: root' || true"


def _trust(*args: str) -> tuple[int, dict[str, dict[str, object]], str]:
    proc = sparkctl("trust", str(SIM_INVENTORY), "--json", *args, timeout=120)
    try:
        hosts = {h["host"]: h for h in json.loads(proc.stdout)["hosts"]}
    except (ValueError, KeyError):
        hosts = {}
    return proc.returncode, hosts, proc.stderr


def _exec(podman: Podman, script: str) -> str:
    return podman.exec(NODE, ["sh", "-c", script], timeout=120).stdout


def _ed25519(podman: Podman) -> HostKey:
    fields = _exec(podman, "cat /etc/ssh/ssh_host_ed25519_key.pub").split()
    key = HostKey.parse(fields[0], fields[1])
    assert key is not None, fields
    return key


def _wait_offers(address: str, key: HostKey, timeout: float = 60) -> None:
    """Until sshd on ``address`` answers with ``key`` (it restarts with its new keys)."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(
            ["ssh-keyscan", "-T", "2", "-t", "ed25519", address],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if key.text in out:
            return
        assert time.monotonic() < deadline, f"{address} does not offer {key.fingerprint}"
        time.sleep(0.5)


def test_every_recorded_host_key_is_unchanged(lab: LabSession) -> None:
    rc, hosts, err = _trust()
    assert rc == 0, err
    names = [n.name for n in lab.inventory.nodes] + ["lab-switch"]
    assert sorted(hosts) == sorted(names)
    for name, host in hosts.items():
        assert host["outcome"] == "unchanged", (name, host)
        assert host["known_hosts"] == str(KNOWN_HOSTS)
        assert str(host["fingerprint"]).startswith("SHA256:")


@dataclass(frozen=True)
class Rekeyed:
    address: str
    old: HostKey
    new: HostKey


@pytest.fixture
def rekeyed(lab: LabSession) -> Iterator[Rekeyed]:
    """spark2 with freshly generated host keys (as after a reinstall); afterwards its
    original keys and the lab's known_hosts (byte for byte) are back."""
    podman = Podman()
    address = lab.inventory.node(NODE).mgmt_ip
    known = KNOWN_HOSTS.read_bytes()
    had_old = KNOWN_HOSTS.with_name("known_hosts.old").exists()
    old = _ed25519(podman)
    _exec(
        podman, f"rm -rf {BACKUP} && mkdir -m 700 {BACKUP} && cp -a /etc/ssh/ssh_host_* {BACKUP}/"
    )
    try:
        _exec(
            podman,
            "rm /etc/ssh/ssh_host_* && ssh-keygen -A && systemctl restart ssh && " + END_SESSIONS,
        )
        new = _ed25519(podman)
        assert new != old
        _wait_offers(address, new)
        yield Rekeyed(address, old, new)
    finally:
        _exec(
            podman,
            f"rm -f /etc/ssh/ssh_host_* && cp -a {BACKUP}/ssh_host_* /etc/ssh/ && "
            f"rm -rf {BACKUP} && systemctl restart ssh && " + END_SESSIONS,
        )
        KNOWN_HOSTS.write_bytes(known)
        KNOWN_HOSTS.chmod(0o600)
        if not had_old:
            KNOWN_HOSTS.with_name("known_hosts.old").unlink(missing_ok=True)
        _wait_offers(address, old)
        rc, hosts, err = _trust()
        assert rc == 0, err
        assert {h["outcome"] for h in hosts.values()} == {"unchanged"}, hosts
        assert ssh(address, "hostname").stdout.strip() == NODE


def test_a_regenerated_host_key_stops_trust_and_validate(rekeyed: Rekeyed) -> None:
    known = KNOWN_HOSTS.read_bytes()
    rc, hosts, err = _trust()
    assert rc == 7, err
    flat = " ".join(err.split())
    assert f"{NODE} ({rekeyed.address})" in flat
    assert rekeyed.old.fingerprint in flat
    assert rekeyed.new.fingerprint in flat
    assert f"sparkctl trust {SIM_INVENTORY} --accept {NODE}" in flat
    assert hosts[NODE]["outcome"] == "changed"
    assert hosts[NODE]["fingerprint"] == rekeyed.new.fingerprint
    assert hosts[NODE]["recorded_fingerprint"] == rekeyed.old.fingerprint
    assert {h["outcome"] for n, h in hosts.items() if n != NODE} == {"unchanged"}
    assert KNOWN_HOSTS.read_bytes() == known  # nothing recorded over the old key

    proc = sparkctl("validate", str(SIM_INVENTORY), "--no-nccl", "--json", timeout=900)
    assert proc.returncode != 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    refused = [
        c
        for c in report["checks"]
        if c["host"] == NODE and c["check"] == "reachable" and c["outcome"] in ("failed", "error")
    ]
    assert refused, report["checks"]
    assert re.search(r"host key", refused[0]["message"], re.I), refused[0]
    assert NODE in proc.stderr
    assert KNOWN_HOSTS.read_bytes() == known


def test_accept_records_the_new_key_and_ssh_works_again(rekeyed: Rekeyed) -> None:
    assert ssh(rekeyed.address, "true", check=False).returncode != 0  # strict: refused
    rc, hosts, err = _trust("--accept", NODE)
    assert rc == 0, err
    assert hosts[NODE]["outcome"] == "replaced"
    assert hosts[NODE]["fingerprint"] == rekeyed.new.fingerprint
    assert f"replaced ssh-ed25519 {rekeyed.old.fingerprint}" in " ".join(err.split())
    assert ssh(rekeyed.address, "hostname").stdout.strip() == NODE
    rc, hosts, err = _trust()
    assert rc == 0, err
    assert {h["outcome"] for h in hosts.values()} == {"unchanged"}
