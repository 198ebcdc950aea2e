"""The sink filters: every value a role writes into a file passes one that refuses
what the file's format cannot hold (sparkctl/sinks.py, linked into the roles).

Each filter is called directly with hostile values (newline, NUL, ``$``, quotes,
lists, mappings, secrets), as Ansible loads it (by its path in a role); the
environment lines it accepts are read back by a real ``sh``; and one real
``ansible-playbook`` run writes the roles' own templates with
``ansible.builtin.template``: a hostile value fails its task and writes no file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
import yaml

from tests.unit.pathload import load_file

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles"
SINKS = load_file("sink_filters", ROLES.parent / "plugins" / "filter" / "sparkctl_sinks.py")
SWITCH = load_file("sink_switch_mtu", ROLES.parent / "plugins" / "filter" / "switch_mtu.py")
PORT_MTU = load_file(
    "sink_switch_port_mtu", ROLES.parent / "plugins" / "modules" / "switch_port_mtu.py"
)
Err = SINKS.AnsibleFilterError

SECRET = "hf_sinkSecretValue0123456789"  # noqa: S105 - a marker that must never be echoed
ALL_READERS = ["nccl", "systemd", "docker", "sh", "sparkctl"]


def refused(call: Any, *args: Any, says: str = "", **kwargs: Any) -> str:
    """The filter's refusal message (the test fails if the filter writes instead)."""
    with pytest.raises(Err) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert says in message, message
    return message


# -------------------------------------------------------------------- sysctl
def test_sysctl_lines_are_integers_and_plain_names() -> None:
    line = SINKS.sparkctl_sysctl_line
    assert line("net.ipv4.conf.all.rp_filter", 2) == "net.ipv4.conf.all.rp_filter = 2"
    assert line("net.ipv4.conf.enP2p1s0f1np1.arp_ignore", "1") == (
        "net.ipv4.conf.enP2p1s0f1np1.arp_ignore = 1"
    )
    assert line("net.ipv4.conf.all.x", -1) == "net.ipv4.conf.all.x = -1"


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("net.ipv4.conf.all.rp_filter", "0\nkernel.core_pattern = |/tmp/x", "not an integer"),
        ("net.ipv4.conf.all.rp_filter", "0\nkernel.modprobe = /tmp/x", "not an integer"),
        ("net.ipv4.conf.all.rp_filter", "1\x00", "not an integer"),
        ("net.ipv4.conf.all.rp_filter", "$(id)", "not an integer"),
        ("net.ipv4.conf.all.rp_filter", True, "not an integer"),
        ("net.ipv4.conf.all.rp_filter", 1.5, "not an integer"),
        ("net.ipv4.conf.all.rp_filter", [1], "a list is not an integer"),
        ("net.ipv4.conf.all.rp_filter", {"a": 1}, "a mapping is not an integer"),
        ("net.ipv4.conf.all.rp_filter", None, "not an integer"),
        ("net.ipv4.conf.all.rp_filter\nkernel.modprobe", 1, "not a part of a sysctl name"),
        ("net.ipv4.conf.all.RP_filter", 1, "is not [a-z0-9_] only"),
        ("net.ipv4.conf.all.rp_filter\n", 1, "is not [a-z0-9_] only"),
        ("net.ipv4.conf.a b.rp_filter", 1, "not a part of a sysctl name"),
        ("rp_filter", 1, "is not [a-z0-9_] only"),
    ],
)
def test_sysctl_refuses(name: str, value: Any, says: str) -> None:
    message = refused(SINKS.sparkctl_sysctl_line, name, value, "roce_fabric_sysctls", says=says)
    assert message.startswith("roce_fabric_sysctls")


