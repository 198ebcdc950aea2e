"""roles/switch_mtu: filters, the switch_port_mtu module, the drivers' task flow.

- The filter plugin (every NVUE command, SONiC payload and parser) is checked
  against literal expectations.
- The linux driver's module runs against a fake sysfs tree (and, as root, a
  real bridge in a throwaway network namespace, where the kernel's own
  bridge-MTU rules apply).
- The nvue and sonic drivers, which cannot run against a real Cumulus or SONiC
  switch here, run for real through ansible-playbook against localhost with a
  fake ``nv`` (and fake ``sonic-cfggen`` and ``config``) that keep their state
  in a JSON file: the commands, the document patched in, their order,
  idempotence, the save and the rollback message are checked on what the
  fakes recorded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
import yaml

from tests.unit.pathload import load_file

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles" / "switch_mtu"
PLAYBOOK = ROOT / "playbooks" / "switch_mtu.yml"
VENV_BIN = Path(sys.executable).parent
SIM_PORTS = [f"swp{i}" for i in range(1, 9)]


def load(path: Path, name: str) -> ModuleType:
    return load_file(name, path)


# The filters are loaded without ansible.errors, so they raise their fallback
# ValueError: importing ansible.errors AND ansible.module_utils.basic (the
# module below) loads ansible.constants, which freezes Ansible's configuration
# for the whole pytest process before sparkctl.inventory sets its own (found by
# tests/unit/test_inventory.py::test_unparsable_ini failing after this file).
# Through Ansible the filters run in the ansible-playbook tests further down.
with mock.patch.dict(sys.modules, {"ansible.errors": None}):
    flt = load(ROLE.parents[1] / "plugins" / "filter" / "switch_mtu.py", "switch_mtu_filters")
mod = load(ROLE.parents[1] / "plugins" / "modules" / "switch_port_mtu.py", "switch_port_mtu")
FilterError: type[Exception] = flt.AnsibleFilterError
assert FilterError is ValueError


# ------------------------------------------------------------- role layout
def read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_argument_spec_types_are_the_types_of_the_defaults() -> None:
    # Every default is a literal (none templated): its spec type is its YAML type.
    # That the spec documents each default, with the same value, a description
    # and the prefix, is tests/contract/test_role_interfaces.py's, for every role.
    defaults = read_yaml(ROLE / "defaults" / "main.yml")
    options = read_yaml(ROLE / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, value in defaults.items():
        assert options[name]["type"] == type(value).__name__, name


def test_host_mtu_fallback_is_roce_fabric_default() -> None:
    """preflight compares with roce_fabric_mtu, which only the inventory makes visible
    here; without it the fallback must be roce_fabric's own default."""
    fallback = read_yaml(ROLE / "vars" / "main.yml")["_switch_mtu_host_mtu"]
    roce_defaults = (
        ROOT
        / "ansible_collections"
        / "sparkctl"
        / "spark"
        / "roles"
        / "roce_fabric"
        / "defaults"
        / "main.yml"
    )
    if not roce_defaults.exists():
        pytest.skip("no roce_fabric role in this tree")
    default = read_yaml(roce_defaults)["roce_fabric_mtu"]
    assert fallback == "{{ roce_fabric_mtu | default(" + str(default) + ") }}"


def test_main_reads_preflight_install_configure_verify_with_tags() -> None:
    tasks = read_yaml(ROLE / "tasks" / "main.yml")
    steps = ["preflight", "install", "configure", "verify"]
    # Static imports: tags reach every imported task, and no include costs a
    # round of the play at run time.
    assert [t["ansible.builtin.import_tasks"] for t in tasks] == [f"{s}.yml" for s in steps]
    for task, step in zip(tasks, steps, strict=True):
        assert task["tags"] == ["switch_mtu", f"switch_mtu_{step}"]


