"""`sparkctl provision` end to end on the lab: first run, idempotent re-run, jumbo mesh.

Runs after tests/lab/test_lab.py (which checks the lab as `lab up` made it).
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SIM_INVENTORY, LabSession, assert_unchanged, provision_lab, sparkctl
from tests.labhost import fault_rule, ssh

pytestmark = pytest.mark.lab


def test_first_provision_succeeds_on_every_host(
    lab: LabSession, provisioned: dict[str, object]
) -> None:
    hosts = provisioned["hosts"]
    assert isinstance(hosts, dict)
    # localhost: site.yml's last play, the watchdog's service on the controller
    # (roles/sglang_watchdog; off in the lab, where it only looks for a unit to remove).
    assert set(hosts) == {"spark1", "spark2", "spark3", "spark4", "lab-switch", "localhost"}
    for name, stats in hosts.items():
        assert stats["failed"] == 0 and stats["unreachable"] == 0, (name, stats)
    assert provisioned["failures"] == []
    assert Path(str(provisioned["artifact_dir"])).is_dir()


def test_jumbo_frames_pass_between_every_pair_on_both_twins(
    lab: LabSession, provisioned: dict[str, object]
) -> None:
    nodes = lab.inventory.nodes
    for src, dst in itertools.permutations(nodes, 2):
        for twin, ifname in (("a", "enp1s0f1np1"), ("b", "enP2p1s0f1np1")):
            out = ssh(
                src.mgmt_ip,
                f"ping -c 1 -W 2 -M do -s 8972 -I {ifname} {dst.fabric_ips[twin]}",
                check=False,
            )
            assert out.returncode == 0, (src.name, dst.name, twin, out.stdout, out.stderr)


def test_bad_inventory_is_refused_before_any_host_is_touched(
    lab: LabSession, provisioned: dict[str, object], tmp_path: Path
) -> None:
    bad = tmp_path / "inventory"
    shutil.copytree(SIM_INVENTORY.parent, bad)
    cluster = bad / "group_vars" / "sim" / "cluster.yml"
    cluster.write_text(
        cluster.read_text().replace(
            "fabric_b_subnet: 192.168.101.0/24", "fabric_b_subnet: 192.168.100.0/24"
        )
    )
    proc = sparkctl("provision", str(bad / "sim.ini"))
    assert proc.returncode == 2
    assert "variable fabric_b_subnet" in proc.stderr
    assert "cluster.yml" in proc.stderr
    assert "no host was contacted" in proc.stderr
    # The netplan on the nodes is still the good one.
    netplan = ssh(lab.inventory.node("spark1").mgmt_ip, "cat /etc/netplan/40-cx7.yaml").stdout
    assert "192.168.101.11/24" in netplan


Snapshot = Callable[[], dict[str, object]]


@pytest.mark.fault
def test_a_node_unreachable_over_management_stops_provision_for_every_host(
    lab: LabSession, provisioned: dict[str, object], snapshot: Snapshot
) -> None:
    """spark3's SSH port refused from the controller (its management path cut, the
    node itself running): provision stops for the whole cluster before changing any
    host and names spark3; once spark3 answers again a re-run completes and changes
    nothing. That re-run is also the idempotency test of provision: a second full run
    after the session's first changes nothing on any host."""
    node = lab.inventory.node("spark3")
    rule = fault_rule(
        "OUTPUT",
        ["-d", node.mgmt_ip, "-p", "tcp", "--dport", "22"],
        ["-j", "REJECT", "--reject-with", "tcp-reset"],
    )
    before = snapshot()
    subprocess.run(["iptables", "-I", *rule], check=True)
    try:
        proc = sparkctl("provision", str(SIM_INVENTORY), "--json", timeout=900)
    finally:
        subprocess.run(["iptables", "-D", *rule], check=True)
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    assert result["hosts"]["spark3"]["unreachable"] == 1
    assert all(s["changed"] == 0 for s in result["hosts"].values()), result["hosts"]
    assert [f["host"] for f in result["failures"]] == ["spark3"]
    assert (
        "provision stopped for the whole cluster: spark3 did not answer over SSH; "
        "no host was changed"
    ) in proc.stderr, proc.stderr[-3000:]
    assert_unchanged(before, snapshot(), "the stopped provision")
    again = provision_lab()
    changed = {h: s["changed"] for h, s in again["hosts"].items()}  # type: ignore[attr-defined]
    assert all(c == 0 for c in changed.values()), changed