def test_sysctl_items_check_every_key_and_value() -> None:
    items = SINKS.sparkctl_sysctl_items(
        {"rp_filter": 2, "arp_ignore": "1"}, ["net.ipv4.conf.all", "net.ipv4.conf.fab0"]
    )
    assert items == [
        ["net.ipv4.conf.all.arp_ignore", "1"],
        ["net.ipv4.conf.all.rp_filter", "2"],
        ["net.ipv4.conf.fab0.arp_ignore", "1"],
        ["net.ipv4.conf.fab0.rp_filter", "2"],
    ]
    refused(SINKS.sparkctl_sysctl_items, "rp_filter=0", ["net"], "roce_fabric_sysctls")
    refused(SINKS.sparkctl_sysctl_items, {"rp_filter": "0\nx = 1"}, ["net.ipv4.conf.all"])


# ------------------------------------------------------------------ env files
def test_env_line_writes_plain_values_as_they_are() -> None:
    line = SINKS.sparkctl_env_line
    assert line("NCCL_IB_HCA", "=rocep1s0f1", ALL_READERS) == "NCCL_IB_HCA==rocep1s0f1"
    assert line("NCCL_IB_GID_INDEX", 3, ALL_READERS) == "NCCL_IB_GID_INDEX=3"
    assert line("X", "", ALL_READERS) == "X="
    assert line("OMPI_MCA_btl_tcp_if_include", "enp1s0f1np1") == (
        "OMPI_MCA_btl_tcp_if_include=enp1s0f1np1"
    )


HOSTILE_ENV = [
    ("NCCL_DEBUG", "INFO\nLD_PRELOAD=/tmp/x.so", "newline"),
    ("NCCL_DEBUG", "INFO\rX=1", "newline"),
    ("NCCL_DEBUG", "INFO\x00X=1", "newline"),
    ("NCCL_DEBUG", "INFO\u2028X=1", "newline"),
    ("SGLANG_X", "$(touch /tmp/pwned)", "sh would not read"),
    ("SGLANG_X", "`id`", "sh would not read"),
    ("SGLANG_X", "a b", "sh would not read"),
    ("SGLANG_X", "'quoted'", "sh would not read"),
    ("SGLANG_X", '"quoted"', "sh would not read"),
    ("SGLANG_X", "a\\b", "sh would not read"),
    ("SGLANG_X", "x;reboot", "sh would not read"),
    ("SGLANG_X", "#x", "sh would not read"),
    ("SGLANG_X", ["a", "b"], "is a list: only a string or a number"),
    ("SGLANG_X", {"a": "b"}, "is a mapping: only a string or a number"),
    ("SGLANG_X", None, "not a string or a number"),
    ("SGLANG_X", True, "not a string or a number"),
    ("reboot\n", "1", "is not a variable name"),
    ("A-B", "1", "is not a variable name"),
    ("1A", "1", "is not a variable name"),
    ("", "1", "is not a variable name"),
    ("HF_TOKEN", "hf_x", "names a secret"),
    ("OPENAI_API_KEY", "sk", "names a secret"),
    ("DB_PASSWORD", "pw", "names a secret"),
    ("APP_SECRET", "s", "names a secret"),
    ("GITHUB_TOKEN", "t", "names a secret"),
]


@pytest.mark.parametrize(("name", "value", "says"), HOSTILE_ENV)
def test_env_line_refuses(name: str, value: Any, says: str) -> None:
    message = refused(
        SINKS.sparkctl_env_line, name, value, ALL_READERS, "sglang_env_extra", says=says
    )
    assert message.startswith("sglang_env_extra: ")
    # Lists and mappings are named by their type, never printed.
    if isinstance(value, (list, dict)):
        assert "'a'" not in message and "'b'" not in message, message


@pytest.mark.parametrize(
    "value",
    [SECRET, f"{SECRET}\n", f" {SECRET}", [SECRET], {"k": SECRET}, f"{SECRET}\x00"],
)
def test_a_secret_is_never_in_a_message(value: Any) -> None:
    """The secrets file (launcher only) refuses a key it would read otherwise, and
    says why without the key; a secret's name in another file is refused the same."""
    for readers, secrets in ((["launcher"], True), (ALL_READERS, False)):
        try:
            out = SINKS.sparkctl_env_line("SGLANG_API_KEY", value, readers, secrets=secrets)
        except Err as exc:
            assert SECRET not in str(exc), exc
            assert "SGLANG_API_KEY" in str(exc)
        else:
            assert (readers, value) == (["launcher"], SECRET)
            assert out == f"SGLANG_API_KEY={SECRET}"


