"""The rehearsal lab against real containers: reachability, wiring, MTU, shaping, identity.

Each test undoes what it changes, so the shared lab stays as ``lab up`` made it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from sparkctl.paths import controller_vars
from sparkctl_lab.lab import NETWORK as LAB_NETWORK
from tests.conftest import REPO, SIM_INVENTORY, LabSession, sparkctl
from tests.labhost import SSH_DIR, HostSnapshot, ssh

pytestmark = pytest.mark.lab

FABRIC_IFS = ("enp1s0f1np1", "enP2p1s0f1np1")
PORT0_IFS = ("enp1s0f0np0", "enP2p1s0f0np0")


def _ip(lab: LabSession, name: str) -> str:
    if lab.inventory.switch and lab.inventory.switch.name == name:
        return lab.inventory.switch.mgmt_ip
    return lab.inventory.node(name).mgmt_ip


def _links(host_ip: str) -> dict[str, dict[str, object]]:
    out = ssh(host_ip, "ip -j -d link show").stdout
    return {d["ifname"]: d for d in json.loads(out)}


# ----------------------------------------------------------------- SSH trust
def test_ansible_reaches_every_host_with_strict_host_keys(lab: LabSession) -> None:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
    }
    # Ansible by hand, outside sparkctl's playbooks: the controller's variables the
    # inventory refers to ({{ sparkctl_state_dir }}) are given as sparkctl gives them.
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible"),
            "-i",
            str(SIM_INVENTORY),
            "-e",
            json.dumps(controller_vars()),
            "all",
            "-m",
            "ansible.builtin.command",
            "-a",
            "hostname",
            "-o",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [n.name for n in lab.inventory.nodes] + ["lab-switch"]
    for name in names:
        assert re.search(
            rf"^{re.escape(name)} \| CHANGED \| rc=0 \| \(stdout\) {name}$", proc.stdout, re.M
        ), proc.stdout


def test_paramiko_rejects_unknown_keys_and_accepts_recorded_ones(lab: LabSession) -> None:
    key = paramiko.Ed25519Key.from_private_key_file(str(SSH_DIR / "id_ed25519"))
    for name in [n.name for n in lab.inventory.nodes] + ["lab-switch"]:
        client = paramiko.SSHClient()
        client.load_host_keys(str(SSH_DIR / "known_hosts"))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(
            _ip(lab, name),
            username="root",
            pkey=key,
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
        _, stdout, _ = client.exec_command("hostname")
        assert stdout.read().decode().strip() == name
        client.close()
        # The same host with no recorded key must be refused, not trusted on first use.
        stranger = paramiko.SSHClient()
        stranger.set_missing_host_key_policy(paramiko.RejectPolicy())
        with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
            stranger.connect(
                _ip(lab, name),
                username="root",
                pkey=key,
                look_for_keys=False,
                allow_agent=False,
                timeout=10,
            )
        stranger.close()


def test_every_node_has_its_own_host_key() -> None:
    keys = [line.split()[2] for line in (SSH_DIR / "known_hosts").read_text().splitlines()]
    assert len(keys) == 5
    assert len(set(keys)) == 5


def test_lab_ssh_runs_a_command(lab: LabSession) -> None:
    proc = sparkctl("lab", "ssh", "spark3", "hostname", check=True)
    assert proc.stdout.strip() == "spark3"
    bad = sparkctl("lab", "ssh", "spark9", "hostname")
    assert bad.returncode == 2
    assert "spark9" in bad.stderr


# ------------------------------------------------------------------- wiring
def test_nodes_have_spark_interface_names(lab: LabSession) -> None:
    for node in lab.inventory.nodes:
        links = _links(node.mgmt_ip)
        assert {"enP7s7", *FABRIC_IFS, *PORT0_IFS} <= set(links), node.name
        addrs = ssh(node.mgmt_ip, "ip -j -4 addr show").stdout
        by_if = {d["ifname"]: [a["local"] for a in d["addr_info"]] for d in json.loads(addrs)}
        assert by_if["enP7s7"] == [node.mgmt_ip]
        # Fabric twins come up without addresses: that is the provisioning's job.
        for ifname in FABRIC_IFS:
            assert by_if.get(ifname, []) == [], (node.name, ifname)
            assert links[ifname]["operstate"] == "UP"
            assert links[ifname]["mtu"] == 1500


def test_switch_bridges_each_twin_into_its_own_domain(lab: LabSession) -> None:
    links = _links(lab.inventory.switch.mgmt_ip)  # type: ignore[union-attr]
    for port in lab.inventory.ports:
        assert links[port.name]["master"] == f"br-{port.twin}", port
        assert links[port.name]["mtu"] == 1500  # out of the box, like a real switch
        assert links[port.name]["operstate"] == "UP"


def test_status_json_reports_live_state(lab: LabSession) -> None:
    status = json.loads(sparkctl("lab", "status", "--json", check=True).stdout)
    assert status["up"] is True
    assert {h["name"] for h in status["hosts"]} == {
        "spark1",
        "spark2",
        "spark3",
        "spark4",
        "lab-switch",
    }
    switch = next(h for h in status["hosts"] if h["role"] == "switch")
    rates = {ln["name"]: ln.get("rate_mbit") for ln in switch["links"]}
    assert all(rates[p.name] == 1000 for p in lab.inventory.ports), rates


def test_lab_up_again_leaves_the_running_lab_alone(lab: LabSession) -> None:
    before = ssh(lab.inventory.node("spark1").mgmt_ip, "cat /proc/1/stat").stdout.split()[21]
    again = sparkctl("lab", "up")
    assert again.returncode == 0, again.stderr
    assert "already up" in again.stderr
    after = ssh(lab.inventory.node("spark1").mgmt_ip, "cat /proc/1/stat").stdout.split()[21]
    assert before == after  # same PID 1 start time: the container was not recreated


# --------------------------------------------------------------- MTU / jumbo
@pytest.fixture
def twin_a_addresses(lab: LabSession) -> Iterator[tuple[str, str]]:
    """Temporary fabric addresses on spark1/spark2 twin a; removed afterwards."""
    n1, n2 = lab.inventory.node("spark1"), lab.inventory.node("spark2")
    for n in (n1, n2):
        ssh(n.mgmt_ip, f"ip addr add {n.fabric_ips['a']}/24 dev {FABRIC_IFS[0]}")
    try:
        yield n1.mgmt_ip, n2.fabric_ips["a"]
    finally:
        for n in (n1, n2):
            ssh(
                n.mgmt_ip,
                f"ip addr flush dev {FABRIC_IFS[0]}; ip link set {FABRIC_IFS[0]} mtu 1500",
                check=False,
            )
        for port in ("spark1:a", "spark2:a"):
            sparkctl("lab", "port", port, "--mtu", "1500")


def _jumbo_ping(src_ip: str, dst: str) -> subprocess.CompletedProcess[str]:
    return ssh(src_ip, f"ping -c 2 -W 1 -M do -s 8972 {dst}", check=False)


def test_jumbo_frames_need_the_switch_ports_raised(
    lab: LabSession, twin_a_addresses: tuple[str, str]
) -> None:
    src, dst = twin_a_addresses
    ssh(lab.inventory.node("spark2").mgmt_ip, f"ip link set {FABRIC_IFS[0]} mtu 9000")
    ssh(src, f"ip link set {FABRIC_IFS[0]} mtu 9000")
    # Small frames pass: the path itself works.
    assert ssh(src, f"ping -c 1 -W 2 {dst}", check=False).returncode == 0
    # Hosts at 9000 behind switch ports at 1500: the large frame is dropped silently.
    blocked = _jumbo_ping(src, dst)
    assert blocked.returncode != 0
    assert "100% packet loss" in blocked.stdout
    for port in ("spark1:a", "spark2:a"):
        sparkctl("lab", "port", port, "--mtu", "9216", check=True)
    passed = _jumbo_ping(src, dst)
    assert passed.returncode == 0, passed.stdout
    assert " 0% packet loss" in passed.stdout


# --------------------------------------------------------------- bandwidth
@pytest.fixture
def twin_b_pair(lab: LabSession) -> Iterator[tuple[str, str, str]]:
    """spark3 and spark4 over twin b. This test runs after the lab's others that neither
    measure nor serve (quiet_host: tests/conftest.py, _phase), on a provisioned
    lab whose twins have their addresses already; an address it had to add itself is the
    only one it removes again."""
    n3, n4 = lab.inventory.node("spark3"), lab.inventory.node("spark4")
    added = []
    for n in (n3, n4):
        have = ssh(n.mgmt_ip, f"ip -o -4 addr show dev {FABRIC_IFS[1]}").stdout
        if f" {n.fabric_ips['b']}/" not in have:
            ssh(n.mgmt_ip, f"ip addr add {n.fabric_ips['b']}/24 dev {FABRIC_IFS[1]}")
            added.append(n)
    try:
        yield n3.mgmt_ip, n4.mgmt_ip, n4.fabric_ips["b"]
    finally:
        for n in (n3, n4):
            ssh(n.mgmt_ip, "pkill -x iperf3", check=False)
        for n in added:
            ssh(n.mgmt_ip, f"ip addr del {n.fabric_ips['b']}/24 dev {FABRIC_IFS[1]}", check=False)


def _iperf(client: str, server: str, dst: str, *, reverse: bool) -> float:
    ssh(server, "iperf3 -s -1 -D")
    time.sleep(0.3)
    out = ssh(client, f"iperf3 -c {dst} -t 4 -O 1 -J {'-R' if reverse else ''}", timeout=60).stdout
    return float(json.loads(out)["end"]["sum_received"]["bits_per_second"]) / 1e6


@pytest.mark.quiet_host
def test_throughput_follows_the_shaping_rate_both_ways(
    lab: LabSession, twin_b_pair: tuple[str, str, str]
) -> None:
    client, server, dst = twin_b_pair
    rate = int(lab.inventory.cluster_var("lab_link_rate_mbit"))
    for reverse in (False, True):
        measured = _iperf(client, server, dst, reverse=reverse)
        assert 0.8 * rate <= measured <= 1.2 * rate, (reverse, measured, rate)
    # Lower one port to a quarter: the pair follows, so the rate is the lab's, not the host's.
    sparkctl("lab", "port", "spark4:b", "--rate", str(rate // 4), check=True)
    try:
        slow = _iperf(client, server, dst, reverse=False)
        assert 0.8 * rate / 4 <= slow <= 1.2 * rate / 4, slow
    finally:
        sparkctl("lab", "port", "spark4:b", "--rate", str(rate), check=True)


# ----------------------------------------------------- simulated identity
def test_nvidia_smi_answers_like_a_spark(lab: LabSession) -> None:
    driver = str(lab.inventory.cluster_var("lab_gpu_driver_version"))
    for node in lab.inventory.nodes:
        table = ssh(node.mgmt_ip, "nvidia-smi").stdout
        assert re.search(
            rf"NVIDIA-SMI {re.escape(driver)}\s+Driver Version: "
            rf"{re.escape(driver)}\s+CUDA Version: 13\.0",
            table,
        ), table
        assert re.search(r"^\|\s+0\s+NVIDIA GB10\s", table, re.M), table
        csv = ssh(
            node.mgmt_ip,
            "nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader",
        ).stdout
        assert csv.strip() == f"NVIDIA GB10, {driver}, 12.1"
        assert "DGX Spark" in ssh(node.mgmt_ip, "cat /etc/dgx-release").stdout


def test_ibdev2netdev_follows_the_link(lab: LabSession) -> None:
    node = lab.inventory.node("spark2").mgmt_ip
    up = ssh(node, "ibdev2netdev").stdout
    assert "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)" in up
    assert "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)" in up
    assert "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)" in up  # port 0 is not cabled
    sparkctl("lab", "port", "spark2:a", "--down", check=True)
    try:
        deadline = time.monotonic() + 10
        while "enp1s0f1np1 (Down)" not in (down := ssh(node, "ibdev2netdev").stdout):
            assert time.monotonic() < deadline, down
            time.sleep(0.2)
        assert "enP2p1s0f1np1 (Up)" in down  # only the pulled cable's twin
    finally:
        sparkctl("lab", "port", "spark2:a", "--up", check=True)
    deadline = time.monotonic() + 10
    while "enp1s0f1np1 (Up)" not in ssh(node, "ibdev2netdev").stdout:
        assert time.monotonic() < deadline
        time.sleep(0.2)


# ---------------------------------------------------------------- teardown
@pytest.mark.lab_teardown
def test_lab_down_leaves_nothing_behind(lab: LabSession) -> None:
    """``lab down`` leaves nothing of the lab and removes nothing that is not the lab's.

    The host is shared: other tests of this session (molecule scenarios) and
    whatever ran before it may create or remove their own containers and
    networks meanwhile - a CI machine once started this session with a killed
    run's molecule instances still there, which the molecule scenario of the
    same name then replaced. So "nothing behind" is "nothing that was not
    there before ``lab up``", and "nothing else touched" is checked against
    the state just before ``lab down``.
    """
    if lab.before is None:
        pytest.skip("SPARKCTL_KEEP_LAB=1 reused a running lab: no clean 'before' to compare")
    switch = lab.inventory.switch
    ours = {node.name for node in lab.inventory.nodes} | ({switch.name} if switch else set())
    pre_down = HostSnapshot.take()
    assert ours <= pre_down.containers, pre_down.containers
    assert "table inet sparkctl_lab" in pre_down.firewall  # the egress guard
    down = sparkctl("lab", "down", check=True)
    assert "container spark1" in down.stderr
    assert "egress guard" in down.stderr
    after = HostSnapshot.take()
    # nothing of the lab is left
    assert after.containers - lab.before.containers == set()
    assert after.networks - lab.before.networks == set()
    assert after.links - lab.before.links == set()
    assert set(after.firewall) - set(lab.before.firewall) == set()
    assert not ours & after.containers
    # and what was not the lab's is still there
    assert pre_down.containers - ours <= after.containers
    assert pre_down.networks - {LAB_NETWORK} <= after.networks
    status = sparkctl("lab", "status", "--json")
    assert status.returncode == 1
    assert json.loads(status.stdout)["up"] is False
