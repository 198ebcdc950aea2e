"""Types and choices of role variables, on the controller and in the preflight play.

The type rules come from every role's ``meta/argument_specs.yml`` and are
checked strictly by ``sparkctl/rules/schema.py``: Ansible's own argument
spec validation converts (``type: str`` takes a list as its string form), so a
list where a string belongs would pass it. The preflight role runs the same
module as the filter ``sparkctl_inventory_problems``; the tests at the end run
real ``ansible-playbook`` against a copy of inventory/sim.ini and check that it
stops in the facts-free preflight play with the same problems the controller
reports, without ever starting ssh.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from sparkctl import inventory
from sparkctl import rules as inventory_rules
from sparkctl.errors import ExitCode, SparkctlError
from tests.unit.pathload import ansible_playbook, load_file

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles"
SIM = ROOT / "inventory" / "sim.ini"
FILTER = ROLES.parent / "plugins" / "filter" / "sparkctl_inventory.py"
SPECS = inventory_rules.load_specs(ROLES)


def problems(hostvars: dict[str, dict[str, Any]]) -> list[str]:
    return [str(p) for p in inventory_rules.check_types(hostvars, SPECS)]


# ------------------------------------------------------------ the type rules
def test_types_are_read_from_the_argument_specs() -> None:
    assert SPECS["roce_fabric_mtu"] == ("roce_fabric", SPECS["roce_fabric_mtu"][1])
    assert SPECS["roce_fabric_mtu"][1]["type"] == "int"
    assert SPECS["nccl_socket_ifname"][1]["type"] == "str"
    assert SPECS["hw_profile"][1]["choices"] == ["dgx_spark", "sim"]


@pytest.mark.parametrize(
    ("var", "value", "text"),
    [
        ("nccl_socket_ifname", ["a", "b"], "['a', 'b'] is a list, but nccl needs a string"),
        ("nccl_socket_ifname", {"a": 1}, "is a mapping, but nccl needs a string"),
        ("roce_fabric_mtu", "9000", "'9000' is a string, but roce_fabric needs an integer"),
        ("roce_fabric_mtu", True, "True is a boolean, but roce_fabric needs an integer"),
        ("roce_fabric_mtu", 9000.5, "9000.5 is a number, but roce_fabric needs an integer"),
        ("base_headless", "yes", "'yes' is a string, but base needs a boolean"),
        ("base_headless", 1, "1 is an integer, but base needs a boolean"),
        ("base_packages", "vim", "'vim' is a string, but base needs a list"),
        (
            "base_packages",
            ["vim", ["x"]],
            "item 1 (['x']) is a list, but base needs a list of strings",
        ),
        ("switch_ports", ["swp1"], "is a list, but cluster_defaults needs a mapping"),
        # A breakout is one word of a switch OS's breakout modes, nothing a shell could run.
        (
            "switch_ports",
            {"swp1s0": {"node": "spark1", "breakout": "2x; reboot"}},
            "swp1s0: breakout: '2x; reboot' is not a breakout mode",
        ),
        (
            "switch_ports",
            {"swp1s0": {"node": "spark1", "breakout": 2}},
            "is an integer, but cluster_defaults needs a string",
        ),
        ("hw_profile", "dgx_sparc", "hw_profile must be one of: dgx_spark, sim, got: 'dgx_sparc'"),
        ("hw_profile", ["sim"], "['sim'] is a list, but cluster_defaults needs a string"),
    ],
)
def test_wrong_type_or_choice_is_named(var: str, value: Any, text: str) -> None:
    found = problems({"spark1": {var: value}})
    assert len(found) == 1, found
    assert found[0].startswith(f"variable {var}: "), found
    assert text in found[0], found


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("nccl_socket_ifname", "enp1s0f1np1"),
        ("roce_fabric_mtu", 9000),
        ("base_headless", False),
        ("base_packages", ["vim"]),
        ("hw_profile", "sim"),
        ("switch_ports", {"swp1": {"node": "spark1"}}),
        ("switch_ports", {"swp1s0": {"node": "spark1", "twin": "a", "breakout": "2x"}}),
        (
            "switch_ports",
            {"Ethernet4": {"node": "spark1", "breakout": "2x200G[100G,50G,40G,25G,10G,1G]"}},
        ),
        ("nccl_socket_ifname", None),
    ],
)
def test_right_type_passes(var: str, value: Any) -> None:
    assert problems({"spark1": {var: value}}) == []


def test_unknown_variable_suggests_the_known_one() -> None:
    found = inventory_rules.check_types(
        {"spark1": {"sglang_tp": 4, "fabric_mtu": 9000, "my_own_var": 1}}, SPECS
    )
    assert [(p.var, p.hint) for p in found] == [
        ("fabric_mtu", "did you mean roce_fabric_mtu?"),
        # A name close to none: refused all the same (every variable is declared).
        ("my_own_var", "no role or sparkctl reads it: docs/inventory.md lists every variable"),
        ("sglang_tp", "did you mean sglang_tp_size?"),
    ]


def test_a_value_only_one_host_has_names_that_host() -> None:
    found = problems({"spark1": {"roce_fabric_mtu": 9000}, "spark2": {"roce_fabric_mtu": "jumbo"}})
    assert found == [
        "host spark2: variable roce_fabric_mtu: 'jumbo' is a string, but "
        "roce_fabric needs an integer"
    ]


def test_facts_are_not_inventory_variables() -> None:
    # Cached facts appear among a host's variables (`packages`, `ansible_lsb`, ...)
    # and must not be mistaken for misspelt role variables.
    hv = {
        "ansible_facts": {"packages": {}, "sglang_mystery": "x", "lsb": {}},
        "packages": {},
        "sglang_mystery": "x",
        "ansible_lsb": {},
    }
    assert problems({"spark1": hv}) == []
    # The same name set by the inventory is an unknown role variable.
    assert problems({"spark1": {"sglang_mystery": "x"}}) == [
        "variable sglang_mystery: unknown variable"
    ]


def test_tp_and_nnodes_are_checked_although_their_spec_type_is_raw() -> None:
    assert SPECS["sglang_tp_size"][1]["type"] == "raw"
    sparks = [f"spark{i}" for i in range(1, 5)]
    base = {"fabric_a_subnet": "192.168.100.0/24", "fabric_b_subnet": "192.168.101.0/24"}
    hostvars = {
        h: {
            **base,
            "ansible_host": f"10.0.0.{i}",
            "node_rank": i - 1,
            "fabric_a_ip": f"192.168.100.{i}",
            "fabric_b_ip": f"192.168.101.{i}",
            "sglang_tp_size": "four",
            "sglang_nnodes": 4,
        }
        for i, h in enumerate(sparks, 1)
    }
    found = inventory_rules.check({"sparks": sparks}, hostvars, ROLES)
    assert [str(p) for p in found] == [
        "all hosts: variable sglang_tp_size: 'four' is a string, but sglang needs a positive "
        "integer"
    ]


def test_missing_cluster_settings_say_missing() -> None:
    # What the preflight play sees when the inventory leaves them out (role
    # defaults are not among hostvars; the controller reads the inventory alike).
    hostvars: dict[str, dict[str, Any]] = {
        "spark1": {
            "ansible_host": "10.0.0.1",
            "node_rank": 0,
            "fabric_a_ip": "192.168.100.1",
            "fabric_b_ip": "192.168.101.1",
            "fabric_a_subnet": "192.168.100.0/24",
        },
        "sw": {"ansible_host": "10.0.0.2"},
    }
    found = [
        str(p)
        for p in inventory_rules.check({"sparks": ["spark1"], "switches": ["sw"]}, hostvars, ROLES)
    ]
    assert found == [
        "all hosts: variable fabric_b_subnet: missing (the IPv4 subnet of twin b, in CIDR form "
        "like 192.168.100.0/24)",
        "host sw: variable switch_os: missing (the switch's OS: linux, nvue, sonic)",
    ]


# --------------------------------------------- the filter, loaded as Ansible does
@pytest.fixture(scope="module")
def filter_module() -> ModuleType:
    # The role's own file, loaded by path as Ansible loads a filter plugin.
    return load_file("sparkctl_inventory_filter_under_test", FILTER)


def test_filter_runs_topology_and_type_rules(filter_module: ModuleType) -> None:
    problems_filter = filter_module.FilterModule().filters()["sparkctl_inventory_problems"]
    hostvars = {
        "spark1": {
            "ansible_host": "10.0.0.1",
            "node_rank": 0,
            "fabric_a_ip": "192.168.100.1",
            "fabric_b_ip": "192.168.101.1",
            "fabric_a_subnet": "192.168.100.0/24",
            "fabric_b_subnet": "192.168.101.0/24",
            "nccl_socket_ifname": ["a", "b"],
            # what a play adds: never reported
            "groups": {},
            "hostvars": {},
            "playbook_dir": "/x",
            "omit": "__omit",
            "ansible_facts": {"getent_passwd": {}},
            "getent_passwd": {},
        },
    }
    assert problems_filter(
        hostvars, {"sparks": ["spark1"]}, str(ROLES), str(ROOT / "playbooks")
    ) == ["all hosts: variable nccl_socket_ifname: ['a', 'b'] is a list, but nccl needs a string"]


# ------------------------------------------------ the same through the controller
def test_controller_reports_a_list_where_a_string_belongs(tmp_path: Path) -> None:
    path = _sim_copy(tmp_path)
    (tmp_path / "group_vars" / "sim" / "zz_bad.yml").write_text("fabric_a_netdev: [a, b]\n")
    with pytest.raises(SparkctlError) as info:
        inventory.validate(path)
    assert info.value.code == ExitCode.BAD_INPUT
    assert (
        f"{tmp_path}/group_vars/sim/zz_bad.yml:1:18: all hosts: variable fabric_a_netdev: "
        "['a', 'b'] is a list, but cluster_defaults needs a string"
    ) in info.value.message


# --------------------------------------------------- plain ansible-playbook
# Unroutable TEST-NET-1 addresses, and an ssh that records that it was started:
# the preflight play is facts-free and runs on the controller, so neither may
# ever matter.
SSH_STUB = '#!/bin/sh\necho "$@" >> "$(dirname "$0")/ssh-was-run"\nexit 255\n'

BAD_TYPES = """
    # Ansible's argument spec would turn this list into the string "['a', 'b']".
    fabric_a_netdev: [a, b]
    nccl_socket_ifname: [a, b]
    roce_fabric_mtu: "9000x"
    sglang_tp_size: "four"
    sglang_tp: 4
    # A constraint (meta/constraints.yml) and a rule between variables: both paths too.
    switch_mtu_value: 9300
    sglang_port: 50003