def test_preflight_lists_the_problems_without_a_secret() -> None:
    """The roles' preflight judges the environment by the same rules, one problem
    per variable, and shows no secret and no list or mapping item."""
    env = {"HF_TOKEN": SECRET, "SGLANG_X": [SECRET], "SGLANG_Y": {"k": SECRET}, "OK": "1"}
    args = load_file("sink_sglang_args2", ROLES.parent / "plugins" / "filter" / "sglang_args.py")
    nccl = load_file("sink_nccl_env", ROLES.parent / "plugins" / "filter" / "nccl_env.py")
    for problems in (
        SINKS.sparkctl_env_problems(env),
        args.sglang_env_problems(env),
        nccl.nccl_env_problems(env),
    ):
        assert len(problems) == 3, problems
        assert not [p for p in problems if SECRET in p]
        assert [p.split(" ", 1)[0] for p in problems] == ["HF_TOKEN", "SGLANG_X", "SGLANG_Y"]
    assert SINKS.sparkctl_env_problems([SECRET]) == [
        "the environment is a list, not a mapping NAME -> value"
    ]


def test_the_launcher_reads_what_the_secrets_line_holds(tmp_path: Path) -> None:
    """Anything but a line break or a blank at an end is the launcher's key as written."""
    key = "k$e'y\"\\`;#%="
    line = SINKS.sparkctl_env_line("SGLANG_API_KEY", key, ["launcher"], secrets=True)
    launcher = load_file("sink_launcher", ROLES / "sglang" / "files" / "sglang_launcher.py")
    assert line == f"SGLANG_API_KEY={key}"
    path = tmp_path / "secrets.env"
    path.write_text(f"# comment\n{line}\n")
    assert launcher.read_key(str(path)) == key


def test_readers_decide_what_can_be_written() -> None:
    line = SINKS.sparkctl_env_line
    # systemd and docker only: interior blanks are the same value for both...
    assert line("X", "a b", ["systemd", "docker"]) == "X=a b"
    # ...a blank at an end, a quote or a backslash is not (systemd strips/unquotes).
    for value in (" a", "a ", "'a'", 'a"b', "a\\b"):
        refused(line, "X", value, ["systemd", "docker"])
    # systemd and sh only: single quotes read alike in both.
    assert line("X", 'a b $HOME `id` \\ "', ["systemd", "sh"]) == "X='a b $HOME `id` \\ \"'"
    refused(line, "X", "it's", ["systemd", "sh"], says="single quote")
    # NCCL reads at most 1023 bytes of a value.
    assert line("NCCL_X", "a" * 1023, ["nccl"]) == "NCCL_X=" + "a" * 1023
    refused(line, "NCCL_X", "a" * 1024, ["nccl"], says="1023 bytes")
    refused(line, "X", "1", "sh", says="readers must be a list")
    refused(line, "X", "1", ["bash"], says="unknown environment-file readers")


def test_placeholders_pass_only_as_given() -> None:
    line = SINKS.sparkctl_env_line
    holder = {"NCCL_IB_GID_INDEX": "<detected-on-the-node-at-provision>"}
    assert line("NCCL_IB_GID_INDEX", holder["NCCL_IB_GID_INDEX"], placeholders=holder) == (
        "NCCL_IB_GID_INDEX=<detected-on-the-node-at-provision>"
    )
    refused(line, "NCCL_IB_GID_INDEX", "<detected-on-the-node-at-provision>")
    refused(line, "NCCL_X", "<detected-on-the-node-at-provision>", placeholders=holder)