def step_tasks(driver: str, step: str) -> list[tuple[str, str]]:
    """(name, module) of every task a driver runs for one step, blocks flattened."""

    def flatten(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for item in items:
            if "block" in item:
                out += flatten(item["block"])
            else:
                out.append(item)
        return out

    blocks = [
        b
        for b in read_yaml(ROLE / "tasks" / f"driver_{driver}.yml")
        if b.get("when") == f"__switch_mtu_step == '{step}'"
    ]
    keywords = {
        "name",
        "when",
        "loop",
        "register",
        "changed_when",
        "check_mode",
        "become",
        "vars",
        "notify",
        "rescue",
    }
    return [(t["name"], next(k for k in t if k not in keywords)) for t in flatten(blocks)]


def test_every_driver_implements_configure_and_verify() -> None:
    for driver in ("linux", "nvue", "sonic"):
        for step in ("configure", "verify"):
            assert step_tasks(driver, step), (driver, step)
        verify = read_yaml(ROLE / "tasks" / f"driver_{driver}.yml")[-1]
        facts = [t for t in verify["block"] if "ansible.builtin.set_fact" in t]
        # linux sets only the MTU; nvue and sonic also what the fabric still lacks
        fabric = set() if driver == "linux" else {"__switch_mtu_fabric_problems"}
        assert set(facts[-1]["ansible.builtin.set_fact"]) == {
            "__switch_mtu_live",
            "__switch_mtu_devices",
            *fabric,
        }


def test_fabric_settings_reach_the_filters_as_one_mapping() -> None:
    fabric = read_yaml(ROLE / "vars" / "main.yml")["_switch_mtu_fabric"]
    for key, var in (
        ("mtu", "switch_mtu_value"),
        ("speed", "switch_mtu_speed"),
        ("autoneg", "switch_mtu_autoneg"),
        ("vlan", "switch_mtu_vlan_id"),
        ("bridge", "switch_mtu_bridge"),
    ):
        assert f"'{key}': {var}" in fabric, key
    assert set(flt.FABRIC_KEYS) == {"mtu", "speed", "autoneg", "vlan", "bridge"}


def test_speed_choices_are_the_speeds_both_drivers_name() -> None:
    """The argument spec (which the inventory rules also enforces) and the filter's
    NVUE word -> SONiC Mb/s table agree, so no accepted speed lacks a translation."""
    spec = read_yaml(ROLE / "meta" / "argument_specs.yml")["argument_specs"]["main"]
    assert spec["options"]["switch_mtu_speed"]["choices"] == list(flt.SPEEDS_MBPS)
    assert flt.SPEEDS_MBPS["200G"] == 200000


def test_sonic_driver_tasks_and_handler() -> None:
    assert [m for _, m in step_tasks("sonic", "configure")] == [
        "ansible.builtin.command",
        "ansible.builtin.set_fact",
        "ansible.builtin.command",
    ]
    assert [m for _, m in step_tasks("sonic", "verify")] == [
        "ansible.builtin.command",
        "ansible.builtin.set_fact",
    ]
    blocks = read_yaml(ROLE / "tasks" / "driver_sonic.yml")
    read = blocks[0]["block"][0]
    assert read["ansible.builtin.command"] == {
        "argv": ["sonic-cfggen", "-d", "--var-json", "{{ item }}"]
    }
    assert read["loop"] == "{{ _switch_mtu_sonic_tables }}"
    assert read_yaml(ROLE / "vars" / "main.yml")["_switch_mtu_sonic_tables"] == list(
        flt.SONIC_TABLES
    )
    change = blocks[0]["block"][2]
    assert change["ansible.builtin.command"] == {"argv": "{{ item }}"}
    assert change["notify"] == "switch_mtu sonic config changed"
    save = next(
        h
        for h in read_yaml(ROLE / "handlers" / "main.yml")
        if h["listen"] == "switch_mtu sonic config changed"
    )
    assert save["ansible.builtin.command"] == {"argv": ["config", "save", "-y"]}
    # No connection of its own: SSH with keys, as for every host.
    assert all("vars" not in b or "ansible_connection" not in b["vars"] for b in blocks)


def test_nvue_driver_confirms_only_after_reconnecting() -> None:
    modules = [m for _, m in step_tasks("nvue", "configure")]
    # read, plan, then (in the inner block) write the patch file, stage, apply,
    # drop, reconnect, confirm, save
    assert modules == [
        "ansible.builtin.command",
        "ansible.builtin.set_fact",
        "ansible.builtin.file",
        "ansible.builtin.copy",
        "ansible.builtin.command",
        "ansible.builtin.command",
        "ansible.builtin.meta",
        "ansible.builtin.wait_for_connection",
        "ansible.builtin.command",
        "ansible.builtin.command",
    ]


# ------------------------------------------------------------------ filters
def test_port_names_natural_order_from_mapping_or_list() -> None:
    ports: dict[str, Any] = {"swp10": {}, "swp2": {}, "swp1": {}}
    assert flt.port_names(ports) == ["swp1", "swp2", "swp10"]
    assert flt.port_names(["Eth1/10", "Eth1/2", "Eth1/2"]) == ["Eth1/2", "Eth1/10"]
    with pytest.raises(FilterError):
        flt.port_names("swp1")


@pytest.mark.parametrize(
    ("os_name", "name", "ok"),
    [
        ("linux", "swp1", True),
        ("linux", "enp1s0f1np1", True),
        ("linux", "a-very-long-port0", False),
        ("linux", "Eth1/1", False),
        ("linux", "swp 1", False),
        ("linux", "..", False),
        ("nvue", "swp1", True),
        ("nvue", "swp1s0", True),
        ("nvue", "swp1,swp2", False),
        ("sonic", "Ethernet0", True),
        ("sonic", "Ethernet124", True),
        ("sonic", "Eth1/1", False),
        ("sonic", "swp1", False),
        ("sonic", "Ethernet0;x", False),
    ],
)
def test_port_problems_per_switch_os(os_name: str, name: str, ok: bool) -> None:
    problems = flt.port_problems({name: {"node": "spark1", "twin": "a"}}, os_name)
    assert (problems == []) is ok
    if not ok:
        assert repr(name) in problems[0]


def test_port_problems_empty_ports_and_unknown_os() -> None:
    assert "switch_ports is empty" in flt.port_problems({}, "linux")[0]
    assert "must be a mapping" in flt.port_problems(["swp1"], "linux")[0]
    assert "not one of linux, nvue, sonic" in flt.port_problems({"swp1": {}}, "eos")[0]


FABRIC: dict[str, Any] = {
    "mtu": 9216,
    "speed": "200G",
    "autoneg": False,
    "vlan": 100,
    "bridge": "br_default",
}
SPARK_PORT = {
    "link": {"mtu": 9216, "speed": "200G", "auto-negotiate": "off"},
    "bridge": {"domain": {"br_default": {"access": 100}}},
}


def test_nvue_commands_stage_apply_confirm_save() -> None:
    assert flt.nvue_commands("/etc/sparkctl/nvue-fabric.yaml", 120) == {
        "stage": [
            ["nv", "config", "detach"],
            ["nv", "config", "patch", "/etc/sparkctl/nvue-fabric.yaml"],
        ],
        "apply": [["nv", "config", "apply", "--confirm", "120s", "--assume-yes"]],
        "confirm": [["nv", "config", "apply", "--confirm-yes"]],
        "save": [["nv", "config", "save"]],
    }


def test_nvue_commands_bad_input() -> None:
    with pytest.raises(FilterError, match="absolute path"):
        flt.nvue_commands("nvue-fabric.yaml", 120)
    with pytest.raises(FilterError):
        flt.nvue_commands("/etc/sparkctl/nvue-fabric.yaml", 0)
    with pytest.raises(FilterError):
        flt.nvue_commands("/etc/sparkctl/nvue-fabric.yaml", True)


def test_nvue_document_one_bridge_vlan_forced_speed_no_autoneg() -> None:
    """NVIDIA's switch playbook: every Spark port in one bridge (one L2 domain),
    200G set by hand with auto-negotiation off; plus the MTU. Paths as NVUE's
    object model names them (interface.<swp>.link.*, bridge.domain.<br>.vlan,
    interface.<swp>.bridge.domain.<br>.access)."""
    assert flt.nvue_document(["swp3", "swp1"], FABRIC) == {
        "bridge": {"domain": {"br_default": {"vlan": {"100": {}}}}},
        "interface": {"swp1": SPARK_PORT, "swp3": SPARK_PORT},
    }
    other = flt.nvue_document(
        ["swp1"], {**FABRIC, "autoneg": True, "speed": "100G", "vlan": 7, "bridge": "fabric"}
    )
    assert other["interface"]["swp1"] == {
        "link": {"mtu": 9216, "speed": "100G", "auto-negotiate": "on"},
        "bridge": {"domain": {"fabric": {"access": 7}}},
    }
    assert other["bridge"] == {"domain": {"fabric": {"vlan": {"7": {}}}}}


@pytest.mark.parametrize(
    "bad",
    [
        {**FABRIC, "speed": "200000"},
        {**FABRIC, "speed": "auto"},
        {**FABRIC, "vlan": 0},
        {**FABRIC, "vlan": 4095},
        {**FABRIC, "vlan": "100"},
        {**FABRIC, "autoneg": "off"},
        {**FABRIC, "bridge": "br default"},
        {**FABRIC, "bridge": "a" * 16},
        {**FABRIC, "mtu": "9216"},
        {k: v for k, v in FABRIC.items() if k != "vlan"},
    ],
)
def test_fabric_settings_are_checked_before_any_command(bad: dict[str, Any]) -> None:
    with pytest.raises(FilterError):
        flt.nvue_document(["swp1"], bad)
    with pytest.raises(FilterError):
        flt.sonic_commands(["Ethernet0"], bad)


def test_nvue_patch_is_one_set_operation() -> None:
    doc = flt.nvue_document(["swp1"], FABRIC)
    assert flt.nvue_patch(doc) == [{"set": doc}]


def config_show(tree: dict[str, Any]) -> str:
    """`nv config show -o json` as NVUE prints it: a header, then the set operation."""
    return json.dumps([{"header": {"model": "cumulus"}}, {"set": tree}])


def test_nvue_differences_nothing_when_applied_holds_it_all() -> None:
    doc = flt.nvue_document(["swp1", "swp2"], FABRIC)
    applied = {
        "bridge": {"domain": {"br_default": {"type": "vlan-aware", "vlan": {"100": {}, "1": {}}}}},
        "interface": {
            "swp1": {**SPARK_PORT, "type": "swp"},
            "swp2": {
                "link": {
                    "mtu": "9216",
                    "speed": "200G",
                    "auto-negotiate": "off",
                    "state": {"up": {}},
                },
                "bridge": {"domain": {"br_default": {"access": 100}}},
                "type": "swp",
            },
            "eth0": {"type": "eth"},
        },
        "system": {"hostname": "sw"},
    }
    assert flt.nvue_differences(doc, config_show(applied)) == []
    assert flt.nvue_differences(doc, {"stdout": config_show(applied), "rc": 0}) == []
    assert flt.nvue_differences(doc, applied) == []


def test_nvue_differences_name_every_missing_or_wrong_leaf() -> None:
    doc = flt.nvue_document(["swp1", "swp2", "swp3"], FABRIC)
    applied = {
        "interface": {
            "swp1": {
                "link": {"mtu": 9216, "speed": "100G", "auto-negotiate": "on"},
                "bridge": {"domain": {"br_default": {"access": 100}}},
            },
            "swp2": {"link": {"mtu": 1500}},
        }
    }
    assert flt.nvue_differences(doc, config_show(applied)) == [
        "bridge: missing",
        "interface.swp1.link.speed: 100G, wanted 200G",
        "interface.swp1.link.auto-negotiate: on, wanted off",
        "interface.swp2.link.mtu: 1500, wanted 9216",
        "interface.swp2.link.speed: unset, wanted 200G",
        "interface.swp2.link.auto-negotiate: unset, wanted off",
        "interface.swp2.bridge: missing",
        "interface.swp3: missing",
    ]
    assert flt.nvue_differences(doc, "") == ["bridge: missing", "interface: missing"]
    with pytest.raises(FilterError, match="did not print JSON"):
        flt.nvue_differences(doc, "Error: permission denied")


# `nv show interface swp1 link` in NVIDIA's NVUE reference shows operational
# mtu 9000 next to applied 9216; these are that link object as JSON documents.
NVUE_LINK = {
    "auto-negotiate": "off",
    "duplex": "full",
    "speed": "1G",
    "mac-address": "48:b0:2d:f0:b9:86",
    "mtu": 9000,
    "state": {"up": {}},
    "oper-status": "up",
    "admin-status": "up",
}


@pytest.mark.parametrize(
    ("doc", "mtu"),
    [
        (json.dumps(NVUE_LINK), 9000),
        (NVUE_LINK, 9000),
        ({"mtu": "9216"}, 9216),
        ({"link": {"mtu": 9216}}, 9216),
        ({"operational": {"mtu": 9000}, "applied": {"mtu": 9216}}, 9000),
        ({"applied": {"mtu": 9216}}, 9216),
        ({"speed": "1G"}, None),
        ("", None),
        ({"mtu": True}, None),
    ],
)
def test_nvue_link_mtu(doc: Any, mtu: int | None) -> None:
    assert flt.nvue_link_mtu(doc) == mtu


def test_nvue_link_mtu_rejects_non_json() -> None:
    with pytest.raises(FilterError, match="did not print JSON"):
        flt.nvue_link_mtu("Error: interface swp9 not found")


def test_nvue_mtus_from_a_registered_loop() -> None:
    registered = {
        "results": [
            {"item": "swp1", "stdout": json.dumps({"mtu": 9216}), "rc": 0},
            {"item": "swp2", "stdout": json.dumps(NVUE_LINK), "rc": 0},
        ]
    }
    assert flt.nvue_mtus(registered) == {"swp1": 9216, "swp2": 9000}
    assert flt.nvue_mtus(registered["results"]) == {"swp1": 9216, "swp2": 9000}
    assert flt.nvue_mtus({"swp3": '{"mtu": 1500}'}) == {"swp3": 1500}


# CONFIG_DB rows as `sonic-cfggen -d --var-json PORT` prints them: every field a
# string (sonic-port.yang: speed in Mb/s, autoneg on|off).
SONIC_DONE = {
    "PORT": {
        "Ethernet0": {
            "admin_status": "up",
            "alias": "Eth1",
            "lanes": "0,1,2,3",
            "mtu": "9216",
            "speed": "200000",
            "autoneg": "off",
        },
        "Ethernet8": {
            "alias": "Eth2",
            "lanes": "8,9,10,11",
            "mtu": "9216",
            "speed": "200000",
            "autoneg": "off",
            "mode": "access",
        },
    },
    "VLAN": {"Vlan100": {"vlanid": "100"}},
    "VLAN_MEMBER": {
        "Vlan100|Ethernet0": {"tagging_mode": "untagged"},
        "Vlan100|Ethernet8": {"tagging_mode": "untagged"},
    },
}


def test_sonic_commands_everything_when_nothing_is_known() -> None:
    assert flt.sonic_commands(["Ethernet8", "Ethernet0"], FABRIC) == [
        ["config", "vlan", "add", "100"],
        ["config", "interface", "mtu", "Ethernet0", "9216"],
        ["config", "interface", "speed", "Ethernet0", "200000"],
        ["config", "interface", "autoneg", "Ethernet0", "disabled"],
        ["config", "vlan", "member", "add", "-u", "100", "Ethernet0"],
        ["config", "interface", "mtu", "Ethernet8", "9216"],
        ["config", "interface", "speed", "Ethernet8", "200000"],
        ["config", "interface", "autoneg", "Ethernet8", "disabled"],
        ["config", "vlan", "member", "add", "-u", "100", "Ethernet8"],
    ]


def test_sonic_commands_nothing_when_config_db_holds_it() -> None:
    assert flt.sonic_commands(["Ethernet0", "Ethernet8"], FABRIC, SONIC_DONE) == []


def test_sonic_commands_only_what_differs() -> None:
    tables = json.loads(json.dumps(SONIC_DONE))
    tables["PORT"]["Ethernet0"].update(speed="100000", autoneg="on")
    tables["PORT"]["Ethernet8"]["mtu"] = "1500"
    tables["PORT"]["Ethernet8"]["mode"] = "routed"
    del tables["VLAN_MEMBER"]["Vlan100|Ethernet8"]
    tables["VLAN_MEMBER"]["Vlan100|Ethernet0"] = {"tagging_mode": "tagged"}
    assert flt.sonic_commands(["Ethernet0", "Ethernet8"], {**FABRIC, "autoneg": False}, tables) == [
        ["config", "interface", "speed", "Ethernet0", "200000"],
        ["config", "interface", "autoneg", "Ethernet0", "disabled"],
        ["config", "vlan", "member", "del", "100", "Ethernet0"],
        ["config", "vlan", "member", "add", "-u", "100", "Ethernet0"],
        ["config", "interface", "mtu", "Ethernet8", "9216"],
        ["config", "switchport", "mode", "access", "Ethernet8"],
        ["config", "vlan", "member", "add", "-u", "100", "Ethernet8"],
    ]
    # Another VLAN id: SONiC refuses a second untagged membership ("is already untagged
    # member!"), so the old one is refused, or removed first when the role may.
    with pytest.raises(FilterError, match="untagged member of Vlan100"):
        flt.sonic_commands(["Ethernet0"], {**FABRIC, "vlan": 200}, SONIC_DONE)
    assert flt.sonic_commands(["Ethernet0"], {**FABRIC, "vlan": 200}, SONIC_DONE, True) == [
        ["config", "vlan", "add", "200"],
        ["config", "vlan", "member", "del", "100", "Ethernet0"],
        ["config", "vlan", "member", "add", "-u", "200", "Ethernet0"],
    ]


def test_sonic_tables_from_a_registered_loop() -> None:
    registered = {
        "results": [
            {"item": "PORT", "stdout": json.dumps(SONIC_DONE["PORT"]), "rc": 0},
            {"item": "VLAN", "stdout": "", "rc": 0},  # an empty table prints nothing
            {"item": "VLAN_MEMBER", "stdout": "{}", "rc": 0},
        ]
    }
    assert flt.sonic_tables(registered) == {
        "PORT": SONIC_DONE["PORT"],
        "VLAN": {},
        "VLAN_MEMBER": {},
        # Tables the loop did not read are empty.
        "INTERFACE": {},
        "PORTCHANNEL_MEMBER": {},
        "BREAKOUT_CFG": {},
    }
    with pytest.raises(FilterError, match="did not print JSON"):
        flt.sonic_tables([{"item": "PORT", "stdout": "Usage: sonic-cfggen"}])


def test_sonic_mtus_from_the_port_table() -> None:
    tables = {
        "PORT": {
            "Ethernet0": {"mtu": "9216"},
            "Ethernet4": {"mtu": "9100"},
            "Ethernet8": {"speed": "200000"},
        }
    }
    assert flt.sonic_mtus(tables) == {"Ethernet0": 9216, "Ethernet4": 9100, "Ethernet8": None}
    with pytest.raises(FilterError):
        flt.sonic_mtus({"VLAN": {}})


def test_linux_mtus_reads_before_of_ports_and_bridges() -> None:
    result = {
        "ports": {"swp1": {"before": 9216, "after": 9216, "master": "br-a"}},
        "bridges": {"br-a": {"before": 1500, "after": 9216}},
    }
    assert flt.linux_mtus(result) == {"swp1": 9216, "br-a": 1500}


def test_mismatches() -> None:
    live = {"swp1": 9216, "swp2": 1500, "swp10": None}
    assert flt.mismatches(live, ["swp1", "swp2", "swp10", "swp3"], 9216) == [
        "swp2: MTU 1500, expected 9216",
        "swp10: MTU not reported by the switch",
        "swp3: MTU not reported by the switch",
    ]
    assert flt.mismatches(live, ["swp1"], 9216) == []


def test_filter_module_exports_every_filter() -> None:
    names = set(flt.FilterModule().filters())
    tasks_text = (
        "".join(p.read_text() for p in (ROLE / "tasks").glob("*.yml"))
        + (ROLE / "vars" / "main.yml").read_text()
    )
    for name in names:
        assert name.startswith("switch_mtu_")
        assert name in tasks_text, f"{name} is not used by the role"


# ------------------------------------------- real switch outputs (tests/fixtures)
FIXTURES = ROOT / "tests" / "fixtures"


def fixture_json(*parts: str) -> Any:
    return json.loads((FIXTURES.joinpath(*parts)).read_text())


NVUE_5_7 = fixture_json("nvue", "config-show-5.7.0.json")
NVUE_5_15 = fixture_json("nvue", "config-show-5.15.0.json")


def test_nvue_release_from_the_header_of_real_config_show() -> None:
    assert flt.nvue_release(NVUE_5_7) == "5.7.0"
    assert flt.nvue_release(json.dumps(NVUE_5_15)) == "5.15.0"
    assert flt.nvue_release({"stdout": json.dumps(NVUE_5_15), "rc": 0}) == "5.15.0"
    assert flt.nvue_release([NVUE_5_15[1]]) is None  # no header: unknown
    assert flt.nvue_release("") is None


def test_nvue_document_writes_the_auto_negotiation_word_of_the_release() -> None:
    """Cumulus Linux 5.15 renamed link auto-negotiate on|off to enabled|disabled."""

    def word(release: Any, autoneg: bool = False) -> Any:
        fabric = {**FABRIC, "autoneg": autoneg}
        doc = flt.nvue_document(["swp1"], fabric, release)
        return doc["interface"]["swp1"]["link"]["auto-negotiate"]

    assert word(flt.nvue_release(NVUE_5_7)) == "off"
    assert word(flt.nvue_release(NVUE_5_15)) == "disabled"
    assert word(flt.nvue_release(NVUE_5_15), autoneg=True) == "enabled"
    assert word("5.14.0") == "off"
    assert word("5.16.1") == "disabled"
    assert word(None) == "off"  # unknown (render): the words before 5.15
    with pytest.raises(FilterError, match="not a Cumulus Linux release"):
        word("latest")


def _applied(base: list[dict[str, Any]], document: dict[str, Any]) -> list[dict[str, Any]]:
    """A real `nv config show -o json` after `nv config patch` of ``document``."""
    tree = json.loads(json.dumps(base[1]["set"]))
    flt._merge(tree, document)  # the fake nv merges the same way
    return [base[0], {"set": tree}]


def test_nvue_differences_take_on_and_enabled_off_and_disabled_as_one() -> None:
    """A 5.15 switch holding what an older release's words asked (or the other way
    round, after an upgrade) lacks nothing; a real difference is still named."""
    ports = ["swp1", "swp2"]
    new = flt.nvue_document(ports, FABRIC, flt.nvue_release(NVUE_5_15))
    old = flt.nvue_document(ports, FABRIC, flt.nvue_release(NVUE_5_7))
    assert flt.nvue_differences(old, _applied(NVUE_5_15, new)) == []
    assert flt.nvue_differences(new, _applied(NVUE_5_7, old)) == []
    on = flt.nvue_document(ports, {**FABRIC, "autoneg": True}, "5.15.0")
    assert flt.nvue_differences(old, _applied(NVUE_5_15, on)) == [
        "interface.swp1.link.auto-negotiate: enabled, wanted off",
        "interface.swp2.link.auto-negotiate: enabled, wanted off",
    ]


# SONiC's stock configurations refuse the fabric's VLAN membership.
SONIC_T1 = fixture_json("sonic", "msn4700-preset-t1.json")
SONIC_L2 = fixture_json("sonic", "msn4700-preset-l2.json")
SONIC_L3 = fixture_json("sonic", "msn4700-preset-l3.json")
SONIC_T0 = fixture_json("sonic", "sonic-utilities-mock-t0.json")


@pytest.mark.parametrize(
    ("tables", "expected"),
    [
        (
            SONIC_T1,
            [
                "Ethernet0 has the address 10.0.0.0/31 (CONFIG_DB INTERFACE "
                "Ethernet0|10.0.0.0/31); `config interface ip remove Ethernet0 10.0.0.0/31` "
                "removes it",
                "Ethernet8 has the address 10.0.0.2/31 (CONFIG_DB INTERFACE "
                "Ethernet8|10.0.0.2/31); `config interface ip remove Ethernet8 10.0.0.2/31` "
                "removes it",
            ],
        ),
        (
            SONIC_L2,
            [
                "Ethernet0 is an untagged member of Vlan1000 (CONFIG_DB VLAN_MEMBER "
                "Vlan1000|Ethernet0); `config vlan member del 1000 Ethernet0` removes it",
                "Ethernet8 is an untagged member of Vlan1000 (CONFIG_DB VLAN_MEMBER "
                "Vlan1000|Ethernet8); `config vlan member del 1000 Ethernet8` removes it",
            ],
        ),
        (
            SONIC_L3,
            [
                "Ethernet0 is a router interface (CONFIG_DB INTERFACE Ethernet0); "
                "`sonic-db-cli CONFIG_DB DEL INTERFACE|Ethernet0` removes it",
                "Ethernet8 is a router interface (CONFIG_DB INTERFACE Ethernet8); "
                "`sonic-db-cli CONFIG_DB DEL INTERFACE|Ethernet8` removes it",
            ],
        ),
    ],
    ids=["t1", "l2", "l3"],
)
def test_sonic_conflicts_of_the_stock_presets(tables: Any, expected: list[str]) -> None:
    conflicts = flt.sonic_conflicts(["Ethernet8", "Ethernet0"], tables, 100)
    assert flt.sonic_conflict_messages(conflicts) == expected


def test_sonic_conflicts_of_a_t0_config_db() -> None:
    """sonic-utilities' own T0 CONFIG_DB: an address, Vlan1000, a PortChannel, a bare
    router interface; a port tagged in another VLAN or free is no conflict."""
    ports = ["Ethernet0", "Ethernet4", "Ethernet24", "Ethernet32", "Ethernet40", "Ethernet48"]
    conflicts = flt.sonic_conflicts(ports, SONIC_T0, 100)
    assert [(c["port"], c["table"], c["key"], c["clear"]) for c in conflicts] == [
        (
            "Ethernet0",
            "INTERFACE",
            "Ethernet0|14.14.0.1/24",
            ["config", "interface", "ip", "remove", "Ethernet0", "14.14.0.1/24"],
        ),
        (
            "Ethernet4",
            "VLAN_MEMBER",
            "Vlan1000|Ethernet4",
            ["config", "vlan", "member", "del", "1000", "Ethernet4"],
        ),
        (
            "Ethernet24",
            "VLAN_MEMBER",
            "Vlan2000|Ethernet24",
            ["config", "vlan", "member", "del", "2000", "Ethernet24"],
        ),
        (
            "Ethernet32",
            "PORTCHANNEL_MEMBER",
            "PortChannel1001|Ethernet32",
            ["config", "portchannel", "member", "del", "PortChannel1001", "Ethernet32"],
        ),
        (
            "Ethernet40",
            "INTERFACE",
            "Ethernet40",
            ["sonic-db-cli", "CONFIG_DB", "DEL", "INTERFACE|Ethernet40"],
        ),
    ]
    # Untagged in the fabric's own VLAN is what the role wants, no conflict.
    assert flt.sonic_conflicts(["Ethernet4"], SONIC_T0, 1000) == []


def test_sonic_commands_refuse_a_t1_port_or_clear_it_first() -> None:
    with pytest.raises(FilterError, match=r"ip remove Ethernet0 10\.0\.0\.0/31"):
        flt.sonic_commands(["Ethernet0"], FABRIC, SONIC_T1)
    cmds = flt.sonic_commands(["Ethernet0"], FABRIC, SONIC_T1, True)
    assert cmds == [
        ["config", "vlan", "add", "100"],
        ["config", "interface", "ip", "remove", "Ethernet0", "10.0.0.0/31"],
        ["config", "interface", "mtu", "Ethernet0", "9216"],
        ["config", "interface", "speed", "Ethernet0", "200000"],
        ["config", "interface", "autoneg", "Ethernet0", "disabled"],
        ["config", "vlan", "member", "add", "-u", "100", "Ethernet0"],
    ]


# ---------------------------------------------------------------- breakout
SN4700_2X200G = "2x200G[100G,50G,40G,25G,10G,1G]"  # its platform.json mode


@pytest.mark.parametrize(
    ("os_name", "ports", "problem"),
    [
        ("nvue", {"swp1s0": {"node": "s1", "breakout": "2x"}}, None),
        ("nvue", {"swp1s0": {"node": "s1", "breakout": "2x200G"}}, "not an NVUE breakout"),
        ("nvue", {"swp1": {"node": "s1", "breakout": "2x"}}, "sub-port named swpNsM"),
        ("nvue", {"swp1s2": {"node": "s1", "breakout": "2x"}}, "swp1s0..swp1s1, not swp1s2"),
        (
            "nvue",
            {"swp1": {"node": "s1"}, "swp1s0": {"node": "s2", "breakout": "2x"}},
            "lists swp1 and its sub-port swp1s0",
        ),
        (
            "nvue",
            {
                "swp1s0": {"node": "s1", "breakout": "2x"},
                "swp1s1": {"node": "s2", "breakout": "4x"},
            },
            "ask for different breakouts",
        ),
        ("sonic", {"Ethernet4": {"node": "s1", "breakout": SN4700_2X200G}}, None),
        ("sonic", {"Ethernet4": {"node": "s1", "breakout": "2x"}}, "not a SONiC breakout"),
        ("sonic", {"Ethernet4": {"node": "s1", "breakout": "4x100G"}}, "switch_mtu_speed is 200G"),
        ("linux", {"swp1s0": {"node": "s1", "breakout": "2x"}}, "linux driver cannot"),
    ],
)
def test_breakout_problems(os_name: str, ports: dict[str, Any], problem: str | None) -> None:
    found = flt.breakout_problems(ports, os_name, "200G")
    if problem is None:
        assert found == []
    else:
        assert len(found) == 1 and problem in found[0], found


def test_nvue_document_splits_the_parent_of_breakout_sub_ports() -> None:
    """`nv set interface swp1 link breakout 2x` makes swp1s0 and swp1s1 (NVIDIA's
    Switch Port Attributes, Breakout Ports); the parent carries only the breakout."""
    ports = {
        "swp1s0": {"node": "spark1", "breakout": "2x"},
        "swp1s1": {"node": "spark2", "breakout": "2x"},
        "swp2": {"node": "spark3"},
    }
    names = flt.port_names(ports, "nvue")
    doc = flt.nvue_document(names, FABRIC, "5.15.0", flt.breakouts(ports, "nvue"))
    assert doc["interface"]["swp1"] == {"link": {"breakout": {"2x": {}}}}
    assert sorted(doc["interface"]) == ["swp1", "swp1s0", "swp1s1", "swp2"]
    assert doc["interface"]["swp1s0"]["link"]["speed"] == "200G"
    # A switch that has not split swp1 yet lacks it; one that has, nothing.
    applied = _applied(NVUE_5_15, flt.nvue_document(names, FABRIC, "5.15.0"))
    assert flt.nvue_differences(doc, applied) == ["interface.swp1: missing"]
    assert flt.nvue_differences(doc, _applied(NVUE_5_15, doc)) == []


def test_sonic_commands_split_the_parent_of_breakout_sub_ports() -> None:
    """On a real SN4700 t1 CONFIG_DB: Ethernet0 (8 lanes, 400G) into Ethernet0 and
    Ethernet4 at 200G. Its address goes first (a breakout refuses dependencies), the
    breakout names BREAKOUT_CFG's parent and the platform's mode, and the sub-ports,
    new ports, get every setting."""
    modes = {"Ethernet0": SN4700_2X200G, "Ethernet4": SN4700_2X200G}
    cmds = flt.sonic_commands(["Ethernet0", "Ethernet4"], FABRIC, SONIC_T1, True, modes)
    assert cmds[:3] == [
        ["config", "vlan", "add", "100"],
        ["config", "interface", "ip", "remove", "Ethernet0", "10.0.0.0/31"],
        ["config", "interface", "breakout", "Ethernet0", SN4700_2X200G, "-y"],
    ]
    for port in ("Ethernet0", "Ethernet4"):
        assert ["config", "interface", "mtu", port, "9216"] in cmds
        assert ["config", "vlan", "member", "add", "-u", "100", port] in cmds
    # Ethernet4 alone: its parent is still Ethernet0, the BREAKOUT_CFG port below it.
    only = flt.sonic_commands(["Ethernet4"], FABRIC, SONIC_T1, True, {"Ethernet4": SN4700_2X200G})
    assert ["config", "interface", "breakout", "Ethernet0", SN4700_2X200G, "-y"] in only
    # Split already: no breakout.
    done = json.loads(json.dumps(SONIC_L2))
    done["BREAKOUT_CFG"]["Ethernet0"] = {"brkout_mode": SN4700_2X200G}
    done["VLAN_MEMBER"] = {}
    again = flt.sonic_commands(["Ethernet0"], FABRIC, done, False, {"Ethernet0": SN4700_2X200G})
    assert not [c for c in again if c[:3] == ["config", "interface", "breakout"]]
    # Without CONFIG_DB (render) the parent is the switch's to say.
    rendered = flt.sonic_commands(["Ethernet4"], FABRIC, None, False, {"Ethernet4": "2x200G"})
    assert rendered[1] == [
        "config",
        "interface",
        "breakout",
        "<BREAKOUT_CFG parent of Ethernet4>",
        "2x200G",
        "-y",
    ]


# ---------------------------------------------------- switch_port_mtu logic
class FakeKernel:
    """A sysfs tree plus the kernel's bridge rule: a bridge whose MTU nobody set
    follows the smallest MTU of its ports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.user_set: set[str] = set()
        self.commands: list[list[str]] = []
        self.refuse: dict[str, int] = {}  # device -> highest MTU its driver takes

    def add(self, dev: str, mtu: int, master: str | None = None, bridge: bool = False) -> None:
        (self.root / dev).mkdir(parents=True)
        (self.root / dev / "mtu").write_text(f"{mtu}\n")
        if bridge:
            (self.root / dev / "bridge").mkdir()
        if master:
            (self.root / dev / "master").symlink_to(f"../{master}")

    def mtu(self, dev: str) -> int:
        return int((self.root / dev / "mtu").read_text())

    def ports_of(self, bridge: str) -> list[str]:
        return [
            p.name
            for p in self.root.iterdir()
            if (p / "master").is_symlink() and (p / "master").readlink().name == bridge
        ]

    def run(self, cmd: list[str]) -> None:
        assert cmd[:4] == ["ip", "link", "set", "dev"] and cmd[5] == "mtu"
        self.commands.append(cmd)
        dev, mtu = cmd[4], int(cmd[6])
        mtu = min(mtu, self.refuse.get(dev, mtu))
        (self.root / dev / "mtu").write_text(f"{mtu}\n")
        if (self.root / dev / "bridge").is_dir():
            self.user_set.add(dev)
        elif (self.root / dev / "master").is_symlink():
            bridge = (self.root / dev / "master").readlink().name
            if bridge not in self.user_set:
                low = min(self.mtu(p) for p in self.ports_of(bridge))
                (self.root / bridge / "mtu").write_text(f"{low}\n")


@pytest.fixture
def fake_switch(tmp_path: Path) -> FakeKernel:
    """Like the lab switch: swp1..8, odd ports in br-a, even in br-b, all 1500."""
    kernel = FakeKernel(tmp_path / "net")
    kernel.add("br-a", 1500, bridge=True)
    kernel.add("br-b", 1500, bridge=True)
    kernel.add("enP7s7", 1500)
    for i, port in enumerate(SIM_PORTS):
        kernel.add(port, 1500, master="br-a" if i % 2 == 0 else "br-b")
    return kernel


def apply(
    kernel: FakeKernel, mtu: int = 9216, ports: list[str] | None = None, **kw: Any
) -> dict[str, Any]:
    result: dict[str, Any] = mod.apply(
        SIM_PORTS if ports is None else ports, mtu, root=kernel.root, run=kernel.run, **kw
    )
    return result


def test_module_sets_ports_and_bridges_follow(fake_switch: FakeKernel) -> None:
    result = apply(fake_switch, check_mode=False)
    assert result["changed"] is True
    # Bridges followed their ports by themselves: only the ports were set.
    assert fake_switch.commands == [
        ["ip", "link", "set", "dev", p, "mtu", "9216"] for p in SIM_PORTS
    ]
    assert result["ports"]["swp2"] == {"before": 1500, "after": 9216, "master": "br-b"}
    assert result["bridges"] == {
        "br-a": {"before": 1500, "after": 9216},
        "br-b": {"before": 1500, "after": 9216},
    }
    assert fake_switch.mtu("enP7s7") == 1500


def test_module_second_run_changes_nothing(fake_switch: FakeKernel) -> None:
    apply(fake_switch, check_mode=False)
    fake_switch.commands.clear()
    result = apply(fake_switch, check_mode=False)
    assert result["changed"] is False
    assert result["commands"] == [] and fake_switch.commands == []


def test_module_check_mode_predicts_and_runs_nothing(fake_switch: FakeKernel) -> None:
    result = apply(fake_switch, check_mode=True)
    assert result["changed"] is True
    assert fake_switch.commands == []
    assert all(fake_switch.mtu(p) == 1500 for p in SIM_PORTS)
    assert result["ports"]["swp1"]["after"] == 9216
    assert len(result["commands"]) == 10  # 8 ports, and 2 bridges as far as it can tell


def test_module_sets_a_bridge_whose_mtu_was_set_by_hand(fake_switch: FakeKernel) -> None:
    fake_switch.user_set.add("br-a")
    result = apply(fake_switch, check_mode=False)
    assert fake_switch.commands[-1] == ["ip", "link", "set", "dev", "br-a", "mtu", "9216"]
    assert result["bridges"]["br-a"]["after"] == 9216


def test_module_only_touches_ports_that_differ(fake_switch: FakeKernel) -> None:
    apply(fake_switch, check_mode=False)
    fake_switch.run(["ip", "link", "set", "dev", "swp3", "mtu", "1500"])  # someone pulled swp3 back
    fake_switch.commands.clear()
    result = apply(fake_switch, check_mode=False)
    assert fake_switch.commands == [["ip", "link", "set", "dev", "swp3", "mtu", "9216"]]
    assert result["bridges"]["br-a"] == {"before": 1500, "after": 9216}
    assert result["bridges"]["br-b"] == {"before": 9216, "after": 9216}


def test_module_lowers_too(fake_switch: FakeKernel) -> None:
    apply(fake_switch, check_mode=False)
    result = apply(fake_switch, mtu=1500, check_mode=False)
    assert result["changed"] is True
    assert {fake_switch.mtu(d) for d in [*SIM_PORTS, "br-a", "br-b"]} == {1500}


def test_module_fails_on_a_missing_port(fake_switch: FakeKernel) -> None:
    with pytest.raises(mod.PortMtuError, match="no such port on the switch: swp9"):
        apply(fake_switch, ports=["swp1", "swp9"], check_mode=True)
    assert fake_switch.commands == []


def test_module_fails_when_the_mtu_does_not_stick(fake_switch: FakeKernel) -> None:
    fake_switch.refuse["swp4"] = 1500
    with pytest.raises(mod.PortMtuError, match="did not stick: swp4 has 1500"):
        apply(fake_switch, check_mode=False)


def test_bridge_of_ignores_masters_that_are_not_bridges(tmp_path: Path) -> None:
    kernel = FakeKernel(tmp_path / "net")
    kernel.add("bond0", 1500)
    kernel.add("swp1", 1500, master="bond0")
    kernel.add("swp2", 1500)
    assert mod.bridge_of(kernel.root, "swp1") is None
    assert mod.bridge_of(kernel.root, "swp2") is None
    assert apply(kernel, ports=["swp1", "swp2"], check_mode=False)["bridges"] == {}


def test_script_mode_skips_absent_ports(
    fake_switch: FakeKernel,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = tmp_path / "switch-ports.json"
    state.write_text(json.dumps({"mtu": 9216, "ports": ["swp1", "swp9"]}))
    monkeypatch.setattr(mod, "SYSFS_NET", str(fake_switch.root))

    def fake_run(cmd: list[str], check: bool) -> None:
        assert check is True
        fake_switch.run(cmd)

    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    assert mod.run_script(str(state)) == 0
    out, err = capsys.readouterr()
    # br-a still holds ports at 1500, so the kernel keeps it there: set by hand.
    assert out.splitlines() == ["ip link set dev swp1 mtu 9216", "ip link set dev br-a mtu 9216"]
    assert "ports not present, skipped: swp9" in err
    assert fake_switch.mtu("swp1") == 9216


def test_script_mode_reports_a_broken_state_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "switch-ports.json"
    state.write_text('{"mtu": "jumbo", "ports": []}')
    assert mod.run_script(str(state)) == 1
    assert "switch_port_mtu:" in capsys.readouterr().err


# ------------------------------------------- the module through Ansible
def fake_ip(bin_dir: Path) -> None:
    """An `ip` that writes `link set dev X mtu N` into $FAKE_SYSFS/X/mtu."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "ip"
    script.write_text(
        textwrap.dedent(f"""\
        #!{sys.executable}
        import os, pathlib, sys
        a = sys.argv[1:]
        assert a[:3] == ["link", "set", "dev"] and a[4] == "mtu", a
        pathlib.Path(os.environ["FAKE_SYSFS"], a[3], "mtu").write_text(a[5] + "\\n")
        """)
    )
    script.chmod(0o755)


def ansible_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(ROOT),
            "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
            "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{tmp_path / 'bin'}{os.pathsep}{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    env.update(extra)
    return env


def adhoc_module(tmp_path: Path, kernel: FakeKernel, *flags: str) -> dict[str, Any]:
    fake_ip(tmp_path / "bin")
    args = json.dumps({"ports": SIM_PORTS, "mtu": 9216, "sysfs_root": str(kernel.root)})
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible"),
            "localhost",
            "-m",
            "sparkctl.spark.switch_port_mtu",
            "-a",
            args,
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            "-o",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=ansible_env(tmp_path, FAKE_SYSFS=str(kernel.root)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.split("=>", 1)[1])
    return result


def test_module_through_ansible_check_then_apply_then_idempotent(
    fake_switch: FakeKernel, tmp_path: Path
) -> None:
    preview = adhoc_module(tmp_path, fake_switch, "--check", "--diff")
    assert preview["changed"] is True
    assert fake_switch.mtu("swp1") == 1500
    applied = adhoc_module(tmp_path, fake_switch)
    assert applied["changed"] is True
    assert {fake_switch.mtu(d) for d in [*SIM_PORTS]} == {9216}
    again = adhoc_module(tmp_path, fake_switch)
    assert again["changed"] is False and again["commands"] == []


# ----------------------------- a real bridge in a throwaway network namespace
def netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("ip") is None:
        return "needs iproute2"
    return None


@pytest.mark.skipif(netns_unavailable() is not None, reason=str(netns_unavailable()))
def test_script_against_a_kernel_bridge(tmp_path: Path) -> None:
    """The kernel, not a fake, decides whether the bridge follows its ports."""
    ns = f"swmtu-{uuid.uuid4().hex[:8]}"

    def ip(*args: str) -> None:
        subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True)

    def mtus() -> dict[str, int]:
        out = subprocess.run(
            ["ip", "-n", ns, "-j", "link", "show"], check=True, capture_output=True, text=True
        ).stdout
        return {d["ifname"]: d["mtu"] for d in json.loads(out)}

    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        ip("link", "add", "br-a", "type", "bridge")
        for port in ("swp1", "swp3"):
            ip("link", "add", port, "type", "veth", "peer", "name", f"p{port}")
            ip("link", "set", port, "mtu", "1500", "master", "br-a")
        state = tmp_path / "switch-ports.json"
        state.write_text(json.dumps({"mtu": 9216, "ports": ["swp1", "swp3", "swp5"]}))
        run = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                str(ROLE.parents[1] / "plugins" / "modules" / "switch_port_mtu.py"),
                "--state-file",
                str(state),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        assert "skipped: swp5" in run.stderr
        # Only the ports were set; the bridge followed by itself...
        assert run.stdout.splitlines() == [
            "ip link set dev swp1 mtu 9216",
            "ip link set dev swp3 mtu 9216",
        ]
        assert {k: v for k, v in mtus().items() if k in {"swp1", "swp3", "br-a"}} == {
            "swp1": 9216,
            "swp3": 9216,
            "br-a": 9216,
        }
        # ... and so it also follows them back down (what `lab port --mtu 1500` relies on).
        ip("link", "set", "swp1", "mtu", "1500")
        ip("link", "set", "swp3", "mtu", "1500")
        assert mtus()["br-a"] == 1500
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


