"""roles/switch_mtu on a Linux bridge switch cabled to two Sparks: the state it leaves.

Each test is one case per port, bridge or host pair; expected values come
from the scenario's inventory (switch_ports) and the role's defaults.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from verify_helpers import DEFAULTS, INVENTORY, ROLE, SPARKS, assert_running, instance

(SWITCH_NAME,) = INVENTORY.get_hosts("switches")
PORTS: dict[str, dict[str, str]] = INVENTORY.get_variables(SWITCH_NAME)["switch_ports"]
MTU = DEFAULTS["switch_mtu_value"]
UNIT = "sparkctl-switch-port-mtu.service"
STATE_FILE = "/etc/sparkctl/switch-ports.json"
SCRIPT = "/usr/local/lib/sparkctl/switch_port_mtu.py"
BRIDGES = sorted({f"br-{spec['twin']}" for spec in PORTS.values()})  # the lab's bridge names
SWITCH = instance(SWITCH_NAME)


def natural(name: str) -> list[Any]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


# The ports in natural order (swp2 before swp10), one case each.
PORT_ORDER: list[str] = sorted(PORTS, key=natural)


def link(host: Any, dev: str) -> dict[str, Any]:
    (data,) = json.loads(host.check_output("ip -j -d link show dev %s", dev))
    return dict(data)


@pytest.mark.parametrize("port", PORT_ORDER)
def test_port_carries_the_mtu_in_its_twins_bridge(port: str) -> None:
    data = link(SWITCH, port)
    assert data["mtu"] == MTU
    assert data["master"] == f"br-{PORTS[port]['twin']}"
    assert data["operstate"] == "UP"


@pytest.mark.parametrize("bridge", BRIDGES)
def test_bridge_carries_the_mtu(bridge: str) -> None:
    assert link(SWITCH, bridge)["mtu"] == MTU


def test_desired_state_is_kept_for_boot() -> None:
    state = SWITCH.file(STATE_FILE)
    assert state.user == "root"
    assert state.mode == 0o644
    assert json.loads(state.content_string) == {"mtu": MTU, "ports": sorted(PORTS, key=natural)}


def test_boot_program_is_the_collections_module() -> None:
    # The role copies the collection's module (plugins/modules beside roles/).
    module = ROLE.parent.parent / "plugins" / "modules" / "switch_port_mtu.py"
    script = SWITCH.file(SCRIPT)
    assert script.mode == 0o644
    assert script.content_string == module.read_text()


def test_boot_unit_runs_the_program_on_the_state() -> None:
    unit = SWITCH.file(f"/etc/systemd/system/{UNIT}")
    assert (
        f"ExecStart=/usr/bin/python3 {SCRIPT} --state-file {STATE_FILE}"
        in unit.content_string.splitlines()
    )
    assert "WantedBy=multi-user.target" in unit.content_string.splitlines()
    assert_running(SWITCH, UNIT, succeeded=True)


@pytest.mark.parametrize("port", PORT_ORDER)
def test_boot_unit_restores_a_port_that_lost_its_mtu(port: str) -> None:
    SWITCH.run_test("ip link set dev %s mtu 1500", port)
    assert link(SWITCH, port)["mtu"] == 1500
    SWITCH.run_test("systemctl restart %s", UNIT)
    assert link(SWITCH, port)["mtu"] == MTU
    assert_running(SWITCH, UNIT, succeeded=True)


@pytest.mark.parametrize("twin", ["a", "b"])
@pytest.mark.parametrize(("node", "peer"), [(a, b) for a in SPARKS for b in SPARKS if a != b])
def test_host_mtu_frames_cross_the_switch(node: str, peer: str, twin: str) -> None:
    src, dst = INVENTORY.get_variables(node), INVENTORY.get_variables(peer)
    dev = src[f"fabric_{twin}_netdev"]
    host_mtu = link(instance(node), dev)["mtu"]
    assert host_mtu == 9000  # prepare.yml, as roce_fabric leaves the hosts
    ping = instance(node).run(
        "ping -n -q -M do -c 3 -i 0.2 -W 2 -I %s -s %s %s",
        dev,
        str(host_mtu - 28),
        dst[f"fabric_{twin}_ip"],
    )
    assert ping.rc == 0, ping.stdout + ping.stderr