"""

# (who, variable, what) of every problem the bad copy has, in both paths.
EXPECTED = [
    ("all hosts", "fabric_a_netdev", "['a', 'b'] is a list, but cluster_defaults needs a string"),
    ("all hosts", "nccl_socket_ifname", "['a', 'b'] is a list, but nccl needs a string"),
    ("all hosts", "roce_fabric_mtu", "'9000x' is a string, but roce_fabric needs an integer"),
    ("all hosts", "sglang_tp_size", "'four' is a string, but sglang needs a positive integer"),
    ("all hosts", "sglang_tp", "unknown variable (did you mean sglang_tp_size?)"),
    ("host spark2", "base_headless", "'yes' is a string, but base needs a boolean"),
    ("all hosts", "switch_mtu_value", "9300 is outside 1280..9216"),
    ("all hosts", "sglang_port", "50003 lies in the ranks' port range 50000-50015"),
]


def _sim_copy(tmp_path: Path) -> Path:
    shutil.copy(SIM, tmp_path / "sim.ini")
    shutil.copytree(SIM.parent / "group_vars", tmp_path / "group_vars")
    return tmp_path / "sim.ini"


def _unreachable_copy(tmp_path: Path) -> Path:
    """sim.ini with addresses nobody answers on and ssh replaced by a recorder."""
    path = _sim_copy(tmp_path)
    text = path.read_text()
    for old, new in (
        ("10.77.0.11", "192.0.2.250"),
        ("10.77.0.12", "192.0.2.251"),
        ("10.77.0.13", "192.0.2.252"),
        ("10.77.0.14", "192.0.2.253"),
        ("10.77.0.2 ", "192.0.2.254 "),
    ):
        assert old in text
        text = text.replace(old, new)
    path.write_text(text)
    stub = tmp_path / "bin" / "ssh"
    stub.parent.mkdir()
    stub.write_text(SSH_STUB)
    stub.chmod(0o755)
    # The recorder is found first on PATH (_ansible_playbook): an inventory may not name
    # the ssh program (ansible_ssh_executable is refused).
    (tmp_path / "group_vars" / "all.yml").write_text("ansible_timeout: 2\n")
    return path


def _ansible_playbook(
    tmp_path: Path, inventory_path: Path, playbook: str
) -> subprocess.CompletedProcess[str]:
    exe = ansible_playbook()
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "SPARKCTL_STATE_DIR": str(tmp_path / "state"),
        # _unreachable_copy's ssh recorder, before any real ssh
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return subprocess.run(
        [str(exe), "-i", str(inventory_path), str(ROOT / "playbooks" / playbook)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
        check=False,
    )


def _failures(stdout: str) -> list[tuple[str, dict[str, Any]]]:
    """(host, result) of every ``fatal: [host]: FAILED! => {...}`` line."""
    found = []
    for line in stdout.splitlines():
        if line.startswith("fatal: [") and "FAILED! => " in line:
            host = line[len("fatal: [") : line.index("]")]
            found.append((host, json.loads(line.split("FAILED! => ", 1)[1])))
    return found


def _assert_no_host_contacted(tmp_path: Path, proc: subprocess.CompletedProcess[str]) -> None:
    assert not (tmp_path / "bin" / "ssh-was-run").exists(), proc.stdout
    assert "UNREACHABLE" not in proc.stdout
    assert "unreachable=0" in proc.stdout
    assert "unreachable=1" not in proc.stdout


@pytest.fixture(scope="module")
def site_with_bad_types(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str], str]:
    """One run of site.yml on a copy with every bad type of EXPECTED; the controller's report."""
    tmp_path = tmp_path_factory.mktemp("bad-types")
    path = _unreachable_copy(tmp_path)
    (tmp_path / "group_vars" / "sim" / "zz_bad.yml").write_text(textwrap.dedent(BAD_TYPES).lstrip())
    path.write_text(
        path.read_text().replace(
            "spark2 ansible_host=192.0.2.251", "spark2 ansible_host=192.0.2.251 base_headless=yes"
        )
    )
    proc = _ansible_playbook(tmp_path, path, "site.yml")
    with pytest.raises(SparkctlError) as info:
        inventory.validate(path)
    assert info.value.code == ExitCode.BAD_INPUT
    return tmp_path, proc, info.value.message