# --------------------------------------- the nvue driver against a fake nv
FAKE_NV = """\
#!{python}
# A stand-in for NVUE's `nv`: the applied and pending trees in $FAKE_NV_STATE,
# every call logged.
import json, os, sys, yaml
path = os.environ["FAKE_NV_STATE"]
state = json.load(open(path))
args = sys.argv[1:]
state["log"].append(args)
def done(code=0):
    json.dump(state, open(path, "w"))
    sys.exit(code)
def merge(into, more):
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
if args in state.get("fail", []):
    print("Error: simulated failure", file=sys.stderr)
    done(1)
if args[:2] == ["show", "interface"] and args[3:] == ["link", "--operational", "-o", "json"]:
    link = state["applied"]["interface"][args[2]]["link"]
    print(json.dumps({{"mtu": link["mtu"], "duplex": "full", "speed": link.get("speed", "100G")}}))
elif args == ["config", "show", "-o", "json"]:
    header = state.get("header", {{"model": "fake"}})
    print(json.dumps([{{"header": header}}, {{"set": state["applied"]}}]))
elif args == ["config", "detach"]:
    state["pending"] = {{}}
elif args[:2] == ["config", "patch"] and len(args) == 3 and args[2].startswith("/"):
    ops = yaml.safe_load(open(args[2]))
    assert isinstance(ops, list), ops
    for op in ops:
        merge(state["pending"], op["set"])
    state["patched"].append(ops)
elif args[:3] == ["config", "apply", "--confirm"] and args[4:] == ["--assume-yes"]:
    merge(state["applied"], state["pending"])
    state["pending"] = {{}}
    state["unconfirmed"] = True
elif args == ["config", "apply", "--confirm-yes"]:
    state["unconfirmed"] = False
elif args == ["config", "save"]:
    state["saved"] = json.loads(json.dumps(state["applied"]))
else:
    print("fake nv: unexpected " + " ".join(args), file=sys.stderr)
    done(2)
done()
"""