@pytest.mark.parametrize(
    ("readers", "value"),
    [
        (ALL_READERS, "=rocep1s0f0,roceP2p1s0f1"),
        (ALL_READERS, "^mlx5_0:1"),
        (ALL_READERS, "/var/lib/sparkctl/x@y+z%1"),
        (["systemd", "sh"], 'a b $HOME `id` ; # \\ " * ?'),
        (["sh"], "~user/x"),
    ],
)
def test_sh_reads_back_what_the_filter_writes(readers: list[str], value: str) -> None:
    """A real sh sources the line and prints exactly the value (what `set -a; .` does)."""
    line = SINKS.sparkctl_env_line("SPARK_X", value, readers)
    proc = subprocess.run(
        ["sh", "-c", 'eval "$1"; printf %s "$SPARK_X"', "sh", line],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
        env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"},
    )
    assert proc.stdout == value
    if set(readers) & {"docker", "nccl", "sparkctl"}:  # literal readers: the rest of the line
        assert line.partition("=")[2] == value


# ------------------------------------------------------------------- comments
def test_comments_are_one_line() -> None:
    assert SINKS.sparkctl_comment("Ansible managed") == "Ansible managed"
    assert SINKS.sparkctl_comment(9000, "roce_fabric_mtu") == "9000"
    refused(SINKS.sparkctl_comment, "x\nNCCL_X=1", "purpose", says="newline")
    refused(SINKS.sparkctl_comment, "x\u0085y", "purpose", says="newline")
    refused(SINKS.sparkctl_comment, "/a=b", "purpose", no_equals=True, says="has '='")
    refused(SINKS.sparkctl_comment, ["x"], "purpose", says="a list")


# ------------------------------------------------------------- systemd units
def test_unit_values() -> None:
    value = SINKS.sparkctl_unit_value
    assert value("sparkctl-sglang", "sglang_user", "user") == "sparkctl-sglang"
    assert value(30, "sglang_restart_sec", "int") == "30"
    assert value("/etc/sparkctl/nccl.env", "sglang_env_file", "path") == "/etc/sparkctl/nccl.env"
    for bad, kind in [
        ("sparkctl\nExecStartPre=/bin/sh -c id", "user"),
        ("root\\", "text"),
        ("%h/x", "path"),
        (" x", "text"),
        ("a b", "user"),
        ("relative/env", "path"),
        ("/etc/../tmp/x", "path"),
        ("/etc/a b", "path"),
        ("30\nExecStartPre=/bin/sh", "int"),
        (True, "int"),
        (-1, "int"),
        ([1], "text"),
    ]:
        refused(value, bad, "v", kind, says="v: ")
    refused(value, "x", "v", "shell", says="unknown unit value kind")


def test_exec_line_escapes_every_word_and_refuses_a_line_break() -> None:
    line = SINKS.sparkctl_exec_line
    argv = ["/usr/bin/python3", "-c", 'print("$HOME", 50%)', ";", "a;b", "", "\\n", "it's"]
    assert line(argv) == (
        '/usr/bin/python3 -c "print(\\"$$HOME\\", 50%%)" ";" "a;b" "" "\\\\n" "it\'s"'
    )
    assert line(["/usr/bin/docker", "run", "--volume", "/a:/a:ro"]) == (
        "/usr/bin/docker run --volume /a:/a:ro"
    )
    refused(line, ["/bin/x", "--enable-metrics\nExecStartPre=/bin/sh -c id"], says="newline")
    refused(line, ["/bin/x", "a\x00b"], says="newline")
    refused(line, ["-/bin/x"], says="absolute path")
    refused(line, ["sh", "-c", "id"], says="absolute path")
    refused(line, "/bin/x -y", says="expected an argv list")
    refused(line, [], says="empty")
    refused(line, ["/bin/x", ["nested"]], says="a list")


