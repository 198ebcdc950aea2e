"""sparkctl.inventory.load: the example inventories and what a bad inventory says.

The shipped inventories (inventory/sim.ini for the lab, inventory/lab.ini for
the real cluster) are checked value by value; bad inventories are written to
tmp_path and must fail with ExitCode.BAD_INPUT and a message naming the file,
the host and the variable, so a user can find the line to fix.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import shutil
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from sparkctl import cli, inventory
from sparkctl.errors import ExitCode, SparkctlError

# inventory.load calls ansible's init_plugin_loader() on every call, which warns
# from the second call on in one process (see the report on inventory.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "inventory" / "sim.ini"
LAB = ROOT / "inventory" / "lab.ini"
SPARKS = ("spark1", "spark2", "spark3", "spark4")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def load_error(path: Path) -> SparkctlError:
    with pytest.raises(SparkctlError) as info:
        inventory.load(path)
    assert info.value.code == ExitCode.BAD_INPUT
    return info.value


# ------------------------------------------------------------------ sim.ini
def test_sim_nodes_in_rank_order_with_addresses() -> None:
    inv = inventory.load(SIM)
    assert inv.cluster == "sim"
    assert [n.name for n in inv.nodes] == list(SPARKS)
    assert [n.rank for n in inv.nodes] == [0, 1, 2, 3]
    assert [n.mgmt_ip for n in inv.nodes] == [
        "10.77.0.11",
        "10.77.0.12",
        "10.77.0.13",
        "10.77.0.14",
    ]
    assert [dict(n.fabric_ips) for n in inv.nodes] == [
        {"a": f"192.168.100.{i}", "b": f"192.168.101.{i}"} for i in (11, 12, 13, 14)
    ]
    assert inv.node("spark3").rank == 2


def test_sim_switch_and_ports() -> None:
    inv = inventory.load(SIM)
    assert inv.switch == inventory.Switch(name="lab-switch", mgmt_ip="10.77.0.2", os="linux")
    # The lab cables every twin to a port of its own: 8 ports, a and b per node.
    assert [(p.name, p.node, p.twin) for p in inv.ports] == [
        ("swp1", "spark1", "a"),
        ("swp2", "spark1", "b"),
        ("swp3", "spark2", "a"),
        ("swp4", "spark2", "b"),
        ("swp5", "spark3", "a"),
        ("swp6", "spark3", "b"),
        ("swp7", "spark4", "a"),
        ("swp8", "spark4", "b"),
    ]


def test_sim_cluster_vars_from_group_vars() -> None:
    inv = inventory.load(SIM)
    assert inv.cluster_var("hw_profile") == "sim"
    assert inv.cluster_var("lab_mgmt_subnet") == "10.77.0.0/24"
    assert inv.cluster_var("lab_link_rate_mbit") == 1000
    assert inv.cluster_var("no_such_var", "dflt") == "dflt"
    # Values are plain Python (Ansible's tagged types stripped).
    assert type(inv.cluster_var("fabric_a_netdev")) is str
    assert type(inv.hostvars["spark1"]["node_rank"]) is int


def test_unknown_node_is_bad_input() -> None:
    inv = inventory.load(SIM)
    with pytest.raises(SparkctlError) as info:
        inv.node("spark9")
    assert info.value.code == ExitCode.BAD_INPUT
    assert "spark9" in info.value.message
    assert str(SIM) in info.value.message


# ------------------------------------------------------------------ lab.ini
def test_lab_nodes_in_rank_order_with_addresses() -> None:
    inv = inventory.load(LAB)
    assert inv.cluster == "lab"
    assert [n.name for n in inv.nodes] == list(SPARKS)
    assert [n.rank for n in inv.nodes] == [0, 1, 2, 3]
    docs = ipaddress.IPv4Network("198.51.100.0/24")  # RFC 5737 TEST-NET-2
    for node in inv.nodes:
        assert ipaddress.IPv4Address(node.mgmt_ip) in docs, node
        assert ipaddress.IPv4Address(node.mgmt_ip) not in ipaddress.IPv4Network("192.0.2.0/24")
    # NVIDIA's two-subnet scheme: twin a in .100, twin b in .101.
    for node in inv.nodes:
        assert ipaddress.IPv4Address(node.fabric_ips["a"]) in ipaddress.IPv4Network(
            "192.168.100.0/24"
        ), node
        assert ipaddress.IPv4Address(node.fabric_ips["b"]) in ipaddress.IPv4Network(
            "192.168.101.0/24"
        ), node
    assert len({n.mgmt_ip for n in inv.nodes}) == 4


def test_lab_switch_and_one_port_per_spark() -> None:
    inv = inventory.load(LAB)
    assert inv.switch is not None
    assert inv.switch.name == "fabric-switch"
    assert inv.switch.os == "nvue"
    assert ipaddress.IPv4Address(inv.switch.mgmt_ip) in ipaddress.IPv4Network("198.51.100.0/24")
    assert inv.switch.mgmt_ip not in {n.mgmt_ip for n in inv.nodes}
    # One QSFP port per Spark carries both twins (two PCIe functions of one port).
    assert [(p.name, p.node, p.twin) for p in inv.ports] == [
        ("swp1", "spark1", "both"),
        ("swp2", "spark2", "both"),
        ("swp3", "spark3", "both"),
        ("swp4", "spark4", "both"),
    ]


def test_lab_cluster_and_connection_vars() -> None:
    inv = inventory.load(LAB)
    assert inv.cluster_var("hw_profile") == "dgx_spark"
    assert inv.cluster_var("fabric_a_netdev") == "enp1s0f1np1"
    assert inv.cluster_var("fabric_b_netdev") == "enP2p1s0f1np1"
    for name in [*SPARKS, "fabric-switch"]:
        hv = inv.hostvars[name]
        assert hv["ansible_become"] is True
        assert hv["ansible_user"] not in {"root", ""}
        assert not [k for k in hv if k.startswith("lab_")], name
        for secret in (
            "ansible_password",
            "ansible_ssh_pass",
            "ansible_become_pass",
            "ansible_become_password",
        ):
            assert secret not in hv
        args = str(hv.get("ansible_ssh_common_args", ""))
        assert "StrictHostKeyChecking=no" not in args
        assert "UserKnownHostsFile=/dev/null" not in args


@pytest.mark.parametrize("path", [SIM, LAB], ids=["sim", "lab"])
def test_fabric_addresses_lie_in_their_twin_subnet(path: Path) -> None:
    inv = inventory.load(path)
    subnets = {t: ipaddress.IPv4Network(inv.cluster_var(f"fabric_{t}_subnet")) for t in "ab"}
    assert subnets["a"] != subnets["b"]  # one subnet for both twins breaks NCCL
    for node in inv.nodes:
        for twin, addr in node.fabric_ips.items():
            assert ipaddress.IPv4Address(addr) in subnets[twin], (node.name, twin)


def test_lab_and_sim_have_the_same_form() -> None:
    """Same group names and the same variable names in cluster.yml."""
    sim, lab = inventory.load(SIM), inventory.load(LAB)
    keys = {}
    for name in ("sim", "lab"):
        data = yaml.safe_load(
            (ROOT / "inventory" / "group_vars" / name / "cluster.yml").read_text()
        )
        keys[name] = set(data)
    assert keys["sim"] == keys["lab"]
    per_host = {"ansible_host", "node_rank", "fabric_a_ip", "fabric_b_ip"}
    for inv in (sim, lab):
        for node in inv.nodes:
            assert per_host <= set(inv.hostvars[node.name])
        assert inv.switch is not None
        assert "switch_os" in inv.hostvars[inv.switch.name]


# ------------------------------------------------------ order and cluster name
def test_nodes_sorted_by_rank_not_by_file_order(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark3 ansible_host=10.0.0.13 node_rank=2
        spark1 ansible_host=10.0.0.11 node_rank=0
        spark4 ansible_host=10.0.0.14 node_rank=3
        spark2 ansible_host=10.0.0.12 node_rank=1
    """,
    )
    inv = inventory.load(path)
    assert [n.name for n in inv.nodes] == list(SPARKS)
    assert inv.switch is None
    assert inv.ports == ()