def nvue_switch(
    tmp_path: Path,
    mtu: dict[str, int],
    fail: list[list[str]] | None = None,
    header: dict[str, Any] | None = None,
    fabric: dict[str, Any] | None = None,
) -> Path:
    """A fake NVUE switch whose ports hold ``mtu``; ``header`` is what its
    `nv config show` prints first (a release's), ``fabric`` its switch_ports."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    nv = tmp_path / "bin" / "nv"
    nv.write_text(FAKE_NV.format(python=sys.executable))
    nv.chmod(0o755)
    state = tmp_path / "nv-state.json"
    applied = {"interface": {port: {"link": {"mtu": m}, "type": "swp"} for port, m in mtu.items()}}
    state.write_text(
        json.dumps(
            {
                "applied": applied,
                "pending": {},
                "patched": [],
                "log": [],
                "fail": fail or [],
                **({"header": header} if header else {}),
            }
        )
    )
    return switch_inventory(tmp_path, "nvue", ["swp1", "swp2", "swp10"], fabric)


def switch_inventory(
    tmp_path: Path, os_name: str, ports: list[str], fabric: dict[str, Any] | None = None
) -> Path:
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        textwrap.dedent(f"""\
        [switches]
        fake-switch ansible_connection=local switch_os={os_name} ansible_become=false
        [switches:vars]
        ansible_python_interpreter={sys.executable}
        [lab:children]
        switches
        """)
    )
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "lab.yml").write_text(
        yaml.safe_dump(
            {
                "switch_ports": fabric
                or {port: {"node": f"spark{i}", "twin": "both"} for i, port in enumerate(ports, 1)}
            }
        )
    )
    (tmp_path / "site.yml").write_text(
        textwrap.dedent("""\
        - name: Switch MTU on a fake switch
          hosts: switches
          gather_facts: false
          roles:
            - role: sparkctl.spark.switch_mtu
        """)
    )
    return tmp_path / ("nv-state.json" if os_name == "nvue" else "sonic-state.json")


def run_role(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # The patch file's real home, /etc/sparkctl, is not writable here.
    patch_file = json.dumps({"_switch_mtu_nvue_patch_file": str(tmp_path / "nvue-fabric.yaml")})
    return subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(tmp_path / "inventory.ini"),
            str(tmp_path / "site.yml"),
            "-e",
            patch_file,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=ansible_env(
            tmp_path,
            FAKE_NV_STATE=str(tmp_path / "nv-state.json"),
            FAKE_SONIC_STATE=str(tmp_path / "sonic-state.json"),
        ),
    )


def recap(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("fake-switch "))
    return {k: int(v) for k, v in (f.split("=") for f in line.split(":", 1)[1].split())}


def nv_log(state: Path) -> list[list[str]]:
    log: list[list[str]] = json.loads(state.read_text())["log"]
    return log


def show(port: str) -> list[str]:
    return ["show", "interface", port, "link", "--operational", "-o", "json"]


CONFIG_SHOW = ["config", "show", "-o", "json"]


@dataclass(frozen=True)
class ConfiguredNvue:
    """A fake NVUE switch after one run of the role: its directory, state file and run."""

    path: Path
    state: Path
    first: subprocess.CompletedProcess[str]
    configured: str  # the state file as that run left it


@pytest.fixture(scope="module")
def configured_nvue(tmp_path_factory: pytest.TempPathFactory) -> ConfiguredNvue:
    """One configuring run of the role (a full ansible-playbook run, 15-20 s of CPU), read by
    the idempotence test and started from by the verify test."""
    tmp_path = tmp_path_factory.mktemp("nvue-configured")
    state = nvue_switch(tmp_path, {"swp1": 1500, "swp2": 9216, "swp10": 1500})
    first = run_role(tmp_path)
    return ConfiguredNvue(tmp_path, state, first, state.read_text())


def test_nvue_driver_patches_applies_confirms_and_is_idempotent(
    configured_nvue: ConfiguredNvue,
) -> None:
    tmp_path, state, first = configured_nvue.path, configured_nvue.state, configured_nvue.first
    assert first.returncode == 0, first.stdout + first.stderr
    patch_file = str(tmp_path / "nvue-fabric.yaml")
    reads = [show(p) for p in ("swp1", "swp2", "swp10")]
    assert nv_log(state) == [
        CONFIG_SHOW,
        ["config", "detach"],
        ["config", "patch", patch_file],
        ["config", "apply", "--confirm", "120s", "--assume-yes"],
        ["config", "apply", "--confirm-yes"],
        ["config", "save"],
        CONFIG_SHOW,
        *reads,  # verify
    ]
    final = json.loads(state.read_text())
    port = {
        "link": {"mtu": 9216, "speed": "200G", "auto-negotiate": "off"},
        "bridge": {"domain": {"br_default": {"access": 100}}},
    }
    # Exactly the fabric's document went in, as one set operation in the file...
    assert final["patched"] == [
        [
            {
                "set": {
                    "bridge": {"domain": {"br_default": {"vlan": {"100": {}}}}},
                    "interface": {"swp1": port, "swp2": port, "swp10": port},
                }
            }
        ]
    ]
    assert yaml.safe_load(Path(patch_file).read_text()) == final["patched"][0]
    # ... and is what the switch applied, confirmed and saved.
    assert final["applied"] == final["saved"]
    assert final["applied"]["interface"]["swp10"] == {**port, "type": "swp"}
    assert final["unconfirmed"] is False
    assert recap(first)["changed"] == 6  # file, stage x2, apply, confirm, save
    assert "3 devices at MTU 9216: swp1, swp2, swp10" in first.stdout
    assert "3 ports untagged in VLAN 100 at 200G, auto-negotiation off" in first.stdout

    calls = len(nv_log(state))
    second = run_role(tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert recap(second)["changed"] == 0
    assert nv_log(state)[calls:] == [CONFIG_SHOW, CONFIG_SHOW, *reads]  # configure, verify


def test_nvue_driver_verify_fails_on_a_port_outside_the_vlan(
    tmp_path: Path, configured_nvue: ConfiguredNvue
) -> None:
    """A switch that takes the patch but keeps one port elsewhere (another
    session, a typo'd bridge) fails verify, naming the path."""
    state = nvue_switch(tmp_path, {"swp1": 1500, "swp2": 1500, "swp10": 1500})
    first = configured_nvue.first
    assert first.returncode == 0, first.stdout + first.stderr
    # The switch as the role configured it (the configuring run is shared).
    state.write_text(configured_nvue.configured)
    data = json.loads(state.read_text())
    data["applied"]["interface"]["swp2"]["bridge"]["domain"]["br_default"]["access"] = 1
    state.write_text(json.dumps(data))
    proc = run_role(tmp_path, "--tags", "switch_mtu_verify")
    assert proc.returncode != 0
    assert "interface.swp2.bridge.domain.br_default.access: 1, wanted 100" in proc.stdout


def test_nvue_driver_failed_apply_says_the_switch_rolls_back(tmp_path: Path) -> None:
    apply_cmd = ["config", "apply", "--confirm", "120s", "--assume-yes"]
    state = nvue_switch(tmp_path, {"swp1": 1500, "swp2": 1500, "swp10": 1500}, fail=[apply_cmd])
    proc = run_role(tmp_path)
    assert proc.returncode != 0
    assert "rolls back by itself within 120s" in proc.stdout
    assert "interface.swp1.link.speed: unset, wanted 200G" in proc.stdout
    assert ["config", "apply", "--confirm-yes"] not in nv_log(state)


def test_nvue_driver_check_mode_only_reads(tmp_path: Path) -> None:
    state = nvue_switch(tmp_path, {"swp1": 1500, "swp2": 1500, "swp10": 1500})
    proc = run_role(tmp_path, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert nv_log(state) == [CONFIG_SHOW]
    assert not (tmp_path / "nvue-fabric.yaml").exists()


# -------------------------- the sonic driver against a fake sonic-cfggen/config
FAKE_SONIC = """\
#!{python}
# Stand-ins for SONiC's `sonic-cfggen`, `config` and `sonic-db-cli` (one program, by
# its name): CONFIG_DB's tables and the saved config_db.json in $FAKE_SONIC_STATE.
# `config vlan member add` refuses what sonic-utilities' config/vlan.py
# add_vlan_member refuses; `config interface ip remove` drops the port's INTERFACE
# row with its last address (config/main.py, ip remove); `config interface
# breakout` without -f stops at a port's dependencies, here its rows and ACL
# bindings, and exits 1 (config/main.py, breakout_Ports: "Dependencies Exist. No
# further action will be taken").
import json, os, sys
path = os.environ["FAKE_SONIC_STATE"]
state = json.load(open(path))
tool, args = os.path.basename(sys.argv[0]), sys.argv[1:]
state["log"].append([tool, *args])
db = state["db"]
def done(code=0):
    json.dump(state, open(path, "w"))
    sys.exit(code)
def fail(msg):
    print("Error: " + msg, file=sys.stderr)
    done(1)
def rows(table, port):
    return [k for k in db.get(table, {{}})
            if k == port or k.split("|")[-1] == port or k.startswith(port + "|")]
if tool == "sonic-cfggen":
    assert args[:3] == ["-d", "--var-json", args[2]] and len(args) == 3, args
    table = db.get(args[2], {{}})
    if table:
        print(json.dumps(table, indent=4))
elif tool == "sonic-db-cli":
    assert args[:2] == ["CONFIG_DB", "DEL"] and len(args) == 3, args
    table, _, key = args[2].partition("|")
    db.get(table, {{}}).pop(key, None)
elif args[:2] == ["vlan", "add"]:
    db.setdefault("VLAN", {{}})["Vlan" + args[2]] = {{"vlanid": args[2]}}
elif args[:2] == ["interface", "mtu"] or args[:2] == ["interface", "speed"]:
    if args[2] not in db["PORT"]:
        fail("Interface name is invalid")
    db["PORT"][args[2]][args[1]] = args[3]
elif args[:2] == ["interface", "autoneg"]:
    db["PORT"][args[2]]["autoneg"] = {{"enabled": "on", "disabled": "off"}}[args[3]]
elif args[:3] == ["interface", "ip", "remove"]:
    port, address = args[3], args[4]
    del db["INTERFACE"][port + "|" + address]
    if not [k for k in db["INTERFACE"] if k.startswith(port + "|")]:
        db["INTERFACE"].pop(port, None)
elif args[:3] == ["portchannel", "member", "del"]:
    del db["PORTCHANNEL_MEMBER"][args[3] + "|" + args[4]]
elif args[:2] == ["interface", "breakout"] and args[4:] == ["-y"]:
    parent, mode = args[2], args[3]
    if any(rows(t, parent) for t in ("VLAN_MEMBER", "INTERFACE", "PORTCHANNEL_MEMBER")) or [
            a for a in db.get("ACL_TABLE", {{}}).values() if parent in a.get("ports", [])]:
        print("Dependencies Exist. No further action will be taken")
        done(1)
    count, speed = int(mode.split("x")[0]), mode.split("x")[1].split("[")[0]
    lanes = db["PORT"].pop(parent)["lanes"].split(",")
    step, base = len(lanes) // count, int(parent[len("Ethernet"):])
    for i in range(count):
        db["PORT"]["Ethernet" + str(base + i * step)] = {{
            "lanes": ",".join(lanes[i * step:(i + 1) * step]),
            "speed": str(int(speed[:-1]) * 1000), "mtu": "9100", "admin_status": "up"}}
    db["BREAKOUT_CFG"][parent] = {{"brkout_mode": mode}}
elif args[:3] == ["switchport", "mode", "access"]:
    if rows("INTERFACE", args[3]):
        fail("Remove IP from {{}} to change mode!".format(args[3]))
    db["PORT"][args[3]]["mode"] = "access"
elif args[:3] == ["vlan", "member", "add"] and args[3] == "-u":
    vid, port = args[4], args[5]
    if "Vlan" + vid not in db.get("VLAN", {{}}):
        fail("Vlan{{}} does not exist".format(vid))
    if port in db.get("INTERFACE", {{}}):
        fail(port + " is a router interface!")
    if rows("PORTCHANNEL_MEMBER", port):
        fail(port + " is part of portchannel!")
    if [k for k, v in db.get("VLAN_MEMBER", {{}}).items()
            if k.split("|")[1] == port and v.get("tagging_mode") == "untagged"]:
        fail(port + " is already untagged member!")
    if db["PORT"][port].get("mode") == "routed":
        fail(port + " is in routed mode!")
    key = "Vlan{{}}|{{}}".format(vid, port)
    db.setdefault("VLAN_MEMBER", {{}})[key] = {{"tagging_mode": "untagged"}}
elif args[:3] == ["vlan", "member", "del"]:
    del db["VLAN_MEMBER"]["Vlan{{}}|{{}}".format(args[3], args[4])]
elif args == ["save", "-y"]:
    state["saved"] = json.loads(json.dumps(db))
else:
    fail("fake sonic: unexpected " + " ".join([tool, *args]))
done()
"""


SONIC_READS = [
    ["sonic-cfggen", "-d", "--var-json", t]
    for t in ("PORT", "VLAN", "VLAN_MEMBER", "INTERFACE", "PORTCHANNEL_MEMBER", "BREAKOUT_CFG")
]


def sonic_switch(
    tmp_path: Path,
    ports: dict[str, dict[str, str]],
    db: dict[str, Any] | None = None,
    fabric: dict[str, dict[str, str]] | None = None,
) -> Path:
    """A fake SONiC switch whose CONFIG_DB is ``db`` (default: only ``ports`` as PORT);
    the fabric ports (switch_ports) are ``fabric`` or the names of ``ports``."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    for tool in ("sonic-cfggen", "config", "sonic-db-cli"):
        exe = tmp_path / "bin" / tool
        exe.write_text(FAKE_SONIC.format(python=sys.executable))
        exe.chmod(0o755)
    state = switch_inventory(tmp_path, "sonic", list(ports), fabric)
    state.write_text(json.dumps({"db": db or {"PORT": ports}, "log": [], "saved": None}))
    return state


def test_sonic_driver_sets_what_differs_saves_once_and_is_idempotent(tmp_path: Path) -> None:
    state = sonic_switch(
        tmp_path,
        {
            "Ethernet0": {
                "lanes": "0,1,2,3",
                "mtu": "9100",
                "speed": "100000",
                "autoneg": "on",
                "admin_status": "up",
            },
            "Ethernet8": {
                "lanes": "8,9,10,11",
                "mtu": "9216",
                "speed": "200000",
                "autoneg": "off",
                "mode": "routed",
            },
        },
    )
    first = run_role(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    data = json.loads(state.read_text())
    assert data["log"] == [
        *SONIC_READS,  # preflight: nothing refuses the ports
        *SONIC_READS,
        ["config", "vlan", "add", "100"],
        ["config", "interface", "mtu", "Ethernet0", "9216"],
        ["config", "interface", "speed", "Ethernet0", "200000"],
        ["config", "interface", "autoneg", "Ethernet0", "disabled"],
        ["config", "vlan", "member", "add", "-u", "100", "Ethernet0"],
        ["config", "switchport", "mode", "access", "Ethernet8"],
        ["config", "vlan", "member", "add", "-u", "100", "Ethernet8"],
        *SONIC_READS,  # verify
        ["config", "save", "-y"],  # the handler, after verify passed
    ]
    assert data["saved"] == data["db"]
    assert data["db"]["VLAN_MEMBER"] == {
        "Vlan100|Ethernet0": {"tagging_mode": "untagged"},
        "Vlan100|Ethernet8": {"tagging_mode": "untagged"},
    }
    assert data["db"]["PORT"]["Ethernet0"] == {
        "lanes": "0,1,2,3",
        "mtu": "9216",
        "speed": "200000",
        "autoneg": "off",
        "admin_status": "up",
    }
    assert "2 ports untagged in VLAN 100 at 200G, auto-negotiation off" in first.stdout

    calls = len(data["log"])
    second = run_role(tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert recap(second)["changed"] == 0
    assert json.loads(state.read_text())["log"][calls:] == [*SONIC_READS] * 3  # no save


def test_sonic_driver_refused_command_fails_and_saves_nothing(tmp_path: Path) -> None:
    state = sonic_switch(tmp_path, {"Ethernet0": {"mtu": "1500", "speed": "100000"}})
    (tmp_path / "bin" / "config").write_text("#!/bin/sh\necho 'Error: no' >&2\nexit 1\n")
    proc = run_role(tmp_path)
    assert proc.returncode != 0
    assert json.loads(state.read_text())["saved"] is None


def test_sonic_driver_check_mode_only_reads(tmp_path: Path) -> None:
    state = sonic_switch(tmp_path, {"Ethernet0": {"mtu": "1500", "speed": "100000"}})
    proc = run_role(tmp_path, "--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(cmd[0] == "sonic-cfggen" for cmd in json.loads(state.read_text())["log"])


# ------------------------- a 5.15 NVUE switch, a breakout, SONiC's stock presets
def test_nvue_driver_on_5_15_writes_disabled_splits_the_parent_and_is_idempotent(
    tmp_path: Path,
) -> None:
    """The release comes from the header of the real 5.15.0 `nv config show`; the
    second run finds nothing to change (it compared `disabled` with `off` before)."""
    fabric = {
        "swp1s0": {"node": "spark1", "twin": "both", "breakout": "2x"},
        "swp1s1": {"node": "spark2", "twin": "both", "breakout": "2x"},
        "swp2": {"node": "spark3", "twin": "both"},
    }
    state = nvue_switch(tmp_path, {"swp2": 1500}, header=NVUE_5_15[0]["header"], fabric=fabric)
    first = run_role(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    data = json.loads(state.read_text())
    (patched,) = data["patched"]
    tree = patched[0]["set"]["interface"]
    assert tree["swp1"] == {"link": {"breakout": {"2x": {}}}}
    for port in ("swp1s0", "swp1s1", "swp2"):
        assert tree[port]["link"]["auto-negotiate"] == "disabled"
    calls = len(data["log"])
    second = run_role(tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert recap(second)["changed"] == 0
    assert [a[:2] for a in nv_log(state)[calls:] if a[:2] != ["show", "interface"]] == [
        ["config", "show"],  # configure: nothing lacking
        ["config", "show"],  # verify
    ]


def test_sonic_preflight_refuses_the_l2_preset_and_changes_nothing(tmp_path: Path) -> None:
    """SONiC's l2 preset (every port untagged in Vlan1000): config vlan member add
    would refuse Ethernet0 and Ethernet8 half-way; preflight names them first."""
    db = json.loads(json.dumps(SONIC_L2))
    state = sonic_switch(tmp_path, {p: db["PORT"][p] for p in ("Ethernet0", "Ethernet8")}, db)
    proc = run_role(tmp_path)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "SONiC would refuse Ethernet0, Ethernet8 as members of VLAN 100" in out
    assert "`config vlan member del 1000 Ethernet8` removes it" in out
    assert "switch_mtu_sonic_clear_conflicts: true" in out
    data = json.loads(state.read_text())
    assert data["log"] == SONIC_READS  # read once, nothing changed
    assert data["db"] == db and data["saved"] is None


def test_sonic_clears_a_t0_config_db_on_request_and_is_idempotent(tmp_path: Path) -> None:
    """sonic-utilities' T0 CONFIG_DB, with switch_mtu_sonic_clear_conflicts: the
    address, the PortChannel membership, Vlan1000 and the bare router interface go
    first; every port then joins VLAN 100 (the fake refuses as sonic-utilities does)."""
    db = json.loads(json.dumps(SONIC_T0))
    ports = ("Ethernet0", "Ethernet4", "Ethernet32", "Ethernet40")
    state = sonic_switch(tmp_path, {p: db["PORT"][p] for p in ports}, db)
    clear = ("-e", '{"switch_mtu_sonic_clear_conflicts": true}')
    first = run_role(tmp_path, *clear)
    assert first.returncode == 0, first.stdout + first.stderr
    data = json.loads(state.read_text())
    changes = [c[1:] for c in data["log"] if c[0] != "sonic-cfggen"]
    assert changes[:6] == [
        ["vlan", "add", "100"],
        ["interface", "ip", "remove", "Ethernet0", "14.14.0.1/24"],
        ["vlan", "member", "del", "1000", "Ethernet4"],
        ["portchannel", "member", "del", "PortChannel1001", "Ethernet32"],
        ["CONFIG_DB", "DEL", "INTERFACE|Ethernet40"],
        ["interface", "mtu", "Ethernet0", "9216"],
    ]
    assert changes[-1] == ["save", "-y"]
    for port in ports:
        assert data["db"]["VLAN_MEMBER"][f"Vlan100|{port}"] == {"tagging_mode": "untagged"}
        assert not [k for k in data["db"]["INTERFACE"] if k.split("|")[0] == port]
    calls = len(data["log"])
    second = run_role(tmp_path, *clear)
    assert second.returncode == 0, second.stdout + second.stderr
    assert json.loads(state.read_text())["log"][calls:] == SONIC_READS * 3


def test_sonic_splits_an_sn4700_port_into_two_200g_ports(tmp_path: Path) -> None:
    """The SN4700's t1 preset: Ethernet0 (400G, an address) becomes Ethernet0 and
    Ethernet4 at 200G in VLAN 100; verify reads BREAKOUT_CFG's mode back."""
    db = json.loads(json.dumps(SONIC_T1))
    fabric = {
        "Ethernet0": {"node": "spark1", "twin": "both", "breakout": SN4700_2X200G},
        "Ethernet4": {"node": "spark2", "twin": "both", "breakout": SN4700_2X200G},
    }
    state = sonic_switch(tmp_path, {"Ethernet0": db["PORT"]["Ethernet0"]}, db, fabric)
    proc = run_role(tmp_path, "-e", '{"switch_mtu_sonic_clear_conflicts": true}')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(state.read_text())
    assert ["config", "interface", "breakout", "Ethernet0", SN4700_2X200G, "-y"] in data["log"]
    assert data["db"]["BREAKOUT_CFG"]["Ethernet0"] == {"brkout_mode": SN4700_2X200G}
    for port in ("Ethernet0", "Ethernet4"):
        assert data["db"]["PORT"][port]["speed"] == "200000"
        assert data["db"]["VLAN_MEMBER"][f"Vlan100|{port}"] == {"tagging_mode": "untagged"}
    assert data["saved"] == data["db"]


def test_sonic_breakout_stopped_by_a_dependency_fails_and_saves_nothing(tmp_path: Path) -> None:
    """`config interface breakout` without -f stops at a dependency the role does not
    remove (here an ACL binding) and fails (sonic-utilities breakout_Ports); the
    role fails with it and saves nothing."""
    db = json.loads(json.dumps(SONIC_L2))
    db["VLAN_MEMBER"] = {}
    db["ACL_TABLE"] = {"DATAACL": {"ports": ["Ethernet0"], "type": "L3", "stage": "ingress"}}
    fabric = {"Ethernet4": {"node": "spark1", "twin": "both", "breakout": SN4700_2X200G}}
    state = sonic_switch(tmp_path, {"Ethernet0": db["PORT"]["Ethernet0"]}, db, fabric)
    proc = run_role(tmp_path)
    assert proc.returncode != 0
    assert "Dependencies Exist" in proc.stdout + proc.stderr
    data = json.loads(state.read_text())
    assert data["db"]["BREAKOUT_CFG"]["Ethernet0"]["brkout_mode"].startswith("1x400G")
    assert data["saved"] is None


def render_switch(tmp_path: Path) -> Path:
    """`sparkctl render`'s switch play for the fake switch: the role's render tasks."""
    (tmp_path / "render.yml").write_text(
        textwrap.dedent("""\
        - name: Render switch files
          hosts: switches
          gather_facts: false
          tasks:
            - name: Render switch_mtu
              ansible.builtin.include_role:
                name: sparkctl.spark.switch_mtu
                tasks_from: render.yml
        """)
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(tmp_path / "inventory.ini"),
            str(tmp_path / "render.yml"),
            "-e",
            json.dumps({"sparkctl_render_dir": str(out)}),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=ansible_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / "fake-switch"


def test_render_writes_the_breakout_for_nvue_and_sonic(tmp_path: Path) -> None:
    nvue_dir, sonic_dir = tmp_path / "nvue", tmp_path / "sonic"
    nvue_dir.mkdir()
    sonic_dir.mkdir()
    switch_inventory(
        nvue_dir,
        "nvue",
        [],
        {
            "swp1s0": {"node": "spark1", "breakout": "2x"},
            "swp1s1": {"node": "spark2", "breakout": "2x"},
        },
    )
    (op,) = yaml.safe_load((render_switch(nvue_dir) / "etc/sparkctl/nvue-fabric.yaml").read_text())
    assert op["set"]["interface"]["swp1"] == {"link": {"breakout": {"2x": {}}}}
    assert op["set"]["interface"]["swp1s1"]["link"]["auto-negotiate"] == "off"
    switch_inventory(
        sonic_dir, "sonic", [], {"Ethernet4": {"node": "spark1", "breakout": SN4700_2X200G}}
    )
    lines = (render_switch(sonic_dir) / "sonic-commands.txt").read_text().splitlines()
    assert (
        f"config interface breakout '<BREAKOUT_CFG parent of Ethernet4>' '{SN4700_2X200G}' -y"
        in lines
    )


# -------------------------------------------------- preflight, for real
# Each a value preflight refuses and what it says. One ansible-playbook run judges
# them all, a fake switch per case (host caseN, with the case's values as host
# variables, which the role reads as it reads -e: nothing of the role's vars/ names
# them), each with its own nv state: most of a run per case was Ansible's start,
# not preflight. Each case's test reads its own host's failure.
PREFLIGHT_REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"switch_mtu_value": 9300}, "switch_mtu_value 9300 is outside 68..9216"),
    ({"switch_mtu_value": 1500}, "silently drops large frames"),
    (
        {"switch_mtu_value": 9000, "roce_fabric_mtu": 9216},
        "below the hosts' fabric MTU (roce_fabric_mtu 9216)",
    ),
    ({"switch_mtu_confirm_seconds": 10}, "switch_mtu_confirm_seconds 10 is too short"),
    ({"switch_ports": {"swp1,swp2": {"node": "spark1"}}}, "'swp1,swp2' is not an NVUE"),
    ({"switch_mtu_value": "jumbo"}, "switch_mtu_value"),
    ({"switch_mtu_vlan_id": 4095}, "switch_mtu_vlan_id 4095 is outside 1..4094"),
    ({"switch_mtu_bridge": "br default"}, 'switch_mtu_bridge "br default" is not a bridge'),
    ({"switch_mtu_speed": "200000"}, "switch_mtu_speed"),
    ({"switch_mtu_autoneg": "off"}, "switch_mtu_autoneg"),
]


