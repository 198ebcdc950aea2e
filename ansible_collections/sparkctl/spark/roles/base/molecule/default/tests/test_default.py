"""roles/base on a head (rank 0) and a worker: the state the role leaves.

Each test is one case per node (and per package, peer or address); expected
values come from the scenario's inventory and the role's defaults.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from verify_helpers import (
    DEFAULTS,
    HEAD,
    HOSTVARS,
    MGMT,
    SPARKS,
    assert_running,
    instance,
    name_of,
    podman,
)

UPSTREAM = HOSTVARS[HEAD].get("base_chrony_upstream", DEFAULTS["base_chrony_upstream"])
# base_cluster_key_dir: {{ sparkctl_state_dir }}/clusters/{{ cluster_name }}/ssh on the
# controller; SPARKCTL_STATE_DIR is the scenario's (config.yml), the cluster group "molecule".
KEY_DIR = Path(os.environ["SPARKCTL_STATE_DIR"]) / "clusters" / "molecule" / "ssh"
KEY = "id_sparkctl_cluster"
testinfra_hosts = [podman(name) for name in SPARKS]


def role_yaml_of(role: str) -> Any:
    """Another role's defaults (the fabric subnets are cluster_defaults')."""
    return yaml.safe_load((Path(__file__).parents[4] / role / "defaults" / "main.yml").read_text())


def block(text: str, marker: str) -> list[str]:
    """Lines between Ansible's `# BEGIN <marker>` and `# END <marker>`."""
    lines = text.splitlines()
    start, end = lines.index(f"# BEGIN {marker}"), lines.index(f"# END {marker}")
    return lines[start + 1 : end]


@pytest.mark.parametrize("package", DEFAULTS["base_packages"])
def test_package_is_installed(host: Any, package: str) -> None:
    assert host.package(package).is_installed


@pytest.mark.parametrize("twin", ["a", "b"])
@pytest.mark.parametrize("peer", SPARKS)
def test_fabric_name_of_every_node_is_in_etc_hosts(host: Any, peer: str, twin: str) -> None:
    names = block(host.file("/etc/hosts").content_string, "sparkctl fabric names")
    assert f"{HOSTVARS[peer][f'fabric_{twin}_ip']} {peer}-{twin}" in names
    assert len(names) == 2 * len(SPARKS)


def test_time_sources(host: Any) -> None:
    conf = host.file("/etc/chrony/conf.d/sparkctl.conf")
    assert conf.mode == 0o644
    lines = {line for line in conf.content_string.splitlines() if not line.startswith("#")}
    if name_of(host) == HEAD:
        assert lines == {f"server {s} iburst" for s in UPSTREAM} | {
            f"local stratum {DEFAULTS['base_chrony_local_stratum']}"
        } | {f"allow {MGMT[w]}" for w in SPARKS if w != HEAD}
    else:
        assert lines == {f"server {MGMT[HEAD]} iburst prefer minpoll 4 maxpoll 6"}


def test_chronyd_runs_without_setting_the_clock(host: Any) -> None:
    # hw_profile sim: clock_control false (a container shares the host's clock).
    dropin = host.file("/etc/systemd/system/chrony.service.d/sparkctl.conf")
    assert "ExecStart=!/usr/sbin/chronyd $DAEMON_OPTS -x" in dropin.content_string.splitlines()
    assert_running(host, "chrony")
    assert " -x" in host.check_output("ps -o args= -C chronyd")


def test_worker_gets_time_from_the_head(host: Any) -> None:
    expected = UPSTREAM if name_of(host) == HEAD else [MGMT[HEAD]]
    for _ in range(30):  # the first iburst exchange takes a few seconds
        sources = host.check_output("chronyc -n -c sources").splitlines()
        fields = {line.split(",")[2]: line.split(",") for line in sources}
        reached = name_of(host) == HEAD or int(fields.get(MGMT[HEAD], ["0"] * 6)[5], 8) > 0
        if set(expected) <= set(fields) and reached:
            break
        time.sleep(1)
    assert set(expected) <= set(fields), f"chronyc sources: {sources}"
    assert reached, f"the head never answered: {sources}"


def test_cluster_private_key_is_the_controllers(host: Any) -> None:
    key = host.file(f"/root/.ssh/{KEY}")
    assert key.user == "root"
    assert key.mode == 0o600
    public = (KEY_DIR / f"{KEY}.pub").read_text().split()[:2]
    assert host.check_output("ssh-keygen -y -f /root/.ssh/%s", KEY).split()[:2] == public


def test_cluster_key_is_authorised_from_the_cluster_only(host: Any) -> None:
    """restrict (no forwarding, no pty) and from= the fabric subnets and the nodes'
    own addresses: a copy of the key taken off a node is worth nothing elsewhere."""
    public = " ".join((KEY_DIR / f"{KEY}.pub").read_text().split()[:2])
    lines = block(host.file("/root/.ssh/authorized_keys").content_string, "sparkctl cluster key")
    assert len(lines) == 1
    options, key = lines[0].split(" ", 1)
    assert key.startswith(public)
    assert options.startswith('restrict,from="')
    sources = options.removeprefix('restrict,from="').removesuffix('"').split(",")
    shared = role_yaml_of("cluster_defaults")
    fabric = [HOSTVARS[HEAD].get(v, shared[v]) for v in ("fabric_a_subnet", "fabric_b_subnet")]
    assert sources[:2] == fabric
    assert set(MGMT.values()) <= set(sources)
    assert "0.0.0.0/0" not in sources


@pytest.mark.parametrize("peer", SPARKS)
def test_host_key_of_every_node_is_known(host: Any, peer: str) -> None:
    hv = HOSTVARS[peer]
    actual = instance(peer).file("/etc/ssh/ssh_host_ed25519_key.pub").content_string.split()[:2]
    names = [peer, f"{peer}-a", f"{peer}-b", hv["fabric_a_ip"], hv["fabric_b_ip"], MGMT[peer]]
    known = block(
        host.file("/etc/ssh/ssh_known_hosts").content_string, "sparkctl cluster host keys"
    )
    assert " ".join([",".join(names), *actual]) in known


@pytest.mark.parametrize("via", ["name", "management address"])
@pytest.mark.parametrize(("node", "peer"), [(a, b) for a in SPARKS for b in SPARKS if a != b])
def test_node_reaches_peer_with_the_cluster_key(node: str, peer: str, via: str) -> None:
    target = peer if via == "name" else MGMT[peer]
    # BatchMode and strict host key checking: no prompt, no trust on first use.
    ssh = instance(node).run(
        "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=5 %s hostname", target
    )
    assert ssh.rc == 0, ssh.stderr
    assert ssh.stdout.strip() == peer