def test_sglang_exec_line_is_the_sink_filter() -> None:
    args = load_file("sink_sglang_args", ROLES.parent / "plugins" / "filter" / "sglang_args.py")
    assert args.sglang_exec_line(["/bin/x", "a b"]) == '/bin/x "a b"'
    with pytest.raises(Exception, match="sglang unit's command line: an argument holds a newline"):
        args.sglang_exec_line(["/bin/x", "--x\nExecStartPre=/bin/sh"])


# ------------------------------------------------ words of config-file lines
@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        (
            "host",
            ["ntp.ubuntu.com", "spark1-a", "10.77.0.11"],
            ["a b", "-oProxyCommand=x", "*", "h,i"],
        ),
        ("ipv4", ["192.168.100.11", "10.0.0.0"], ["192.168.100.256", "1.2.3", "10.0.0.1 x"]),
        ("user", ["sparkctl", "475"], ["root\n    ProxyCommand sh", "a b", ""]),
        ("glob", ["linux-modules-nvidia-580-open-*", "libnccl2"], ["a b", "x\ny", "-x"]),
        (
            "path",
            ["/var/lib/sparkctl/models", "/a/.cache"],
            ["/", "rel", "/a/../b", "/a:/b", "/a,b"],
        ),
        ("port_range", ["30000", "32768-60999", 50000], ["30000\n accept", "1-2 }", " 1", "1,2"]),
        ("word", ["580", "a=b:c/d@e+f,g"], ["-x", "a b", "a#b", "$x", "x\u2028y"]),
    ],
)
def test_config_words(kind: str, good: list[str], bad: list[Any]) -> None:
    for value in good:
        assert SINKS.sparkctl_word(value, "w", kind) == str(value)
    for value in [*bad, ["x"], {"x": 1}, None, True]:
        refused(SINKS.sparkctl_word, value, "w", kind, says="w: ")


def test_lists_are_lists() -> None:
    """A string is refused, not iterated into one item per character (a string
    sglang_model_mounts once became `--volume /:/:ro`); items checked by kind."""
    assert SINKS.sparkctl_list(["/models"], "sglang_model_mounts", "path") == ["/models"]
    assert SINKS.sparkctl_list(("a", 1), "x") == ["a", 1]
    for bad in ("/models", {"/models": 1}, None, 1):
        refused(SINKS.sparkctl_list, bad, "sglang_model_mounts", "path", says="not a list")
    refused(SINKS.sparkctl_list, ["/"], "sglang_model_mounts", "path", says="mounts[0]: ")
    refused(SINKS.sparkctl_list, ["/a:/b:rw"], "sglang_model_mounts", "path", says="absolute")


def test_sglang_extra_args_are_a_list_of_words() -> None:
    args = load_file("sink_sglang_args3", ROLES.parent / "plugins" / "filter" / "sglang_args.py")
    nodes = [{"name": "spark1", "node_rank": 0, "fabric_a_ip": "192.168.100.11"}]
    launch = {
        "model_path": "/m",
        "tp_size": 1,
        "nnodes": 1,
        "dist_port": 50000,
        "port": 30000,
    }
    assert args.sglang_launch_args(nodes, 0, **launch, extra_args=["--x", 1])[-2:] == ["--x", "1"]
    for bad in ("--trust-remote-code", {"--x": 1}, [["--x"]], [{"a": 1}], [None], [True]):
        with pytest.raises(args.AnsibleFilterError, match="sglang_extra_args"):
            args.sglang_launch_args(nodes, 0, **launch, extra_args=bad)


def test_integers_and_quoted_strings() -> None:
    assert SINKS.sparkctl_int(10, "base_chrony_local_stratum", 1, 15) == "10"
    assert SINKS.sparkctl_int("7", "s", 1, 15) == "7"
    for bad in ("10\nallow all", True, 1.0, "1e3", [1], 16, 0):
        refused(SINKS.sparkctl_int, bad, "s", 1, 15, says="s: ")
    assert SINKS.sparkctl_quoted("^linux-image-.*$", "p") == "^linux-image-.*$"
    for bad in ('x"; APT::Update::Pre-Invoke {"touch /tmp/x', "x\\", "x\ny"):
        refused(SINKS.sparkctl_quoted, bad, "p", says="p: ")