@pytest.mark.fault
def test_netplan_change_that_cuts_the_node_off_is_rolled_back(
    lab: LabSession, provisioned: dict[str, object], tmp_path: Path, snapshot: Snapshot
) -> None:
    """A fabric route that steals the management path (replies to the controller
    leave through the fabric to a gateway that does not exist): the controller
    cannot reconnect, the node's own timer restores the previous netplan, the
    node answers again and the run fails saying what was rolled back."""
    node = lab.inventory.node("spark2")
    controller = "10.77.0.1"  # the lab network's gateway: where sparkctl's SSH comes from
    inv = tmp_path / "inventory"
    shutil.copytree(SIM_INVENTORY.parent, inv)
    (inv / "host_vars").mkdir(exist_ok=True)
    (inv / "host_vars" / "spark2.yml").write_text(
        "roce_fabric_routes_a:\n"
        f"  - {{to: {controller}/32, via: 192.168.100.250}}\n"
        "roce_fabric_confirm_seconds: 8\n"
        "roce_fabric_rollback_seconds: 20\n"
    )
    before = ssh(node.mgmt_ip, "cat /etc/netplan/40-cx7.yaml").stdout
    state = snapshot()
    try:
        proc = sparkctl(
            "provision",
            str(inv / "sim.ini"),
            "--limit",
            "spark2",
            "--tags",
            "roce_fabric",
            timeout=600,
        )
    finally:
        # Undo what the run left behind: the role's staged copy holds the bad
        # route until the next provision rewrites it.
        ssh(
            node.mgmt_ip,
            "cp -p /etc/netplan/40-cx7.yaml /etc/netplan/40-cx7.yaml.sparkctl-staged",
            check=False,
        )
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "rolled back" in proc.stderr, proc.stderr[-4000:]
    assert "40-cx7.yaml" in proc.stderr, proc.stderr[-4000:]
    # The node answers, with the previous netplan live and no stolen route.
    assert ssh(node.mgmt_ip, "cat /etc/netplan/40-cx7.yaml").stdout == before
    route = ssh(node.mgmt_ip, f"ip -o route get {controller}").stdout
    assert "dev enP7s7" in route, route
    assert "192.168.100.250" not in ssh(node.mgmt_ip, "ip -o route show").stdout
    # Within its bound: the node's own record of how long the bad change was live.
    guard = json.loads(ssh(node.mgmt_ip, "/usr/local/sbin/sparkctl-net-guard status").stdout)
    record = guard["last_rollback"]
    assert not guard["armed"] and record["armed_for_seconds"] == 20
    assert record["after_seconds"] <= 20 + 5, record
    assert_unchanged(state, snapshot(), "the rolled-back provision")


def _image_record(ip: str) -> str:
    """SGLANG_IMAGE of the node's version record: the image by the digest its unit runs."""
    text = ssh(ip, "cat /etc/sparkctl/sglang-version").stdout
    (line,) = [ln for ln in text.splitlines() if ln.startswith("SGLANG_IMAGE=")]
    return line.partition("=")[2]


def _unit_image(ip: str) -> str:
    argv = ssh(ip, "systemctl show -p ExecStart --value sparkctl-sglang.service").stdout.split()
    return next(w for w in argv if w.startswith("lmsysorg/sglang:"))


@pytest.mark.fault
def test_a_moved_image_tag_stops_provision_until_pinned_or_accepted(
    lab: LabSession, provisioned: dict[str, object], snapshot: Callable[[], dict[str, object]]
) -> None:
    """Tags move; the unit runs the digest the first pull recorded. When the registry's tag
    resolves to another digest, provision stops naming both and the way forward, changes no
    unit; --accept-image-digest moves the cluster to exactly that digest."""
    from sparkctl_lab import registry  # noqa: PLC0415
    from sparkctl_lab.podman import Podman  # noqa: PLC0415

    nodes = [n.name for n in lab.inventory.nodes]
    spark1 = lab.inventory.node("spark1").mgmt_ip
    ref = registry.lab_image_ref(lab.inventory)
    recorded = _image_record(spark1)
    old = recorded.partition("@")[2]
    assert recorded == f"{ref}@{old}" == _unit_image(spark1)
    before = snapshot()
    podman = Podman()
    new = registry.move_lab_tag(podman, nodes, ref)
    assert new != old
    try:
        proc = sparkctl("provision", str(SIM_INVENTORY), "-t", "sglang")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1, out[-3000:]
        assert f"{ref} now resolves to {new}, but this node was provisioned with {old}" in out
        assert f"--accept-image-digest {new}" in out and "sglang_image_digest" in out
        assert_unchanged(before, snapshot(), "provision with a moved tag")
        moved = sparkctl(
            "provision", str(SIM_INVENTORY), "-t", "sglang", "--accept-image-digest", new
        )
        assert moved.returncode == 0, moved.stdout[-3000:] + moved.stderr[-3000:]
        for node in lab.inventory.nodes:
            assert _image_record(node.mgmt_ip) == f"{ref}@{new}" == _unit_image(node.mgmt_ip)
    finally:
        registry.point_lab_tag(podman, nodes, ref, old)
        back = sparkctl(
            "provision", str(SIM_INVENTORY), "-t", "sglang", "--accept-image-digest", old
        )
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    assert _image_record(spark1) == recorded
    assert_unchanged(before, snapshot(), "provision back to the first digest")