@dataclass(frozen=True)
class PreflightRun:
    """The one run over every refused case: its output and each case's nv state."""

    proc: subprocess.CompletedProcess[str]
    states: dict[str, Path]  # host -> its fake switch's state file


@pytest.fixture(scope="module")
def preflight_refusals(tmp_path_factory: pytest.TempPathFactory) -> PreflightRun:
    tmp_path = tmp_path_factory.mktemp("preflight-refusals")
    template = nvue_switch(tmp_path, {"swp1": 1500, "swp2": 1500, "swp10": 1500})
    hosts = [f"case{i}" for i in range(len(PREFLIGHT_REFUSALS))]
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(
        inventory.read_text().replace(
            "fake-switch ansible_connection=local switch_os=nvue ansible_become=false\n",
            "".join(
                f"{h} ansible_connection=local switch_os=nvue ansible_become=false\n" for h in hosts
            ),
        )
    )
    (tmp_path / "host_vars").mkdir()
    states = {}
    for host, (extra, _) in zip(hosts, PREFLIGHT_REFUSALS, strict=True):
        states[host] = tmp_path / f"nv-state-{host}.json"
        states[host].write_text(template.read_text())
        (tmp_path / "host_vars" / f"{host}.yml").write_text(
            yaml.safe_dump({**extra, "fake_nv_state": str(states[host])})
        )
    (tmp_path / "site.yml").write_text(
        textwrap.dedent("""\
        - name: Switch MTU on fake switches, one per case
          hosts: switches
          gather_facts: false
          environment:
            FAKE_NV_STATE: "{{ fake_nv_state }}"
          roles:
            - role: sparkctl.spark.switch_mtu
        """)
    )
    return PreflightRun(run_role(tmp_path), states)


