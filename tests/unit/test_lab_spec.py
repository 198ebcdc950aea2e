"""LabSpec.from_inventory: what ``lab up`` derives from inventory/sim.ini, and refusals.

Bad cases copy inventory/sim.ini and group_vars/sim/ into tmp_path (group_vars
are found next to the inventory file) and change one thing; each must fail
with ExitCode.BAD_INPUT naming the host and the variable, before any
container exists.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl_lab.fabric import Cable
from sparkctl_lab.lab import LabHost, LabSpec, mgmt_mac

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "inventory" / "sim.ini"
A, B = "enp1s0f1np1", "enP2p1s0f1np1"


@pytest.fixture
def sim_copy(tmp_path: Path) -> Path:
    """A private copy of sim.ini with its group_vars/sim, laid out as in the repo."""
    inv_dir = tmp_path / "inventory"
    inv_dir.mkdir()
    shutil.copy(SIM, inv_dir / "sim.ini")
    shutil.copytree(ROOT / "inventory" / "group_vars" / "sim", inv_dir / "group_vars" / "sim")
    return inv_dir / "sim.ini"


def edit(path: Path, old: str, new: str) -> None:
    """Replace ``old`` exactly once; fail loudly if the fixture text changed."""
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} not found exactly once in {path}"
    path.write_text(text.replace(old, new))


def cluster_yml(inv: Path) -> Path:
    return inv.parent / "group_vars" / "sim" / "cluster.yml"


def lab_yml(inv: Path) -> Path:
    return inv.parent / "group_vars" / "sim" / "lab.yml"


def validate_yml(inv: Path) -> Path:
    return inv.parent / "group_vars" / "sim" / "validate.yml"


def spec_error(inv: Path, **kwargs: object) -> str:
    with pytest.raises(SparkctlError) as info:
        LabSpec.from_inventory(inv, **kwargs)  # type: ignore[arg-type]
    assert info.value.code == ExitCode.BAD_INPUT
    return info.value.message


# ---------------------------------------------------------------- sim.ini
def test_sim_spec() -> None:
    spec = LabSpec.from_inventory(SIM)
    assert spec.inventory == SIM
    assert spec.mgmt_subnet == "10.77.0.0/24"
    assert spec.switch == "lab-switch"
    assert spec.hosts == (
        LabHost("spark1", "10.77.0.11", "spark"),
        LabHost("spark2", "10.77.0.12", "spark"),
        LabHost("spark3", "10.77.0.13", "spark"),
        LabHost("spark4", "10.77.0.14", "spark"),
        LabHost("lab-switch", "10.77.0.2", "switch"),
    )
    assert [h.name for h in spec.sparks] == ["spark1", "spark2", "spark3", "spark4"]
    assert spec.rate_mbit == 1000
    assert spec.hardware.link_rate_mbit == 1000
    assert spec.hardware.driver_version == "580.95.05"
    assert spec.hardware.cuda_version == "13.0"
    assert spec.hardware.gpu_name == "NVIDIA GB10"


def test_every_management_address_has_one_fixed_mac() -> None:
    """A node keeps its MAC across `lab reboot` (the controller's ARP cache stays right),
    and no two hosts or the bridge share one."""
    spec = LabSpec.from_inventory(SIM)
    assert spec.gateway == "10.77.0.1"
    assert spec.hosts[0].mgmt_mac == "02:73:0a:4d:00:0b"  # 10.77.0.11
    assert mgmt_mac("10.77.0.11") == spec.hosts[0].mgmt_mac  # from the address alone
    macs = [h.mgmt_mac for h in spec.hosts] + [mgmt_mac(spec.gateway)]
    assert len(set(macs)) == len(macs)
    for mac in macs:
        first = int(mac.split(":")[0], 16)
        assert first & 0b10 and not first & 0b01  # locally administered, unicast


def test_sim_cables() -> None:
    spec = LabSpec.from_inventory(SIM)
    assert len(spec.cables) == 8
    assert spec.cables == (
        Cable("spark1", A, "swp1", "a"),
        Cable("spark1", B, "swp2", "b"),
        Cable("spark2", A, "swp3", "a"),
        Cable("spark2", B, "swp4", "b"),
        Cable("spark3", A, "swp5", "a"),
        Cable("spark3", B, "swp6", "b"),
        Cable("spark4", A, "swp7", "a"),
        Cable("spark4", B, "swp8", "b"),
    )
    # Every node twin exactly once, every port exactly once.
    assert len({(c.node, c.domain) for c in spec.cables}) == 8
    assert len({c.port for c in spec.cables}) == 8


def test_overrides_rate_and_driver_version() -> None:
    spec = LabSpec.from_inventory(SIM, rate_mbit=250, driver_version="590.10.01")
    assert spec.rate_mbit == 250
    assert spec.hardware.link_rate_mbit == 250
    assert spec.hardware.driver_version == "590.10.01"
    assert spec.hardware.cuda_version == "13.0"  # not overridden


def test_rate_and_driver_read_from_group_vars(sim_copy: Path) -> None:
    edit(lab_yml(sim_copy), "lab_link_rate_mbit: 1000", "lab_link_rate_mbit: 400")
    edit(
        validate_yml(sim_copy),
        "validate_line_rate_gbytes: 0.125",
        "validate_line_rate_gbytes: 0.05",
    )
    edit(
        lab_yml(sim_copy),
        'lab_gpu_driver_version: "580.95.05"',
        'lab_gpu_driver_version: "575.1.2"',
    )
    spec = LabSpec.from_inventory(sim_copy)
    assert spec.rate_mbit == 400
    assert spec.hardware.driver_version == "575.1.2"
    assert spec.inventory == sim_copy


def test_unmodified_copy_is_valid(sim_copy: Path) -> None:
    """The bad cases below differ from a valid inventory in one thing only."""
    assert LabSpec.from_inventory(sim_copy).cables == LabSpec.from_inventory(SIM).cables


def test_real_cluster_inventory_is_not_a_lab() -> None:
    message = spec_error(ROOT / "inventory" / "lab.ini")
    assert "host fabric-switch" in message
    assert "variable switch_os" in message


# ------------------------------------------------------------- bad inputs
def test_ansible_host_outside_mgmt_subnet(sim_copy: Path) -> None:
    edit(sim_copy, "ansible_host=10.77.0.13", "ansible_host=10.78.0.13")
    message = spec_error(sim_copy)
    assert str(sim_copy) in message
    assert "host spark3" in message
    assert "variable ansible_host" in message
    assert "10.78.0.13" in message
    assert "10.77.0.0/24" in message


def test_switch_ansible_host_outside_mgmt_subnet(sim_copy: Path) -> None:
    edit(sim_copy, "lab-switch ansible_host=10.77.0.2", "lab-switch ansible_host=172.16.0.2")
    message = spec_error(sim_copy)
    assert "host lab-switch" in message
    assert "variable ansible_host" in message


def test_duplicate_ansible_host(sim_copy: Path) -> None:
    edit(sim_copy, "ansible_host=10.77.0.12", "ansible_host=10.77.0.11")
    message = spec_error(sim_copy)
    assert "host spark2" in message
    assert "variable ansible_host" in message
    assert "spark1" in message  # who else has it


def test_ansible_host_is_the_gateway(sim_copy: Path) -> None:
    edit(sim_copy, "ansible_host=10.77.0.14", "ansible_host=10.77.0.1")
    message = spec_error(sim_copy)
    assert "host spark4" in message
    assert "variable ansible_host" in message
    assert "gateway" in message


@pytest.mark.parametrize("addr", ["10.77.0.0", "10.77.0.255"])
def test_ansible_host_is_network_or_broadcast(sim_copy: Path, addr: str) -> None:
    edit(sim_copy, "ansible_host=10.77.0.12", f"ansible_host={addr}")
    message = spec_error(sim_copy)
    assert "host spark2" in message
    assert "variable ansible_host" in message


@pytest.mark.parametrize("subnet", ["not-a-subnet", "10.77.0.5/24"])
def test_bad_mgmt_subnet(sim_copy: Path, subnet: str) -> None:
    edit(lab_yml(sim_copy), "lab_mgmt_subnet: 10.77.0.0/24", f"lab_mgmt_subnet: {subnet}")
    message = spec_error(sim_copy)
    assert "variable lab_mgmt_subnet" in message
    assert subnet in message


def test_switch_port_names_unknown_node(sim_copy: Path) -> None:
    edit(cluster_yml(sim_copy), "swp8: {node: spark4, twin: b}", "swp8: {node: spark9, twin: b}")
    message = spec_error(sim_copy)
    assert str(sim_copy) in message
    assert "variable switch_ports.swp8.node" in message
    assert "spark9" in message


def test_twin_left_uncabled(sim_copy: Path) -> None:
    edit(cluster_yml(sim_copy), "  swp8: {node: spark4, twin: b}\n", "")
    message = spec_error(sim_copy)
    assert "host spark4" in message
    assert "variable switch_ports" in message
    assert "twin b" in message


def test_node_without_any_port(sim_copy: Path) -> None:
    edit(
        cluster_yml(sim_copy),
        "  swp5: {node: spark3, twin: a}\n  swp6: {node: spark3, twin: b}\n",
        "",
    )
    message = spec_error(sim_copy)
    assert "host spark3" in message
    assert "variable switch_ports" in message


def test_twin_both_is_not_a_lab_cable(sim_copy: Path) -> None:
    # A valid inventory for a real switch (one port carries both twins) ...
    edit(
        cluster_yml(sim_copy),
        "swp1: {node: spark1, twin: a}\n  swp2: {node: spark1, twin: b}",
        "swp1: {node: spark1, twin: both}",
    )
    message = spec_error(sim_copy)
    # ... is refused by the lab, which cables every twin to a port of its own.
    assert "variable switch_ports.swp1.twin" in message
    assert "a or b" in message


def test_switch_os_nvue(sim_copy: Path) -> None:
    edit(sim_copy, "switch_os=linux", "switch_os=nvue")
    message = spec_error(sim_copy)
    assert str(sim_copy) in message
    assert "host lab-switch" in message
    assert "variable switch_os" in message
    assert "nvue" in message


def test_no_switch(sim_copy: Path) -> None:
    edit(sim_copy, "lab-switch ansible_host=10.77.0.2 switch_os=linux\n", "")
    message = spec_error(sim_copy)
    assert "[switches]" in message


@pytest.mark.parametrize("value", ['"fast"', "0", "-100", "true", "2.5"])
def test_bad_link_rate(sim_copy: Path, value: str) -> None:
    edit(lab_yml(sim_copy), "lab_link_rate_mbit: 1000", f"lab_link_rate_mbit: {value}")
    message = spec_error(sim_copy)
    assert str(sim_copy) in message
    assert "variable lab_link_rate_mbit" in message
    # The inventory's schema refuses it first (cluster_defaults declares lab_*):
    # a number where a positive integer belongs.
    assert "needs an integer" in message or "is outside 1..400000" in message


def test_bad_rate_override(sim_copy: Path) -> None:
    message = spec_error(sim_copy, rate_mbit=0)
    assert "variable lab_link_rate_mbit" in message


def test_the_line_rate_validate_gates_against_is_the_shaped_rate(sim_copy: Path) -> None:
    """validate reads validate_line_rate_gbytes only; the lab's inventory must give its
    shaped rate there, or every bandwidth verdict is judged against the wrong line."""
    assert LabSpec.from_inventory(sim_copy).rate_mbit / 8000 == 0.125
    edit(lab_yml(sim_copy), "lab_link_rate_mbit: 1000", "lab_link_rate_mbit: 400")
    message = spec_error(sim_copy)
    assert str(sim_copy) in message
    assert "variable validate_line_rate_gbytes" in message
    assert "0.125 is not lab_link_rate_mbit 400 in GB/s (0.05)" in message
    # A rate given on the command line is the operator's, with -e for validate.
    assert LabSpec.from_inventory(sim_copy, rate_mbit=250).rate_mbit == 250


def test_twin_cabled_twice(sim_copy: Path) -> None:
    edit(
        cluster_yml(sim_copy),
        "  swp8: {node: spark4, twin: b}\n",
        "  swp8: {node: spark4, twin: b}\n  swp9: {node: spark1, twin: a}\n",
    )
    message = spec_error(sim_copy)
    assert "switch_ports.swp9" in message


@pytest.mark.parametrize("port", ["swp-spark1-a-twin", "Ethernet-port-0001"])
def test_port_name_too_long_for_a_netdev(sim_copy: Path, port: str) -> None:
    edit(
        cluster_yml(sim_copy), "swp1: {node: spark1, twin: a}", f"{port}: {{node: spark1, twin: a}}"
    )
    message = spec_error(sim_copy)
    assert port in message