def test_site_stops_in_preflight_without_contacting_a_host(
    site_with_bad_types: tuple[Path, subprocess.CompletedProcess[str], str],
) -> None:
    tmp_path, proc, _ = site_with_bad_types
    assert proc.returncode == 2, proc.stdout + proc.stderr
    failures = _failures(proc.stdout)
    assert len(failures) == 1, proc.stdout  # run_once, delegated to the controller
    assert failures[0][1]["assertion"] == "__preflight_problems | length == 0"
    assert (
        "TASK [sparkctl.spark.preflight : Preflight | Inventory follows the rules]" in proc.stdout
    )
    # Nothing after the preflight play ran.
    plays = [ln.split(" ***", 1)[0] for ln in proc.stdout.splitlines() if ln.startswith("PLAY [")]
    assert plays == ["PLAY [Preflight]"], plays
    _assert_no_host_contacted(tmp_path, proc)


@pytest.mark.parametrize(("who", "var", "text"), EXPECTED, ids=[e[1] for e in EXPECTED])
def test_preflight_names_host_and_variable_like_the_controller(
    site_with_bad_types: tuple[Path, subprocess.CompletedProcess[str], str],
    who: str,
    var: str,
    text: str,
) -> None:
    tmp_path, proc, controller = site_with_bad_types
    failures = _failures(proc.stdout)
    assert failures, proc.stdout
    message = str(failures[0][1]["msg"])
    problem = f"{who}: variable {var}: {text}"
    assert problem in message, message
    assert problem in controller, controller
    # Both name the file the value comes from.
    where = "sim.ini" if who.startswith("host ") else "group_vars/sim/zz_bad.yml"
    for report in (message, controller):
        assert (
            f"{tmp_path}/{where}:"
            in report.split(problem)[0].rsplit(";", 1)[-1].rsplit("\n", 1)[-1]
        ), report