# ---------------------------------------------------------------------- YAML
class _Tagged(str):
    """Stands in for Ansible's tagged strings, which the safe dumper does not know."""


def test_yaml_is_dumped_so_no_value_adds_a_key() -> None:
    doc = {
        "network": {
            "version": 2,
            "ethernets": {
                _Tagged("fab0\n    evil: {}"): {
                    "mtu": 9000,
                    "addresses": [_Tagged("10.0.0.1/24\n      routes: [{to: default}]")],
                    "link-local": [],
                    "dhcp4": False,
                }
            },
        }
    }
    text = SINKS.sparkctl_yaml(doc)
    assert yaml.safe_load(text) == json.loads(json.dumps(doc))
    nice = SINKS.sparkctl_yaml({"a": {"b": [1, "x"], "c": []}})
    assert nice == "a:\n  b:\n    - 1\n    - x\n  c: []\n"
    refused(SINKS.sparkctl_yaml, {1: "x"}, says="is not text")
    refused(SINKS.sparkctl_yaml, {"a": object()}, says="a is a object")


# ------------------------------------------------------ switch CLI arguments
@pytest.mark.parametrize(
    ("os_name", "good", "bad"),
    [
        ("nvue", ["swp1", "swp32s3"], ["swp1,swp2", "swp1 ;reboot", "eth0", "-swp1", "swp1\n"]),
        ("sonic", ["Ethernet0", "Ethernet124"], ["Eth1/1", "Ethernet0;x", "Ethernet 0"]),
        ("linux", ["swp1", "enp1s0f1np1", "br-fab.10"], ["-x", "../etc", "a:b", "a/b", "."]),
    ],
)
def test_switch_port_names_per_os(os_name: str, good: list[str], bad: list[str]) -> None:
    assert sorted(SWITCH.port_names(dict.fromkeys(good), os_name)) == sorted(good)
    for name in bad:
        with pytest.raises(SWITCH.AnsibleFilterError, match=r"switch_ports: .* is not"):
            SWITCH.port_names({name: {}}, os_name)
    fabric = {"mtu": 9216, "speed": "200G", "autoneg": False, "vlan": 100, "bridge": "br_default"}
    if os_name == "nvue":
        with pytest.raises(SWITCH.AnsibleFilterError, match="NVUE switch port"):
            SWITCH.nvue_document([*good, bad[0]], fabric)
    if os_name == "sonic":
        with pytest.raises(SWITCH.AnsibleFilterError, match="SONiC port name"):
            SWITCH.sonic_commands([*good, bad[0]], fabric)