def failure_of(proc: subprocess.CompletedProcess[str], host: str) -> str:
    """``host``'s failure message (Ansible's default callback: the result as JSON on
    the line of `fatal: [host]: FAILED! =>`, or `fatal: [host -> localhost]`)."""
    (line,) = [
        ln
        for ln in proc.stdout.splitlines()
        if ln.startswith((f"fatal: [{host}]", f"fatal: [{host} "))
    ]
    return str(json.loads(line.split(" => ", 1)[1])["msg"])


def recap_of(proc: subprocess.CompletedProcess[str], host: str) -> dict[str, int]:
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith(f"{host} ")]
    return {k: int(v) for k, v in (f.split("=") for f in line.split(":", 1)[1].split())}


@pytest.mark.parametrize(("extra", "message"), PREFLIGHT_REFUSALS)
def test_preflight_rejects(
    preflight_refusals: PreflightRun, extra: dict[str, Any], message: str
) -> None:
    proc = preflight_refusals.proc
    host = f"case{PREFLIGHT_REFUSALS.index((extra, message))}"
    assert proc.returncode != 0
    assert recap_of(proc, host)["failed"] == 1, proc.stdout[-3000:]
    assert message in failure_of(proc, host), proc.stdout[-3000:]
    assert nv_log(preflight_refusals.states[host]) == []  # nothing reached the switch