def test_preflight_reports_what_the_controller_reports_and_no_more(
    site_with_bad_types: tuple[Path, subprocess.CompletedProcess[str], str],
) -> None:
    _, proc, controller = site_with_bad_types
    message = str(_failures(proc.stdout)[0][1]["msg"])
    assert message.count(": variable ") == len(EXPECTED) == controller.count(": variable ")


def test_unknown_hw_profile_stops_the_preflight_play_with_its_choices(tmp_path: Path) -> None:
    path = _unreachable_copy(tmp_path)
    cluster = tmp_path / "group_vars" / "sim" / "cluster.yml"
    cluster.write_text(cluster.read_text().replace("hw_profile: sim", "hw_profile: dgx_sparc"))
    proc = _ansible_playbook(tmp_path, path, "preflight.yml")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # The argument spec of cluster_defaults (preflight depends on it) refuses the
    # value before the preflight tasks run: no templating error from cluster_hw.
    assert "hw_profile must be one of: dgx_spark, sim, got: dgx_sparc" in proc.stdout
    assert "has no attribute" not in proc.stdout + proc.stderr
    assert {host for host, _ in _failures(proc.stdout)} == {
        "spark1",
        "spark2",
        "spark3",
        "spark4",
        "lab-switch",
    }
    _assert_no_host_contacted(tmp_path, proc)


def test_valid_copy_passes_preflight_without_contacting_a_host(tmp_path: Path) -> None:
    path = _unreachable_copy(tmp_path)
    proc = _ansible_playbook(tmp_path, path, "preflight.yml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed=0" in proc.stdout
    _assert_no_host_contacted(tmp_path, proc)