def test_linux_switch_module_refuses_odd_names_and_mtus(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    for ports, mtu in ((["../../etc"], 9000), (["-x"], 9000), (["eth0:1"], 9000)):
        with pytest.raises(PORT_MTU.PortMtuError, match="not a Linux interface name"):
            PORT_MTU.apply(ports, mtu, root=tmp_path, run=ran.append, check_mode=False)
    bad_mtus: tuple[Any, ...] = (True, "9000", 67, 70000)
    for bad_mtu in bad_mtus:
        with pytest.raises(PORT_MTU.PortMtuError, match=r"not an integer in 68\.\.65535"):
            PORT_MTU.apply(["swp1"], bad_mtu, root=tmp_path, run=ran.append, check_mode=False)
    assert ran == []


# -------------------------------------------- through ansible-playbook itself
CASES: dict[str, dict[str, Any]] = {
    # name: template (role/templates/...), variables; "ok" cases must be written.
    "sysctl_ok": {
        "src": "roce_fabric/sysctl-roce.conf.j2",
        "vars": {"roce_fabric_sysctls": {"rp_filter": 2}},
    },
    "sysctl_newline": {
        "src": "roce_fabric/sysctl-roce.conf.j2",
        "vars": {"roce_fabric_sysctls": {"rp_filter": "0\nkernel.core_pattern = |/bin/sh"}},
        "says": "roce_fabric_sysctls: ",
    },
    "netplan_ok": {
        "src": "roce_fabric/netplan-cx7.yaml.j2",
        "vars": {"roce_fabric_routes_a": [{"to": "10.10.0.0/16", "via": "192.168.100.1"}]},
    },
    "netplan_newline": {
        "src": "roce_fabric/netplan-cx7.yaml.j2",
        "vars": {"fabric_a_netdev": "fab0:\n    evil: {}"},
        "says": "fabric_a_netdev: ",
    },
    "netplan_mapping": {
        "src": "roce_fabric/netplan-cx7.yaml.j2",
        "vars": {"roce_fabric_mtu": {"9000": None, "renderer": "NetworkManager"}},
        "says": "roce_fabric_mtu: ",
    },
    "netplan_route_list": {
        "src": "roce_fabric/netplan-cx7.yaml.j2",
        "vars": {"roce_fabric_routes_b": [{"to": ["0.0.0.0/0"], "via": "192.168.101.1"}]},
        "says": "roce_fabric_routes_b: to: ",
    },
    "nccl_env_shell": {
        "src": "nccl/nccl-env.j2",
        "vars": {
            "__nccl_env_render": {"NCCL_DEBUG": "$(touch @MARKER@)"},
            "__nccl_env_purpose": "x",
        },
        "says": "nccl environment (nccl_env_extra, nccl_env_overrides): NCCL_DEBUG=",
    },
    "sglang_env_secret": {
        "src": "sglang/sglang-env.j2",
        "vars": {"__sglang_env_render": {"HF_TOKEN": SECRET}, "__sglang_env_purpose": "x"},
        "says": "HF_TOKEN names a secret",
    },
    "sglang_env_list": {
        "src": "sglang/sglang-env.j2",
        "vars": {"__sglang_env_render": {"SGLANG_X": [SECRET]}, "__sglang_env_purpose": "x"},
        "says": "SGLANG_X is a list",
    },
    "switch_unit_newline": {
        "src": "switch_mtu/switch-port-mtu.service.j2",
        "vars": {"_switch_mtu_state_file": "/etc/x.json\nExecStartPre=/bin/sh -c id"},
        "says": "_switch_mtu_state_file: ",
    },
}
BASE_VARS: dict[str, Any] = {
    "fabric_a_netdev": "fab0",
    "fabric_b_netdev": "fab1",
    "fabric_a_ip": "192.168.100.11",
    "fabric_b_ip": "192.168.101.11",
    "fabric_a_subnet": "192.168.100.0/24",
    "fabric_b_subnet": "192.168.101.0/24",
    "roce_fabric_mtu": 9000,
    "roce_fabric_sysctls": {"rp_filter": 2},
    "roce_fabric_routes_a": [],
    "roce_fabric_routes_b": [],
    "roce_fabric_ibdev_a": "rocep1s0f1",
    "roce_fabric_ibdev_b": "roceP2p1s0f1",
    "_switch_mtu_python": "/usr/bin/python3",
    "_switch_mtu_script": "/usr/local/lib/sparkctl/switch_port_mtu.py",
    "_switch_mtu_state_file": "/etc/sparkctl/switch-ports.json",
}


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One ansible-playbook run: each case templated by ansible.builtin.template
    (errors ignored, results recorded); returns the output dir and the results."""
    ansible_playbook = Path(sys.executable).with_name("ansible-playbook")
    if not ansible_playbook.exists():
        pytest.skip("ansible-playbook not installed beside this Python")
    base = tmp_path_factory.mktemp("sinks")
    marker = base / "marker"
    cases = json.loads(json.dumps(CASES).replace("@MARKER@", str(marker)))
    tasks = []
    for name, case in cases.items():
        role, _, template = case["src"].partition("/")
        tasks.append(
            {
                "name": name,
                "ansible.builtin.template": {
                    "src": str(ROLES / role / "templates" / template),
                    "dest": f"{base}/out/{name}",
                    "mode": "0644",
                },
                # The values come from a vars file, as from an inventory: the
                # play's text (which Ansible quotes around a failed task) has
                # only their names.
                "vars": {k: f"{{{{ cases['{name}']['{k}'] }}}}" for k in case["vars"]},
                "register": f"r_{name}",
                "ignore_errors": True,
            }
        )
    pairs = ", ".join(f"'{n}': [r_{n} is failed, r_{n}.msg | default('')]" for n in cases)
    tasks.append(
        {
            "name": "results",
            "ansible.builtin.copy": {
                "content": "{{ {" + pairs + "} | to_json }}",
                "dest": f"{base}/results.json",
                "mode": "0644",
            },
        }
    )
    (base / "out").mkdir()
    play = [
        {
            "name": "sinks",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [
                str(ROLES / "roce_fabric" / "vars" / "main.yml"),
                str(base / "cases.yml"),
            ],
            "vars": BASE_VARS,
            "tasks": tasks,
        }
    ]
    (base / "play.yml").write_text(yaml.safe_dump(play))
    (base / "cases.yml").write_text(
        yaml.safe_dump({"cases": {n: c["vars"] for n, c in cases.items()}})
    )
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(base / "none.cfg"),
        "ANSIBLE_FILTER_PLUGINS": str(ROLES.parent / "plugins" / "filter"),
        "ANSIBLE_HOME": str(base / "home"),
        "ANSIBLE_LOCAL_TEMP": str(base / "tmp"),
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
    }
    proc = subprocess.run(
        [
            str(ansible_playbook),
            *("-i", "localhost,", "-c", "local", str(base / "play.yml")),
            *("-e", f"ansible_python_interpreter={sys.executable}"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
        cwd=base,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert not marker.exists()
    assert SECRET not in proc.stdout + proc.stderr
    return base / "out", json.loads((base / "results.json").read_text())


@pytest.mark.parametrize("name", list(CASES))
def test_ansible_templates_refuse_a_hostile_value_and_write_nothing(
    played: tuple[Path, dict[str, Any]], name: str
) -> None:
    out, results = played
    failed, msg = results[name]
    if "says" not in CASES[name]:
        assert not failed, msg
        assert (out / name).is_file()
        return
    assert failed and CASES[name]["says"] in msg, msg
    assert SECRET not in msg
    assert not (out / name).exists()


def test_ansible_wrote_the_valid_files_as_their_formats_read_them(
    played: tuple[Path, dict[str, Any]],
) -> None:
    out, _ = played
    sysctl = (out / "sysctl_ok").read_text().splitlines()
    assert sysctl[1:] == [
        f"net.ipv4.conf.{iface}.rp_filter = 2" for iface in ("all", "default", "fab0", "fab1")
    ]
    netplan = yaml.safe_load((out / "netplan_ok").read_text())
    fab0 = {
        "dhcp4": False,
        "dhcp6": False,
        "link-local": [],
        "mtu": 9000,
        "addresses": ["192.168.100.11/24"],
        "routes": [{"to": "10.10.0.0/16", "via": "192.168.100.1"}],
    }
    assert netplan == {"network": {"version": 2, "ethernets": {"fab0": fab0, "fab1": ANY}}}
    # The layout the template had when it pasted text: lists indented under their key.
    assert (
        "    fab0:\n      dhcp4: false\n      dhcp6: false\n      link-local: []\n"
        "      mtu: 9000\n      addresses:\n        - 192.168.100.11/24\n"
        "      routes:\n        - to: 10.10.0.0/16\n          via: 192.168.100.1\n"
    ) in (out / "netplan_ok").read_text()