def test_cluster_name_is_the_cluster_group(tmp_path: Path) -> None:
    path = write(
        tmp_path / "whatever.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0
        [switches]
        sw ansible_host=10.0.0.2 switch_os=sonic
        [monitoring]
        spark1
        [bigdgx:children]
        sparks
        switches
    """,
    )
    inv = inventory.load(path)
    # "monitoring" does not hold every host; "bigdgx" does.
    assert inv.cluster == "bigdgx"


def test_cluster_name_falls_back_to_file_stem(tmp_path: Path) -> None:
    path = write(
        tmp_path / "mycluster.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0
    """,
    )
    assert inventory.load(path).cluster == "mycluster"


def test_group_vars_of_the_cluster_group_are_read(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0
        [c1:children]
        sparks
    """,
    )
    write(
        tmp_path / "group_vars" / "c1" / "cluster.yml",
        """
        switch_ports:
          e1: {node: spark1, twin: a}
          e2: {node: spark1}
    """,
    )
    inv = inventory.load(path)
    # A port without twin carries both twins.
    assert [(p.name, p.node, p.twin) for p in inv.ports] == [
        ("e1", "spark1", "a"),
        ("e2", "spark1", "both"),
    ]


# ---------------------------------------------------------- bad inventories
def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.ini"
    err = load_error(path)
    assert str(path) in err.message
    assert "not found" in err.message


def test_directory_instead_of_file(tmp_path: Path) -> None:
    err = load_error(tmp_path)
    assert str(tmp_path) in err.message
    assert "not a file" in err.message


def test_unparsable_ini(tmp_path: Path) -> None:
    path = write(
        tmp_path / "broken.ini",
        """
        [sparks
        spark1 ansible_host=10.0.0.11 node_rank=0
    """,
    )
    err = load_error(path)
    assert str(path) in err.message
    assert "parse" in err.message


def test_no_sparks_group(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [switches]
        sw ansible_host=10.0.0.2 switch_os=linux
    """,
    )
    err = load_error(path)
    assert str(path) in err.message
    assert "[sparks]" in err.message
    assert err.hint


def test_empty_sparks_group(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        [switches]
        sw ansible_host=10.0.0.2 switch_os=linux
    """,
    )
    assert "[sparks]" in load_error(path).message


def test_node_rank_not_an_integer(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0
        spark2 ansible_host=10.0.0.12 node_rank=one
    """,
    )
    err = load_error(path)
    assert str(path) in err.message
    assert "host spark2" in err.message
    assert "variable node_rank" in err.message
    assert "'one'" in err.message


def test_node_rank_missing(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11
    """,
    )
    err = load_error(path)
    assert "host spark1" in err.message
    assert "variable node_rank" in err.message
    assert "missing" in err.message


@pytest.mark.parametrize("value", ["spark1.example.net", "10.0.0.300", "fe80::1"])
def test_ansible_host_not_ipv4(tmp_path: Path, value: str) -> None:
    path = write(
        tmp_path / "c.ini",
        f"""
        [sparks]
        spark1 ansible_host={value} node_rank=0
    """,
    )
    err = load_error(path)
    assert str(path) in err.message
    assert "host spark1" in err.message
    assert "variable ansible_host" in err.message
    assert value in err.message


def test_fabric_ip_not_ipv4(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0 fabric_b_ip=192.168.101.300
    """,
    )
    err = load_error(path)
    assert "host spark1" in err.message
    assert "variable fabric_b_ip" in err.message


def test_two_switches(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0
        [switches]
        sw1 ansible_host=10.0.0.2 switch_os=linux
        sw2 ansible_host=10.0.0.3 switch_os=linux
    """,
    )
    err = load_error(path)
    assert str(path) in err.message
    assert "[switches]" in err.message
    assert "2 switches" in err.message


def test_switch_ansible_host_not_ipv4(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0
        [switches]
        sw1 ansible_host=switch.example.net switch_os=linux
    """,
    )
    err = load_error(path)
    assert "host sw1" in err.message
    assert "variable ansible_host" in err.message


@pytest.mark.parametrize("ports", ["[swp1, swp2]", "swp1", "42"])
def test_switch_ports_not_a_mapping(tmp_path: Path, ports: str) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0
        [c1:children]
        sparks
    """,
    )
    write(tmp_path / "group_vars" / "c1" / "cluster.yml", f"switch_ports: {ports}\n")
    err = load_error(path)
    # The file that sets it, with its line: where the user fixes it.
    assert f"{tmp_path / 'group_vars' / 'c1' / 'cluster.yml'}:1:" in err.message
    assert "variable switch_ports" in err.message
    assert "mapping" in err.message


def test_switch_port_without_node(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.ini",
        """
        [sparks]
        spark1 ansible_host=10.0.0.11 node_rank=0
        [c1:children]
        sparks
    """,
    )
    write(tmp_path / "group_vars" / "c1" / "cluster.yml", "switch_ports:\n  swp7: {twin: a}\n")
    err = load_error(path)
    assert "variable switch_ports.swp7" in err.message
    assert "node" in err.message


def test_duplicate_node_rank_is_refused_by_validate(tmp_path: Path) -> None:
    def spark(n: int) -> str:
        return (
            f"spark{n} ansible_host=10.0.0.1{n} node_rank=0 "
            f"fabric_a_ip=192.168.100.1{n} fabric_b_ip=192.168.101.1{n}"
        )

    path = tmp_path / "c.ini"
    path.write_text(f"[sparks]\n{spark(1)}\n{spark(2)}\n")
    inventory.load(path)  # structurally fine: load() only parses
    with pytest.raises(SparkctlError) as info:
        inventory.validate(path)
    assert info.value.code == ExitCode.BAD_INPUT
    assert "host spark2: variable node_rank: rank 0 is also spark1's" in info.value.message
    assert str(path) in info.value.message


# ------------------------------------------------- every rule, through the CLI
# One bad inventory per inventory rule: a copy of sim.ini (and its
# group_vars) with one edit. `sparkctl inventory check` must exit 2 and print a
# line that names the file (where the value is, or the inventory when it is
# missing), the host (or "all hosts" for a cluster-wide setting) and the variable.
def _sim_copy(tmp_path: Path) -> Path:
    shutil.copy(SIM, tmp_path / "sim.ini")
    shutil.copytree(SIM.parent / "group_vars", tmp_path / "group_vars")
    return tmp_path / "sim.ini"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + textwrap.dedent(text))


def _check_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], path: Path
) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["sparkctl", "inventory", "check", str(path)])
    with pytest.raises(SystemExit) as info:
        cli.main()
    return int(info.value.code or 0), capsys.readouterr().err


class Rule(NamedTuple):
    name: str
    where: str  # "ini": edit sim.ini; "cluster": edit cluster.yml; "cluster+": append to it
    old: str
    new: str
    file: str  # the file the message must name
    who: str  # "host NAME" or "all hosts"
    var: str
    text: str  # what the message says about the value


RULES = [
    Rule(*rule)
    for rule in [
        (
            "unknown-variable",
            "ini",
            "spark2 ansible_host=10.77.0.12",
            "spark2 ansible_host=10.77.0.12 roce_fabric_mtus=9000",
            "sim.ini",
            "host spark2",
            "roce_fabric_mtus",
            "did you mean roce_fabric_mtu?",
        ),
        (
            "missing-node-rank",
            "ini",
            "ansible_host=10.77.0.13 node_rank=2",
            "ansible_host=10.77.0.13",
            "sim.ini",
            "host spark3",
            "node_rank",
            "missing",
        ),
        (
            "missing-fabric-ip",
            "ini",
            " fabric_b_ip=192.168.101.13",
            "",
            "sim.ini",
            "host spark3",
            "fabric_b_ip",
            "missing",
        ),
        (
            "missing-switch-os",
            "ini",
            " switch_os=linux",
            "",
            "sim.ini",
            "host lab-switch",
            "switch_os",
            "missing",
        ),
        (
            "malformed-mgmt-address",
            "ini",
            "ansible_host=10.77.0.14",
            "ansible_host=10.77.0.314",
            "sim.ini",
            "host spark4",
            "ansible_host",
            "10.77.0.314",
        ),
        (
            "malformed-fabric-address",
            "ini",
            "fabric_a_ip=192.168.100.12",
            "fabric_a_ip=192.168.100",
            "sim.ini",
            "host spark2",
            "fabric_a_ip",
            "not an IPv4 address",
        ),
        (
            "malformed-subnet",
            "cluster",
            "fabric_a_subnet: 192.168.100.0/24",
            "fabric_a_subnet: 192.168.100.0/33",
            "cluster.yml",
            "all hosts",
            "fabric_a_subnet",
            "CIDR",
        ),
        (
            "duplicate-mgmt-address",
            "ini",
            "ansible_host=10.77.0.13",
            "ansible_host=10.77.0.12",
            "sim.ini",
            "host spark3",
            "ansible_host",
            "also the address of spark2",
        ),
        (
            "duplicate-fabric-address",
            "ini",
            "fabric_a_ip=192.168.100.14",
            "fabric_a_ip=192.168.100.13",
            "sim.ini",
            "host spark4",
            "fabric_a_ip",
            "also used by spark3",
        ),
        (
            "twins-on-one-subnet",
            "cluster",
            "fabric_b_subnet: 192.168.101.0/24",
            "fabric_b_subnet: 192.168.100.0/24",
            "cluster.yml",
            "all hosts",
            "fabric_b_subnet",
            "share a subnet",
        ),
        (
            "fabric-address-outside-subnet",
            "ini",
            "fabric_b_ip=192.168.101.12",
            "fabric_b_ip=192.168.102.12",
            "sim.ini",
            "host spark2",
            "fabric_b_ip",
            "not a host address of fabric_b_subnet 192.168.101.0/24",
        ),
        (
            "tp-does-not-match-nodes",
            "cluster+",
            "",
            "sglang_tp_size: 8\n",
            "cluster.yml",
            "all hosts",
            "sglang_tp_size",
            "TP 8 does not match 4 Sparks x 1 GPU",
        ),
        (
            "nnodes-does-not-match-nodes",
            "cluster+",
            "",
            "sglang_nnodes: 3\n",
            "cluster.yml",
            "all hosts",
            "sglang_nnodes",
            "3 nodes does not match the 4 Sparks",
        ),
        (
            "switch-port-names-unknown-node",
            "cluster",
            "swp8: {node: spark4, twin: b}",
            "swp8: {node: spark9, twin: b}",
            "cluster.yml",
            "all hosts",
            "switch_ports.swp8.node",
            "'spark9' is not a host",
        ),
        (
            "string-where-number",
            "cluster+",
            "",
            'roce_fabric_mtu: "9000"\n',
            "cluster.yml",
            "all hosts",
            "roce_fabric_mtu",
            "'9000' is a string, but roce_fabric needs an integer",
        ),
        (
            "string-where-boolean",
            "ini",
            "spark1 ansible_host=10.77.0.11",
            "spark1 ansible_host=10.77.0.11 base_headless=yes",
            "sim.ini",
            "host spark1",
            "base_headless",
            "'yes' is a string, but base needs a boolean",
        ),
        (
            "list-where-string",
            "cluster+",
            "",
            "nccl_socket_ifname: [enp1s0f1np1, enP2p1s0f1np1]\n",
            "cluster.yml",
            "all hosts",
            "nccl_socket_ifname",
            "is a list, but nccl needs a string",
        ),
        (
            "hw-profile-not-a-profile",
            "cluster",
            "hw_profile: sim",
            "hw_profile: dgx_sparc",
            "cluster.yml",
            "all hosts",
            "hw_profile",
            "hw_profile must be one of: dgx_spark, sim, got: 'dgx_sparc'",
        ),
    ]
]


@pytest.mark.parametrize("rule", [pytest.param(rule, id=rule.name) for rule in RULES])
def test_every_rule_exits_2_naming_file_host_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], rule: Rule
) -> None:
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    path = _sim_copy(tmp_path)
    target = path if rule.where == "ini" else tmp_path / "group_vars" / "sim" / "cluster.yml"
    if rule.where == "cluster+":
        _append(target, rule.new)
    else:
        _edit(target, rule.old, rule.new)
    code, err = _check_cli(monkeypatch, capsys, path)
    assert code == ExitCode.BAD_INPUT.value == 2, err
    lines = [ln for ln in err.splitlines() if f"variable {rule.var}:" in ln]
    assert lines, err
    line = lines[0]
    assert str(path if rule.file == "sim.ini" else target) in line, line
    assert f"{rule.who}: variable {rule.var}:" in line, line
    assert rule.text in line, line


def test_unmodified_sim_copy_passes_every_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cases above differ from a valid inventory in their one edit only."""
    monkeypatch.setenv("SPARKCTL_STATE_DIR", str(tmp_path / "state"))
    path = _sim_copy(tmp_path)
    monkeypatch.setattr(sys, "argv", ["sparkctl", "inventory", "check", str(path)])
    cli.main()
    assert "error" not in capsys.readouterr().err


# -------------------------------------------------------------- the wheel
def test_wheel_ships_the_collection_and_inventories_without_molecule_scenarios() -> None:
    """pyproject.toml: playbooks and inventories go to sparkctl/_data, the collection to
    ansible_collections/sparkctl/spark, minus molecule/.

    force-include would copy a directory whole, ignoring `exclude`, so the data
    directories must be selected like the package and mapped with `sources`.
    (Checked on the configuration: building a wheel needs hatchling, not in the
    dev environment; `hatchling build -t wheel` lists no molecule/ file.)
    """
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"
    ]["wheel"]
    data = ("playbooks", "inventory")
    assert set(data) <= set(wheel["only-include"])
    assert {"sparkctl", "ansible_collections/sparkctl/spark"} <= set(wheel["only-include"])
    assert {d: wheel["sources"][d] for d in data} == {d: f"sparkctl/_data/{d}" for d in data}
    assert not set(data) & set(wheel.get("force-include", {})), wheel.get("force-include")
    scenarios = sorted(
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles").glob("*/molecule")
        if p.is_dir()
    )
    assert scenarios, "no role has a molecule/ directory: is this test still needed?"
    for scenario in scenarios:
        assert any(fnmatch.fnmatch(f"/{scenario}/", pattern) for pattern in wheel["exclude"]), (
            scenario,
            wheel["exclude"],
        )