def test_preflight_accepts_the_hosts_mtu_equal_to_the_switch(tmp_path: Path) -> None:
    nvue_switch(tmp_path, {"swp1": 9000, "swp2": 9000, "swp10": 9000})
    proc = run_role(tmp_path, "-e", '{"switch_mtu_value": 9000}', "--tags", "switch_mtu_preflight")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_preflight_explains_a_number_passed_as_text(tmp_path: Path) -> None:
    state = nvue_switch(tmp_path, {"swp1": 1500, "swp2": 1500, "swp10": 1500})
    proc = run_role(tmp_path, "-e", "switch_mtu_value=9216")
    assert proc.returncode != 0
    assert "not text; on the command line pass them as JSON" in proc.stdout
    assert nv_log(state) == []


# ------------------------------------------------------ the real playbook
def test_playbook_syntax(tmp_path: Path) -> None:
    """One check serves every switch OS: configure includes its driver at run time
    (include_tasks), which --syntax-check never reads, so switch_os changes nothing
    here (switch_os=bogus passes alike). The drivers' tasks are read by
    test_every_driver_implements_configure_and_verify and run by the driver tests."""
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(ROOT / "inventory" / "sim.ini"),
            str(PLAYBOOK),
            "--syntax-check",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=ansible_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_playbook_runs_preflight_then_the_role_on_switches(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(ROOT / "inventory" / "sim.ini"),
            str(PLAYBOOK),
            "--list-tasks",
            "--list-hosts",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=ansible_env(tmp_path),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plays = proc.stdout.split("play #")[1:]
    assert "Preflight" in plays[0]
    assert "Switch MTU" in plays[1] and "lab-switch" in plays[1] and "spark1" not in plays[1]
    # Steps are imported statically: their tasks are listed, with the step's tags.
    for step in ("Preflight", "Install", "Configure", "Verify"):
        tags = rf"\tTAGS: \[switch_mtu, switch_mtu_{step.lower()}\]"
        assert re.search(rf"switch_mtu : {step} \|[^\n]*{tags}", plays[1]), step
