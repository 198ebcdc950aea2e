"""The sglang role: its interface, the launch-command and firewall filters, the templates.

Read-back parsers are tested on output captured from the rehearsal lab's nodes
(systemd 252 and nftables 1.0.6 of Debian bookworm), quoted below as printed.
"""

# ruff: noqa: E501 -- captured command output is quoted as printed (long lines)
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.rules import relations
from tests.unit.pathload import load_file
from tests.unit.ports import free_port
from tests.unit.role_templates import template_env

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "ansible_collections" / "sparkctl" / "spark" / "roles" / "sglang"


_load = load_file


args_f = _load("sglang_args_filters", ROLE.parents[1] / "plugins" / "filter" / "sglang_args.py")
sinks_f = _load("sglang_sink_filters", ROLE.parents[1] / "plugins" / "filter" / "sparkctl_sinks.py")
fw = _load("sglang_firewall_filters", ROLE.parents[1] / "plugins" / "filter" / "sglang_firewall.py")

# The rehearsal lab's inventory (inventory/sim.ini), as the role's _sglang_nodes builds it.
SIM_NODES = [
    {"name": "spark1", "node_rank": 0, "fabric_a_ip": "192.168.100.11"},
    {"name": "spark2", "node_rank": 1, "fabric_a_ip": "192.168.100.12"},
    {"name": "spark3", "node_rank": 2, "fabric_a_ip": "192.168.100.13"},
    {"name": "spark4", "node_rank": 3, "fabric_a_ip": "192.168.100.14"},
]
LAUNCH = {
    "model_path": "/var/lib/sparkctl/models/current",
    "tp_size": 4,
    "nnodes": 4,
    "dist_port": 50000,
    "port": 30000,
    "host": "0.0.0.0",  # noqa: S104
    "worker_host": "127.0.0.1",
    "enable_metrics": True,
    "dist_timeout": 3600,
    "served_model_name": "",
    "api_key": True,
    "extra_args": [],
}

# `systemctl show -p ExecStart --value sparkctl-sglang` on spark2 while it ran
# (the container unit as this role installs it in the lab, the launcher reading
# the API key from the mounted secrets file). As systemd 252 prints it: argv[]
# joined with blanks, unquoted.
SPARK2_EXECSTART = "{ path=/usr/bin/docker ; argv[]=/usr/bin/docker run --rm --name sparkctl-sglang --network host --ipc host --gpus all --user 475:475 --env-file /etc/sparkctl/nccl.env --env-file /etc/sparkctl/sglang.env --volume /var/lib/sparkctl/models:/var/lib/sparkctl/models:ro --volume /srv/sparkctl-model/served:/srv/sparkctl-model/served:ro --volume /usr/local/lib/sparkctl/sglang-launcher.py:/usr/local/lib/sparkctl/sglang-launcher.py:ro --volume /etc/sparkctl/sglang-secrets.env:/etc/sparkctl/sglang-secrets.env:ro --volume /var/lib/sparkctl/sglang:/var/lib/sparkctl/sglang --pull never --ulimit memlock=-1 lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:835d68f665a2c49804ca899216ea6a5a054661d8ab77e5a9b6f5c4cf4d1d6fae python3 /usr/local/lib/sparkctl/sglang-launcher.py --secrets-file /etc/sparkctl/sglang-secrets.env -- --model-path /var/lib/sparkctl/models/current --tp-size 4 --nnodes 4 --node-rank 1 --dist-init-addr 192.168.100.11:50000 --host 127.0.0.1 --port 30000 --enable-metrics --dist-timeout 3600 ; ignore_errors=no ; start_time=[Tue 2026-12-01 11:56:26 UTC] ; stop_time=[n/a] ; pid=1038 ; code=(null) ; status=0/0 }"
# The same for chrony (Debian's unit: $DAEMON_OPTS is expanded at start only).
CHRONY_EXECSTART = "{ path=/usr/sbin/chronyd ; argv[]=/usr/sbin/chronyd $DAEMON_OPTS -x ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }"
SPARK2_SHOW = """\
Restart=on-failure
RestartUSec=30s
LoadState=loaded
FragmentPath=/etc/systemd/system/sparkctl-sglang.service
UnitFileState=disabled
StartLimitIntervalUSec=10min
StartLimitBurst=3
"""
# `nft -j list table inet sparkctl` on spark2 after the role ran (inventory/sim.ini: the
# Sparks' management addresses as peers, the API open to their /24).
SPARK2_NFT = '{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", "json_schema_version": 1}}, {"table": {"family": "inet", "name": "sparkctl", "handle": 2}}, {"set": {"family": "inet", "name": "sglang_fabric_v4", "table": "sparkctl", "type": "ipv4_addr", "handle": 6, "flags": ["interval"], "elem": [{"prefix": {"addr": "192.168.100.0", "len": 24}}, {"prefix": {"addr": "192.168.101.0", "len": 24}}]}}, {"set": {"family": "inet", "name": "sglang_peers_v4", "table": "sparkctl", "type": "ipv4_addr", "handle": 7, "flags": ["interval"], "elem": ["10.77.0.11", "10.77.0.12", "10.77.0.13", "10.77.0.14"]}}, {"set": {"family": "inet", "name": "sglang_api_v4", "table": "sparkctl", "type": "ipv4_addr", "handle": 8, "flags": ["interval"], "elem": [{"prefix": {"addr": "10.77.0.0", "len": 24}}]}}, {"chain": {"family": "inet", "table": "sparkctl", "name": "sglang_input", "handle": 5, "type": "filter", "hook": "input", "prio": 0, "policy": "accept"}}, {"rule": {"family": "inet", "table": "sparkctl", "chain": "sglang_input", "handle": 9, "expr": [{"match": {"op": "==", "left": {"meta": {"key": "iif"}}, "right": "lo"}}, {"accept": null}]}}, {"rule": {"family": "inet", "table": "sparkctl", "chain": "sglang_input", "handle": 10, "expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": ["established", "related"]}}, {"accept": null}]}}, {"rule": {"family": "inet", "table": "sparkctl", "chain": "sglang_input", "handle": 12, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@sglang_fabric_v4"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [{"range": [32768, 60999]}]}}}, {"accept": null}]}}, {"rule": {"family": "inet", "table": "sparkctl", "chain": "sglang_input", "handle": 14, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@sglang_peers_v4"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [{"range": [32768, 60999]}]}}}, {"accept": null}]}}, {"rule": {"family": "inet", "table": "sparkctl", "chain": "sglang_input", "handle": 16, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [{"range": [32768, 60999]}]}}}, {"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]}}, {"rule": {"family": "inet", "table": "sparkctl", "chain": "sglang_input", "handle": 17, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}}, "right": "@sglang_api_v4"}}, {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 30000}}, {"accept": null}]}}, {"rule": {"family": "inet", "table": "sparkctl", "chain": "sglang_input", "handle": 18, "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 30000}}, {"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]}}]}'
FABRIC = ["192.168.100.0/24", "192.168.101.0/24"]
FABRIC_PORTS = ["50000-50015", "32768-60999"]


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


# ------------------------------------------------------------------ interface
def test_every_profile_names_an_installation_method_the_role_knows() -> None:
    spec = _yaml(ROLE / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    # The profile table of cluster_defaults (an internal constant of that role).
    profiles = _yaml(
        REPO
        / "ansible_collections"
        / "sparkctl"
        / "spark"
        / "roles"
        / "cluster_defaults"
        / "vars"
        / "main.yml"
    )["_cluster_defaults_hw_profiles"]
    methods = spec["sglang_install_method"]["choices"]
    assert methods == _yaml(ROLE / "vars" / "main.yml")["_sglang_methods"]
    assert {p["sglang_impl"] for p in profiles.values()} <= set(methods)


def test_image_is_pinned_to_a_cuda13_release_tag() -> None:
    defaults = _yaml(ROLE / "defaults" / "main.yml")
    image = defaults["sglang_image"]
    name, _, tag = image.partition(":")
    assert name == "lmsysorg/sglang"
    assert tag.startswith(f"v{defaults['sglang_version']}-cu130"), tag
    assert "latest" not in tag


def test_the_role_carries_no_simulator() -> None:
    """The lab's stand-ins live in lab/sparkctl_lab/standins and the lab puts them on its nodes;
    the role installs only what a Spark runs, the same way everywhere."""
    files = sorted(
        p.relative_to(ROLE).as_posix()
        for p in ROLE.rglob("*")
        if p.is_file() and "molecule" not in p.parts and "__pycache__" not in p.parts
    )
    assert [f for f in files if f.startswith("files/")] == ["files/sglang_launcher.py"]
    for name in files:
        text = (ROLE / name).read_text()
        assert "lab/sparkctl_lab" not in text and "standin" not in text, name
        assert "when: lab" not in text and "hw_profile ==" not in text, name


# ------------------------------------------------------------ launch command
def test_head_and_worker_commands_from_the_lab_inventory() -> None:
    head = args_f.sglang_launch_args(SIM_NODES, 0, **LAUNCH)
    assert head == [
        "--model-path",
        "/var/lib/sparkctl/models/current",
        "--tp-size",
        "4",
        "--nnodes",
        "4",
        "--node-rank",
        "0",
        "--dist-init-addr",
        "192.168.100.11:50000",
        "--host",
        "0.0.0.0",  # noqa: S104
        "--port",
        "30000",
        "--enable-metrics",
        "--dist-timeout",
        "3600",
        "--api-key",
        "${SGLANG_API_KEY}",
    ]
    worker = args_f.sglang_launch_args(list(reversed(SIM_NODES)), "2", **LAUNCH)
    assert worker[worker.index("--node-rank") + 1] == "2"
    assert worker[worker.index("--dist-init-addr") + 1] == "192.168.100.11:50000"
    assert worker[worker.index("--host") + 1] == "127.0.0.1"


def test_optional_arguments() -> None:
    args = args_f.sglang_launch_args(
        SIM_NODES,
        1,
        **{
            **LAUNCH,
            "served_model_name": "qwen3-32b",
            "enable_metrics": False,
            "api_key": False,
            "extra_args": ["--mem-fraction-static", 0.8, "--trust-remote-code"],
        },
    )
    assert "--enable-metrics" not in args and "--api-key" not in args
    assert args[-5:] == [
        "--served-model-name",
        "qwen3-32b",
        "--mem-fraction-static",
        "0.8",
        "--trust-remote-code",
    ]


def _standin_parse(args: list[str]) -> dict[str, Any]:
    """The lab stand-in's parser on ``args`` (the real release's: tests/contract)."""
    from sparkctl_lab.standins.sglang.launch_server import build_parser  # noqa: PLC0415

    return vars(
        build_parser().parse_args([a if a != "${SGLANG_API_KEY}" else "k" * 16 for a in args])
    )


def test_the_standin_accepts_the_command_it_is_installed_with() -> None:
    """The stand-in's parser takes what the filter computes, and reads it back the same."""
    args = args_f.sglang_launch_args(
        SIM_NODES,
        3,
        **{**LAUNCH, "served_model_name": "m", "extra_args": ["--context-length", "32768"]},
    )
    parsed = _standin_parse(args)
    assert (
        parsed["tp_size"],
        parsed["nnodes"],
        parsed["node_rank"],
        parsed["dist_init_addr"],
        parsed["dist_timeout"],
        parsed["context_length"],
        parsed["served_model_name"],
    ) == (4, 4, 3, "192.168.100.11:50000", 3600, 32768, "m")


def test_tls_adds_uvicorns_certificate_flags_and_needs_both() -> None:
    args = args_f.sglang_launch_args(
        SIM_NODES,
        0,
        **{
            **LAUNCH,
            "ssl_certfile": "/etc/sparkctl/tls/sglang.crt",
            "ssl_keyfile": "/etc/sparkctl/tls/sglang.key",
        },
    )
    assert (_opt(args, "--ssl-certfile"), _opt(args, "--ssl-keyfile")) == (
        "/etc/sparkctl/tls/sglang.crt",
        "/etc/sparkctl/tls/sglang.key",
    )
    with pytest.raises(args_f.AnsibleFilterError, match="go together"):
        args_f.sglang_launch_args(SIM_NODES, 0, **{**LAUNCH, "ssl_certfile": "/c.crt"})


@pytest.mark.parametrize(
    ("nodes", "overrides", "message"),
    [
        (
            [{**SIM_NODES[0], "node_rank": 1}, *SIM_NODES[1:]],
            {},
            "node_rank must be 0..3, each once",
        ),
        (SIM_NODES[:3], {}, "sglang_nnodes is 4 but the sparks group has 3 nodes"),
        (SIM_NODES, {"tp_size": 6}, "sglang_tp_size 6 must be a multiple of the 4 nodes"),
        ([{**SIM_NODES[0], "fabric_a_ip": ""}, *SIM_NODES[1:]], {}, "has no IPv4 fabric_a_ip"),
        (SIM_NODES, {"extra_args": ["--chat-template", "my template"]}, "one word per list item"),
        (SIM_NODES, {"served_model_name": "$HOME"}, "one word per list item"),
        (SIM_NODES, {"dist_port": 70000}, "sglang_dist_port 70000 is not a TCP port"),
        ([], {}, "the sparks group is empty"),
    ],
)
def test_inventory_mistakes_name_what_to_fix(
    nodes: list[dict[str, Any]], overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(args_f.AnsibleFilterError, match=message):
        args_f.sglang_launch_args(nodes, 1, **{**LAUNCH, **overrides})


# --------------------------------------------------------- several TP groups
# inventory/sim-two-groups.ini: sim.ini's hosts with sglang_group a (spark1,
# spark2) and b (spark3, spark4), as _sglang_nodes builds them.
TWO_GROUPS = [{**n, "group": "ab"[i // 2]} for i, n in enumerate(SIM_NODES)]
TWO_LAUNCH = {**LAUNCH, "tp_size": 2, "nnodes": 2}


def _opt(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_two_groups_of_two_each_have_their_own_ranks_and_head() -> None:
    expected = {  # node_rank -> (--node-rank, --dist-init-addr, --host)
        0: ("0", "192.168.100.11:50000", "0.0.0.0"),  # noqa: S104
        1: ("1", "192.168.100.11:50000", "127.0.0.1"),
        2: ("0", "192.168.100.13:50000", "0.0.0.0"),  # noqa: S104
        3: ("1", "192.168.100.13:50000", "127.0.0.1"),
    }
    for rank, (group_rank, dist, host) in expected.items():
        args = args_f.sglang_launch_args(TWO_GROUPS, rank, **TWO_LAUNCH)
        assert (_opt(args, "--tp-size"), _opt(args, "--nnodes")) == ("2", "2"), args
        assert (
            _opt(args, "--node-rank"),
            _opt(args, "--dist-init-addr"),
            _opt(args, "--host"),
        ) == (group_rank, dist, host), (rank, args)
        # the same words in the same order as a one-group command, values aside
        assert args[::2] == args_f.sglang_launch_args(SIM_NODES, rank, **LAUNCH)[::2]
    assert [args_f.sglang_tp_group(TWO_GROUPS, r) for r in (1, 2)] == [
        {
            "name": "a",
            "head": "spark1",
            "rank": 1,
            "members": ["spark1", "spark2"],
            "size": 2,
            "head_fabric_a_ip": "192.168.100.11",
        },
        {
            "name": "b",
            "head": "spark3",
            "rank": 0,
            "members": ["spark3", "spark4"],
            "size": 2,
            "head_fabric_a_ip": "192.168.100.13",
        },
    ]


def test_one_named_group_of_four_is_todays_command() -> None:
    named = [{**n, "group": "main"} for n in SIM_NODES]
    for rank in range(4):
        assert args_f.sglang_launch_args(named, rank, **LAUNCH) == args_f.sglang_launch_args(
            SIM_NODES, rank, **LAUNCH
        )
    assert args_f.sglang_tp_group(named, 3) == {
        "name": "main",
        "head": "spark1",
        "rank": 3,
        "members": ["spark1", "spark2", "spark3", "spark4"],
        "size": 4,
        "head_fabric_a_ip": "192.168.100.11",
    }


def test_group_ranks_follow_node_rank_not_the_inventory_order() -> None:
    # a = spark1 + spark3, b = spark2 + spark4: b's head is spark2 (node_rank 1)
    crossed = [{**n, "group": "ab"[i % 2]} for i, n in enumerate(SIM_NODES)]
    args = args_f.sglang_launch_args(list(reversed(crossed)), 3, **TWO_LAUNCH)
    assert (_opt(args, "--node-rank"), _opt(args, "--dist-init-addr")) == (
        "1",
        "192.168.100.12:50000",
    )
    assert args_f.sglang_tp_group(list(reversed(crossed)), 2)["members"] == ["spark1", "spark3"]


def test_a_group_of_one_has_no_rendezvous() -> None:
    """--nnodes 1 without --dist-init-addr: SGLang meets itself on 127.0.0.1 (PortArgs)."""
    nodes = [{**n, "group": "solo" if n["name"] == "spark4" else "trio"} for n in SIM_NODES]
    args = args_f.sglang_launch_args(nodes, 3, **{**LAUNCH, "tp_size": 1, "nnodes": 1})
    assert args[:10] == [
        "--model-path",
        "/var/lib/sparkctl/models/current",
        "--tp-size",
        "1",
        "--nnodes",
        "1",
        "--node-rank",
        "0",
        "--host",
        "0.0.0.0",  # noqa: S104
    ]
    assert "--dist-init-addr" not in args
    # its fabric_a_ip is nobody's meeting point
    nodes[3]["fabric_a_ip"] = ""
    assert args_f.sglang_launch_args(nodes, 3, **{**LAUNCH, "tp_size": 1, "nnodes": 1}) == args
    trio = args_f.sglang_launch_args(nodes, 2, **{**LAUNCH, "tp_size": 3, "nnodes": 3})
    assert (_opt(trio, "--node-rank"), _opt(trio, "--dist-init-addr")) == (
        "2",
        "192.168.100.11:50000",
    )
    # a single-Spark cluster is one group of one
    alone = args_f.sglang_launch_args(SIM_NODES[:1], 0, **{**LAUNCH, "tp_size": 1, "nnodes": 1})
    assert "--dist-init-addr" not in alone and _opt(alone, "--nnodes") == "1"
    # and the stand-in takes the command as SGLang does
    parsed = _standin_parse(args)
    assert (parsed["tp_size"], parsed["nnodes"], parsed["node_rank"], parsed["dist_init_addr"]) == (
        1,
        1,
        0,
        None,
    )


@pytest.mark.parametrize(
    ("nodes", "rank", "overrides", "message"),
    [
        (
            TWO_GROUPS,
            2,
            {"nnodes": 4, "tp_size": 4},
            r"sglang_nnodes is 4 but SGLang group 'b' \(spark3, spark4\) has 2 nodes",
        ),
        (
            TWO_GROUPS,
            0,
            {"tp_size": 3},
            r"sglang_tp_size 3 must be a multiple of the 2 nodes of SGLang group 'a' \(spark1, spark2\)",
        ),
        (
            [*TWO_GROUPS[:2], {**TWO_GROUPS[2], "fabric_a_ip": ""}, TWO_GROUPS[3]],
            3,
            {},
            r"spark3 \(node_rank 2, the head of SGLang group 'b' \(spark3, spark4\)\) has no IPv4 "
            "fabric_a_ip",
        ),
        (
            [{**n, "group": "b c"} for n in SIM_NODES],
            1,
            {"tp_size": 4, "nnodes": 4},
            "sglang_group of spark2 is 'b c': one word",
        ),
        (
            [{**n, "group": ""} for n in SIM_NODES],
            1,
            {"tp_size": 4, "nnodes": 4},
            "sglang_group of spark2 is '': one word",
        ),
        (
            [{**n, "node_rank": 3 - i if i < 2 else i} for i, n in enumerate(TWO_GROUPS)],
            1,
            {},
            "node_rank must be 0..3, each once",
        ),
    ],
)
def test_group_mistakes_name_the_group(
    nodes: list[dict[str, Any]], rank: int, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(args_f.AnsibleFilterError, match=message):
        args_f.sglang_launch_args(nodes, rank, **{**TWO_LAUNCH, **overrides})


def test_group_default_is_one_name_for_the_role_and_the_rules() -> None:
    from sparkctl.rules import common  # noqa: PLC0415

    defaults = _yaml(ROLE / "defaults" / "main.yml")
    internal = _yaml(ROLE / "vars" / "main.yml")
    assert (
        defaults["sglang_group"]
        == internal["_sglang_default_group"]
        == common.DEFAULT_SGLANG_GROUP
        == "main"
    )
    assert args_f.GROUP_NAME.pattern == common.GROUP_NAME.pattern


def test_plan_names_the_group_and_keeps_every_key() -> None:
    (task,) = _yaml(ROLE / "tasks" / "plan.yml")
    plan = task["ansible.builtin.set_fact"]["__sglang_plan"]
    assert {
        "unit",
        "install_method",
        "tp_size",
        "nnodes",
        "gpus_per_node",
        "port",
        "dist_port",
        "model_path",
        "served_model_name",
        "api_key_file",
        "api_key_required",
        "env_file",
        "serve_timeout",
        "verify_requests",
        "verify_max_tokens",
        "tls",
        "tls_ca_file",
        "api_allowed_cidrs",
        "rdma_expected",
    } < set(plan)
    assert {k: plan[k] for k in ("group", "group_head", "group_rank", "group_members")} == {
        "group": "{{ _sglang_group.name }}",
        "group_head": "{{ _sglang_group.head }}",
        "group_rank": "{{ _sglang_group.rank | int }}",
        "group_members": "{{ _sglang_group.members }}",
    }


LAUNCHER_PATH = "/usr/local/lib/sparkctl/sglang-launcher.py"
LAUNCHER_FILE = ROLE / "files" / "sglang_launcher.py"
SECRETS = "/etc/sparkctl/sglang-secrets.env"


def test_exec_argv_for_each_method() -> None:
    args = ["--tp-size", "4"]
    assert args_f.sglang_exec_argv(args, "venv", python="/opt/v/bin/python3") == [
        "/opt/v/bin/python3",
        LAUNCHER_PATH,
        "--",
        "--tp-size",
        "4",
    ]
    argv = args_f.sglang_exec_argv(
        args,
        "container",
        engine_path="/usr/bin/docker",
        gpu_args=["--gpus", "all"],
        image="lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:abc",
        env_files=["/a.env", "/b.env"],
        mounts=["/m:/m:ro"],
        container_args=["--pull", "never"],
        user="475:475",
    )
    assert argv[:9] == [
        "/usr/bin/docker",
        "run",
        "--rm",
        "--name",
        "sparkctl-sglang",
        "--network",
        "host",
        "--ipc",
        "host",
    ]
    assert argv[9:13] == ["--gpus", "all", "--user", "475:475"]
    assert argv[13:17] == ["--env-file", "/a.env", "--env-file", "/b.env"]
    assert argv[17:19] == ["--volume", "/m:/m:ro"]
    tail = argv[argv.index("lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:abc") :]
    assert tail == [
        "lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:abc",
        "python3",
        LAUNCHER_PATH,
        "--",
        "--tp-size",
        "4",
    ]
    with pytest.raises(args_f.AnsibleFilterError, match="unknown installation method"):
        args_f.sglang_exec_argv(args, "standin")


def test_with_a_key_the_launcher_reads_it_from_the_secrets_file_not_argv() -> None:
    args = args_f.sglang_launch_args(
        SIM_NODES, 1, **{**LAUNCH, "extra_args": ["--trust-remote-code"]}
    )
    assert args[-3:] == ["--trust-remote-code", "--api-key", "${SGLANG_API_KEY}"]
    argv = args_f.sglang_exec_argv(args, "venv", python="/opt/v/bin/python3", secrets_file=SECRETS)
    assert argv[:5] == ["/opt/v/bin/python3", LAUNCHER_PATH, "--secrets-file", SECRETS, "--"]
    assert "${SGLANG_API_KEY}" not in argv and argv[5:] == args[:-2]
    assert args_f.sglang_server_args(argv) == args  # read back in the form the plan has
    line = args_f.sglang_exec_line(argv)
    assert "$" not in line and '"' not in line
    for joined in (" ".join(argv), shlex.join(argv)):  # systemd 252 / newer systemd
        execstart = f"{{ path=/opt/v/bin/python3 ; argv[]={joined} ; ignore_errors=no ; pid=1 }}"
        assert args_f.sglang_parse_execstart(execstart) == argv
    container = args_f.sglang_exec_argv(args, "container", image="img", env_files=["/s.env"])
    assert container[container.index("img") :][:5] == [
        "img",
        "python3",
        LAUNCHER_PATH,
        "--secrets-file",
        SECRETS,
    ]
    assert args_f.sglang_server_args(container) == args
    without = args_f.sglang_launch_args(SIM_NODES, 1, **{**LAUNCH, "api_key": False})
    assert args_f.sglang_server_args(args_f.sglang_exec_argv(without, "venv")) == without


def _fake_sglang(root: Path, body: str) -> None:
    pkg = root / "sglang"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(body)


def _launch(
    tmp_path: Path, *argv: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LAUNCHER_FILE), *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(tmp_path),
            "PYTHONDONTWRITEBYTECODE": "1",
            **(env or {}),
        },
    )


def test_the_launcher_runs_launch_server_as_dash_m_would_with_the_key_from_the_file(
    tmp_path: Path,
) -> None:
    """The launcher, really run: sys.argv[0] is launch_server.py (argparse's prog), __name__ is
    __main__, --api-key is the file's value, which is in no environment variable."""
    # what the server sees goes to a file: its output is redacted on the way out
    _fake_sglang(
        tmp_path,
        (
            "import json, os, sys\n"
            "if __name__ == '__main__':\n"
            "    with open(os.environ['SEEN'], 'w') as f:\n"
            "        json.dump({'argv': sys.argv, 'spec': __spec__.name,\n"
            "                   'env': [k for k, v in os.environ.items() if 'k' * 20 in v]}, f)\n"
        ),
    )
    secrets = tmp_path / "secrets.env"
    secrets.write_text("# comment\nSGLANG_API_KEY=" + "k" * 20 + "\n")
    proc = _launch(
        tmp_path,
        "--secrets-file",
        str(secrets),
        "--",
        "--tp-size",
        "4",
        env={"SEEN": str(tmp_path / "seen.json")},
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["argv"] == [
        str(tmp_path / "sglang" / "launch_server.py"),
        "--tp-size",
        "4",
        "--api-key",
        "k" * 20,
    ]
    assert (seen["spec"], seen["env"]) == ("sglang.launch_server", [])


def test_the_launcher_runs_the_gateway_router_with_the_same_key_and_no_other_module(
    tmp_path: Path,
) -> None:
    """``--module smg.launch_router``: the gateway's router, run as ``python3 -m
    smg.launch_router`` runs it, gets the key as --api-key in memory (smg takes it from
    no file or variable); a module not named in MODULES is refused before anything runs."""
    pkg = tmp_path / "smg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_router.py").write_text(
        "import json, os, sys\n"
        "if __name__ == '__main__':\n"
        "    with open(os.environ['SEEN'], 'w') as f:\n"
        "        json.dump({'argv': sys.argv[1:], 'spec': __spec__.name}, f)\n"
    )
    _fake_sglang(tmp_path, "raise SystemExit('must not run')\n")
    secrets = tmp_path / "secrets.env"
    secrets.write_text("SGLANG_API_KEY=" + "g" * 24 + "\n")
    seen = tmp_path / "seen.json"
    proc = _launch(
        tmp_path,
        "--secrets-file",
        str(secrets),
        "--module",
        "smg.launch_router",
        "--",
        "--port",
        "30080",
        env={"SEEN": str(seen)},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(seen.read_text()) == {
        "argv": ["--port", "30080", "--api-key", "g" * 24],
        "spec": "smg.launch_router",
    }
    for module in ("os", "sglang.launch_server.x", "smg"):
        proc = _launch(tmp_path, "--module", module, "--")
        assert proc.returncode == 2 and "unknown launcher options" in proc.stderr, proc.stderr


def test_the_launcher_blanks_the_key_from_everything_the_server_prints(tmp_path: Path) -> None:
    """SGLang logs server_args=ServerArgs(... api_key='KEY' ...): the journal never gets it,
    not on stdout, not on stderr, not in a \\r progress line, not in a line longer than a read."""
    key = "k3y-" + "z" * 28
    _fake_sglang(
        tmp_path,
        (
            "import sys, os\n"
            "k = sys.argv[sys.argv.index('--api-key') + 1]\n"
            "print(f\"[2026-12-01 10:00:00] server_args=ServerArgs(model_path='/m', api_key='{k}', \"\n"
            '      f"admin_api_key=None)", flush=True)\n'
            "sys.stderr.write('warn ' + k + '\\n'); sys.stderr.flush()\n"
            "for i in range(3): sys.stdout.write(f'\\rCapturing batches {i} ' + k); sys.stdout.flush()\n"
            "os.write(1, b'x' * 200000 + k.encode() + b'y' * 10 + b'\\n')\n"
            "print('tail without newline ' + k, end='')\n"
        ),
    )
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"SGLANG_API_KEY={key}\n")
    proc = _launch(tmp_path, "--secrets-file", str(secrets), "--", "--port", "1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert key not in out
    assert "api_key='<redacted>'" in out and "warn <redacted>" in out
    assert out.count("Capturing batches") == 3 and "<redacted>yyyyyyyyyy" in out
    assert out.endswith("tail without newline <redacted>")


def test_the_launcher_refuses_a_missing_or_empty_key(tmp_path: Path) -> None:
    _fake_sglang(tmp_path, "raise SystemExit('must not run')\n")
    empty = tmp_path / "empty.env"
    empty.write_text("SGLANG_API_KEY=\n")
    for argv, message in (
        (["--secrets-file", str(empty), "--"], "SGLANG_API_KEY is empty"),
        (["--secrets-file", str(tmp_path / "none"), "--"], "cannot read the secrets file"),
        (["--tp-size", "4"], "usage: sglang-launcher.py"),
        (["--api-key", "x", "--"], "unknown launcher options"),
    ):
        proc = _launch(tmp_path, *argv)
        assert (proc.returncode, "must not run" in proc.stderr) == (2, False), proc.stderr
        assert message in proc.stderr


def test_the_launcher_as_pid_1_forwards_sigterm_and_passes_the_exit_status(tmp_path: Path) -> None:
    """docker stop sends SIGTERM to the container's PID 1; the kernel drops signals that PID 1
    has no handler for. The launcher forwards it, and exits with the server's own status."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare for a PID namespace")
    _fake_sglang(
        tmp_path,
        (
            "import signal, sys, time\n"
            "def bye(signum, frame):\n"
            "    print('server got', signum, flush=True); sys.exit(3)\n"
            "signal.signal(signal.SIGTERM, bye)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)\n"
        ),
    )
    proc = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", sys.executable, str(LAUNCHER_FILE), "--"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        launcher = int(
            subprocess.run(
                ["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, check=True
            ).stdout.split()[0]
        )
        os.kill(launcher, signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert f"server got {int(signal.SIGTERM)}" in out
    assert proc.returncode == 3


# ------------------------------------------------------- start on boot: the head's wait
_RECORD_RUN = (
    "import os\nif __name__ == '__main__':\n    open(os.environ['RAN'], 'w').write('ran')\n"
)


def _wait_argv(port: int, seconds: str = "1") -> list[str]:
    return ["--wait-for-head", f"127.0.0.1:{port}", "--wait-timeout", seconds, "--", "--x"]


def test_a_worker_starts_at_once_when_its_head_answers_accepted_or_refused(tmp_path: Path) -> None:
    """Accepted (the head's store listens) or refused (the head is up, SGLang not listening
    yet, which torch's TCPStore client retries itself): the server starts, nothing waited."""
    _fake_sglang(tmp_path, _RECORD_RUN)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        for port in (int(listening.getsockname()[1]), free_port()):
            ran = tmp_path / f"ran-{port}"
            proc = _launch(tmp_path, *_wait_argv(port), env={"RAN": str(ran)})
            assert proc.returncode == 0, proc.stderr
            assert ran.read_text() == "ran"
            assert "waiting" not in proc.stderr


def _full_listener() -> tuple[socket.socket, socket.socket]:
    """A listener whose accept queue is full: a further connect is not answered (its SYN is
    dropped), as a head's address that does not answer yet."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    filler = socket.create_connection(listener.getsockname()[:2], timeout=5)
    return listener, filler


def test_a_worker_whose_head_does_not_answer_gives_up_after_the_bound(tmp_path: Path) -> None:
    _fake_sglang(tmp_path, _RECORD_RUN)
    listener, filler = _full_listener()
    with listener, filler:
        port = int(listener.getsockname()[1])
        proc = _launch(tmp_path, *_wait_argv(port), env={"RAN": str(tmp_path / "ran")})
    assert proc.returncode == 1, proc.stderr
    assert f"the head's rendezvous 127.0.0.1:{port} did not answer in 1 s" in proc.stderr
    assert "systemd restarts this rank" in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_a_worker_waits_for_its_head_and_starts_when_it_answers(tmp_path: Path) -> None:
    """The journal says what the rank waits for; once the head answers the server starts."""
    _fake_sglang(tmp_path, _RECORD_RUN)
    listener, filler = _full_listener()
    ran = tmp_path / "ran"
    with listener, filler:
        port = int(listener.getsockname()[1])
        with subprocess.Popen(
            [sys.executable, str(LAUNCHER_FILE), *_wait_argv(port, "120")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "RAN": str(ran)},
        ) as proc:
            assert proc.stderr is not None
            first = proc.stderr.readline()
            assert f"waiting for the head's rendezvous 127.0.0.1:{port} to answer" in first
            assert "SGLang would give up on it at once" in first
            # the head comes up: its queue has room again
            conn, _ = listener.accept()
            conn.close()
            _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"the head's rendezvous 127.0.0.1:{port} answers after" in err
    assert ran.read_text() == "ran"


@pytest.mark.parametrize(
    "own",
    [
        ["--wait-for-head", "127.0.0.1:50000"],
        ["--wait-timeout", "60"],
        ["--wait-for-head", "127.0.0.1", "--wait-timeout", "60"],
        ["--wait-for-head", "127.0.0.1:0", "--wait-timeout", "60"],
        ["--wait-for-head", "127.0.0.1:50000", "--wait-timeout", "0"],
        ["--wait-for-head", "127.0.0.1:50000", "--wait-timeout", "soon"],
        ["--secrets-file", "/a", "--secrets-file", "/b"],
    ],
)
def test_the_launcher_refuses_a_wait_it_cannot_do(tmp_path: Path, own: list[str]) -> None:
    proc = _launch(tmp_path, *own, "--", "--x")
    assert proc.returncode == 2 and "unknown launcher options" in proc.stderr, proc.stderr


def test_start_on_boot_renders_the_unit_and_a_workers_wait_for_its_head() -> None:
    """Off: the unit says it is installed disabled and every rank runs today's command. On:
    the unit says it starts at boot and why a worker waits; a worker's launcher waits for its
    head's --dist-init-addr for up to --dist-timeout; the head and a group of one wait for
    nobody; the server's own arguments are the same either way."""
    for rank, head in ((2, False), (0, True)):
        off = _render("sparkctl-sglang.service.j2", _unit_context("container", node_rank=rank))
        on = _render(
            "sparkctl-sglang.service.j2",
            _unit_context("container", node_rank=rank, start_on_boot=True),
        )
        assert "# Installed disabled: `sparkctl serve` starts the workers, then the head." in off
        assert "sglang_start_on_boot" not in off and "--wait-for-head" not in off
        assert "# Enabled at boot (sglang_start_on_boot)" in on
        assert "SocketConnectOp::tryConnect" in on
        for unit in (off, on):
            lines = unit.splitlines()
            assert "WantedBy=multi-user.target" in lines
            assert "After=network-online.target" in lines and "Wants=network-online.target" in lines
        argv_off, argv_on = _execstart(off), _execstart(on)
        assert args_f.sglang_server_args(argv_on) == args_f.sglang_server_args(argv_off)
        own = argv_on[argv_on.index(LAUNCHER_PATH) + 1 : argv_on.index("--")]
        if head:
            assert argv_on == argv_off
        else:
            assert own == [
                "--secrets-file",
                SECRETS,
                "--wait-for-head",
                "192.168.100.11:50000",
                "--wait-timeout",
                "3600",
            ]
    alone = args_f.sglang_launch_args(SIM_NODES[:1], 0, **{**LAUNCH, "tp_size": 1, "nnodes": 1})
    assert "--wait-for-head" not in args_f.sglang_exec_argv(
        alone, "venv", wait_for_head=True, wait_timeout=3600
    )
    worker = args_f.sglang_launch_args(SIM_NODES, 1, **LAUNCH)
    with pytest.raises(args_f.AnsibleFilterError, match="sglang_dist_timeout"):
        args_f.sglang_exec_argv(worker, "venv", wait_for_head=True, wait_timeout=0)


def test_exec_line_quotes_for_systemd() -> None:
    line = args_f.sglang_exec_line(
        ["/usr/bin/python3", LAUNCHER_PATH, "--", "--x", "50%", "a b", 'q"$']
    )
    assert line == (f'/usr/bin/python3 {LAUNCHER_PATH} -- --x "50%%" "a b" "q\\"$$"')


def test_execstart_read_back_from_systemd() -> None:
    argv = args_f.sglang_parse_execstart(SPARK2_EXECSTART)
    assert argv[:2] == ["/usr/bin/docker", "run"]
    assert args_f.sglang_server_args(argv) == args_f.sglang_launch_args(SIM_NODES, 1, **LAUNCH)
    assert args_f.sglang_parse_execstart(CHRONY_EXECSTART) == [
        "/usr/sbin/chronyd",
        "$DAEMON_OPTS",
        "-x",
    ]
    with pytest.raises(args_f.AnsibleFilterError, match=r"runs neither sglang-launcher\.py"):
        args_f.sglang_server_args(["/usr/sbin/chronyd", "-x"])
    with pytest.raises(args_f.AnsibleFilterError, match="is the unit loaded"):
        args_f.sglang_parse_execstart("")


def test_systemctl_show_and_time_spans() -> None:
    show = args_f.sglang_parse_show(SPARK2_SHOW)
    assert (show["LoadState"], show["UnitFileState"], show["Restart"]) == (
        "loaded",
        "disabled",
        "on-failure",
    )
    assert args_f.sglang_timespan(show["RestartUSec"]) == 30
    assert args_f.sglang_timespan(show["StartLimitIntervalUSec"]) == 600
    assert args_f.sglang_timespan("1min 30s") == 90
    assert args_f.sglang_timespan("1h 2min 500ms") == 3720.5
    assert args_f.sglang_timespan("0") == 0
    assert args_f.sglang_timespan("infinity") == float("inf")
    with pytest.raises(args_f.AnsibleFilterError):
        args_f.sglang_timespan("soon")


def test_preflight_reads_ip_json_with_the_one_parser() -> None:
    """The fabric_a_ip preflight reads ``ip -j -4 addr`` through tool_output.ip_addr (a
    real capture, tests/fixtures/ip), not with a Jinja walk of its own."""
    real = (REPO / "tests" / "fixtures" / "ip" / "build-host-ip-j-4-addr.json").read_text()
    assert args_f.sglang_ipv4_addresses(real) == [
        a.split("/")[0] for addrs in args_f.TOOL_OUTPUT.ip_addr(real).values() for a in addrs
    ]
    assert "127.0.0.1" in args_f.sglang_ipv4_addresses(real)
    assert args_f.sglang_ipv4_addresses("[]") == args_f.sglang_ipv4_addresses("") == []
    with pytest.raises(args_f.AnsibleFilterError, match="no JSON"):
        args_f.sglang_ipv4_addresses('Device "enp1s0f1np1" does not exist.')
    preflight = (
        REPO
        / "ansible_collections"
        / "sparkctl"
        / "spark"
        / "roles"
        / "sglang"
        / "tasks"
        / "preflight.yml"
    ).read_text()
    assert "sglang_ipv4_addresses" in preflight and "addr_info" not in preflight


def test_env_files_parse_check_and_diff() -> None:
    text = "# comment\n\nSGLANG_HOST_IP=192.168.100.11\nHF_HUB_OFFLINE=1\r\n"
    assert args_f.sglang_parse_env(text) == {
        "SGLANG_HOST_IP": "192.168.100.11",
        "HF_HUB_OFFLINE": "1",
    }
    with pytest.raises(args_f.AnsibleFilterError, match="set twice"):
        args_f.sglang_parse_env("A=1\nA=2\n")
    with pytest.raises(args_f.AnsibleFilterError, match="line 1 is not KEY=VALUE") as err:
        args_f.sglang_parse_env("export SGLANG_API_KEY=topsecret\n")
    assert "topsecret" not in str(err.value)  # a bad secrets file never shows the key
    assert args_f.sglang_env_problems({"A": "enp1s0f1np1", "B": 1}) == []
    assert len(args_f.sglang_env_problems({"A": "a b", "b-c": "1", "C": None, "D": "$x"})) == 4
    assert args_f.sglang_env_diff({"A": "1", "C": "x"}, {"A": 1, "B": "2"}) == [
        "B is missing (expected '2')",
        "C='x' is not expected",
    ]


# ------------------------------------------------------------------ firewall
PEERS = ["10.77.0.11", "10.77.0.12", "10.77.0.13", "10.77.0.14"]
API = ["10.77.0.0/24"]


def test_live_firewall_read_back_matches_the_wanted_one() -> None:
    live = fw.sglang_nft_rules(SPARK2_NFT)
    wanted = fw.sglang_nft_expected(FABRIC, FABRIC_PORTS, 30000, API, PEERS)
    assert live["rules"] == [
        'iif "lo" accept',
        "ct state established,related accept",
        "ip saddr @sglang_fabric_v4 tcp dport 32768-60999 accept",
        "ip saddr @sglang_peers_v4 tcp dport 32768-60999 accept",
        "tcp dport 32768-60999 drop",
        "ip saddr @sglang_api_v4 tcp dport 30000 accept",
        "tcp dport 30000 drop",
    ]
    assert live["sets"] == {
        "sglang_fabric_v4": FABRIC,
        "sglang_api_v4": API,
        "sglang_peers_v4": [f"{a}/32" for a in PEERS],
    }
    assert fw.sglang_nft_diff(live, wanted) == []
    assert not fw.sglang_nft_drops_port(live, 22)
    assert fw.sglang_nft_drops_port(live, 50000) and fw.sglang_nft_drops_port(live, 30000)


def _nft_item(data: dict[str, Any], kind: str, name_or_handle: Any) -> dict[str, Any]:
    for item in data["nftables"]:
        body: dict[str, Any] | None = item.get(kind)
        if body and name_or_handle in (body.get("name"), body.get("handle")):
            return body
    raise KeyError(name_or_handle)


def test_firewall_differences_are_named() -> None:
    data = json.loads(SPARK2_NFT)
    _nft_item(data, "set", "sglang_fabric_v4")["elem"].pop()
    _nft_item(data, "chain", "sglang_input")["policy"] = "drop"
    drop = next(
        i["rule"]
        for i in data["nftables"]
        if "rule" in i and "counter" in str(i["rule"]["expr"]) and "32768" in str(i)
    )
    drop["expr"][0]["match"]["right"] = 22
    diff = fw.sglang_nft_diff(
        fw.sglang_nft_rules(json.dumps(data)),
        fw.sglang_nft_expected(FABRIC, FABRIC_PORTS, 30000, API, PEERS),
    )
    assert len(diff) == 3, diff
    assert "'policy': 'drop'" in diff[0]
    assert "set sglang_fabric_v4 holds ['192.168.100.0/24']" in diff[1]
    assert "tcp dport 22 drop" in diff[2]
    assert fw.sglang_nft_drops_port(fw.sglang_nft_rules(json.dumps(data)), 22)
    assert fw.sglang_nft_diff({"chain": None}, {}) == [
        "chain sglang_input is missing from table inet sparkctl"
    ]


def test_peer_sparks_may_reach_the_ports_for_open_mpi() -> None:
    wanted = fw.sglang_nft_expected(FABRIC, FABRIC_PORTS, 30000, API, PEERS)
    assert wanted["sets"]["sglang_peers_v4"] == [f"{a}/32" for a in PEERS]
    assert wanted["rules"][2:5] == [
        "ip saddr @sglang_fabric_v4 tcp dport 32768-60999 accept",
        "ip saddr @sglang_peers_v4 tcp dport 32768-60999 accept",
        "tcp dport 32768-60999 drop",
    ]
    # without peers the chain differs from the live one, and says how
    alone = fw.sglang_nft_expected(FABRIC, FABRIC_PORTS, 30000, API, [])
    assert [
        d.split(",")[0] for d in fw.sglang_nft_diff(fw.sglang_nft_rules(SPARK2_NFT), alone)
    ] == ["set sglang_peers_v4 holds ['10.77.0.11/32'", "rules are ['iif \"lo\" accept'"]


def test_the_api_answers_only_the_sources_it_is_given() -> None:
    wanted = fw.sglang_nft_expected(FABRIC, FABRIC_PORTS, 30000, ["10.77.0.0/24", "10.77.0.5"])
    assert wanted["sets"]["sglang_api_v4"] == ["10.77.0.0/24", "10.77.0.5/32"]
    assert wanted["rules"][-2:] == [
        "ip saddr @sglang_api_v4 tcp dport 30000 accept",
        "tcp dport 30000 drop",
    ]
    # never open by omission: an empty list is refused, 0.0.0.0/0 opens it on purpose
    with pytest.raises(fw.AnsibleFilterError, match="sglang_api_allowed_cidrs is empty"):
        fw.sglang_nft_expected(FABRIC, FABRIC_PORTS, 30000, [])
    anywhere = fw.sglang_nft_expected(FABRIC, FABRIC_PORTS, 30000, ["0.0.0.0/0"])
    assert anywhere["sets"]["sglang_api_v4"] == ["0.0.0.0/0"]


def test_the_api_default_is_the_sparks_management_networks() -> None:
    defaults = _yaml(ROLE / "defaults" / "main.yml")
    assert "sglang_mgmt_subnets(24)" in defaults["sglang_api_allowed_cidrs"]
    assert fw.sglang_mgmt_subnets(["198.51.100.11", "198.51.100.14", "10.77.0.12"]) == [
        "10.77.0.0/24",
        "198.51.100.0/24",
    ]
    assert fw.sglang_mgmt_subnets(["10.1.2.3"], 16) == ["10.1.0.0/16"]
    with pytest.raises(fw.AnsibleFilterError, match="not an IPv4 management address"):
        fw.sglang_mgmt_subnets(["spark1.example"])


def test_bad_port_specs() -> None:
    with pytest.raises(fw.AnsibleFilterError, match="lies inside sglang_firewall_fabric_ports"):
        fw.sglang_nft_expected(FABRIC, ["30000-30010"], 30000, API)
    with pytest.raises(fw.AnsibleFilterError, match="not a port"):
        fw.sglang_nft_expected(FABRIC, ["ssh"], 30000, API)
    with pytest.raises(fw.AnsibleFilterError, match="not an IPv4"):
        fw.sglang_nft_expected(["fabric"], FABRIC_PORTS, 30000, API)
    assert fw.merge_intervals([(50000, 50015), (32768, 60999), (61000, 61000)]) == [(32768, 61000)]


# ----------------------------------------------------------------- templates
def _render(name: str, context: dict[str, Any]) -> str:
    env = template_env(ROLE, [args_f.FilterModule().filters(), sinks_f.FilterModule().filters()])
    return env.get_template(name).render(**context)


IMAGE = "lmsysorg/sglang:v0.5.17-cu130-runtime@sha256:" + "ab" * 32


def _unit_context(
    method: str,
    nodes: list[dict[str, Any]] = SIM_NODES,
    node_rank: int = 0,
    *,
    firewall: bool = True,
    user: str = "sparkctl-sglang",
    digest: str = "",
    start_on_boot: bool = False,
    **launch: Any,
) -> dict[str, Any]:
    """The unit template's variables as vars/main.yml computes them for a node."""
    launch = {**LAUNCH, **launch}
    args = args_f.sglang_launch_args(nodes, node_rank, **launch)
    env_files = ["/etc/sparkctl/nccl.env", "/etc/sparkctl/sglang.env"]
    return {
        "node_rank": node_rank,
        "sglang_nnodes": launch["nnodes"],
        "sglang_tp_size": launch["tp_size"],
        "_sglang_method": method,
        "_sglang_group": args_f.sglang_tp_group(nodes, node_rank),
        "_sglang_several_groups": len({n.get("group") for n in nodes}) > 1,
        "_sglang_fw_unit": "sparkctl-sglang-firewall.service",
        "_sglang_fw_chain": "sglang_input",
        "sglang_firewall_enabled": firewall,
        "_sglang_engine": {"path": "/usr/bin/docker", "service": "docker.service"},
        "_sglang_container_name": "sparkctl-sglang",
        "_sglang_unit_env_files": env_files if method == "venv" else [],
        "sglang_user": user,
        "_sglang_group_name": user or "root",
        "sglang_image": IMAGE.split("@", maxsplit=1)[0],
        "sglang_image_digest": digest,
        "sglang_version_file": "/etc/sparkctl/sglang-version",
        "sglang_start_limit_burst": 3,
        "sglang_start_limit_interval": 600,
        "sglang_restart_sec": 30,
        "sglang_start_on_boot": start_on_boot,
        "sglang_nccl_env_file": "/etc/sparkctl/nccl.env",
        "sglang_env_file": "/etc/sparkctl/sglang.env",
        "sglang_secrets_file": SECRETS,
        "_sglang_exec_argv": args_f.sglang_exec_argv(
            args,
            method,
            python="/opt/sparkctl/sglang-venv/bin/python3" if method == "venv" else "python3",
            engine_path="/usr/bin/docker",
            gpu_args=["--gpus", "all"],
            image=IMAGE,
            env_files=env_files,
            user="475:475" if user else "",
            mounts=["/var/lib/sparkctl/models:/var/lib/sparkctl/models:ro"],
            wait_for_head=start_on_boot,
            wait_timeout=launch["dist_timeout"],
        ),
    }


def _execstart(unit: str) -> list[str]:
    (line,) = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart=").replace("%%", "%").replace("$$", "$"))


INJECTED = "\nExecStartPre=/bin/sh -c id"


@pytest.mark.parametrize(
    ("method", "override", "says"),
    [
        ("venv", {"sglang_user": "svc" + INJECTED}, "sglang_user: "),
        ("venv", {"_sglang_group_name": "svc" + INJECTED}, "sglang_user: "),
        ("venv", {"sglang_restart_sec": "30" + INJECTED}, "sglang_restart_sec: "),
        ("venv", {"sglang_start_limit_burst": [3]}, "sglang_start_limit_burst: "),
        ("venv", {"_sglang_unit_env_files": ["/etc/x.env" + INJECTED]}, "sglang_env_file: "),
        ("venv", {"_sglang_unit_env_files": ["%h/x.env"]}, "sglang_env_file: "),
        ("venv", {"sglang_secrets_file": "/etc/s.env" + INJECTED}, "sglang_secrets_file: "),
        ("container", {"sglang_image": "img" + INJECTED}, "sglang_image: "),
        ("container", {"_sglang_container_name": "c" + INJECTED}, "command line: "),
        (
            "container",
            {"_sglang_exec_argv": ["/usr/bin/docker", "run", "--x" + INJECTED]},
            "line: ",
        ),
        ("container", {"_sglang_exec_argv": ["-/usr/bin/docker", "run"]}, "absolute path"),
    ],
)
def test_unit_template_refuses_a_value_that_would_add_a_setting(
    method: str, override: dict[str, Any], says: str
) -> None:
    """Every value reaches the unit through a sink filter: one that would start
    another setting (a newline), expand (a specifier) or lose its type is refused."""
    with pytest.raises(args_f.AnsibleFilterError, match=re.escape(says)):
        _render("sparkctl-sglang.service.j2", {**_unit_context(method), **override})


def test_unit_template_for_the_container_the_lab_and_a_spark_share() -> None:
    unit = _render("sparkctl-sglang.service.j2", _unit_context("container"))
    lines = unit.splitlines()
    # docker hands a container only --env-file/-e variables: no EnvironmentFile= at all,
    # and the key in neither
    assert not [ln for ln in lines if ln.startswith(("EnvironmentFile=", "Environment="))]
    argv = _execstart(unit)
    assert argv[:2] == ["/usr/bin/docker", "run"]
    assert argv[argv.index("--user") + 1] == "475:475"
    assert [argv[i + 1] for i, w in enumerate(argv) if w == "--env-file"] == [
        "/etc/sparkctl/nccl.env",
        "/etc/sparkctl/sglang.env",
    ]
    assert argv[argv.index(IMAGE) :][:5] == [
        IMAGE,
        "python3",
        LAUNCHER_PATH,
        "--secrets-file",
        SECRETS,
    ]
    assert args_f.sglang_server_args(argv)[-2:] == ["--api-key", "${SGLANG_API_KEY}"]
    assert "ExecStartPre=-/usr/bin/docker rm --force sparkctl-sglang" in lines
    assert "ExecStop=/usr/bin/docker stop --time 60 sparkctl-sglang" in lines
    assert "Requires=docker.service" in lines and "User=sparkctl-sglang" not in lines
    for setting in (
        "Restart=on-failure",
        "RestartSec=30",
        "StartLimitBurst=3",
        "StartLimitIntervalSec=600",
    ):
        assert setting in lines, setting
    assert unit.index("StartLimitBurst=3") < unit.index("[Service]")  # a [Unit] setting
    # the digest recorded at the first pull is what runs, and the unit says so
    assert (
        "# The image is the digest this node pulled for lmsysorg/sglang:v0.5.17-cu130-runtime"
        in unit
    )
    pinned = _render("sparkctl-sglang.service.j2", _unit_context("container", digest="sha256:x"))
    assert "digest this node pulled" not in pinned


def test_the_unit_is_bound_to_its_firewall_fail_closed() -> None:
    lines = _render("sparkctl-sglang.service.j2", _unit_context("container")).splitlines()
    assert "BindsTo=sparkctl-sglang-firewall.service" in lines
    assert "After=sparkctl-sglang-firewall.service" in lines
    open_ = _render("sparkctl-sglang.service.j2", _unit_context("container", firewall=False))
    assert "sparkctl-sglang-firewall" not in open_


def test_unit_template_for_the_venv_runs_as_the_servers_user() -> None:
    lines = _render("sparkctl-sglang.service.j2", _unit_context("venv")).splitlines()
    assert [ln for ln in lines if ln.startswith("EnvironmentFile=")] == [
        "EnvironmentFile=/etc/sparkctl/nccl.env",
        "EnvironmentFile=/etc/sparkctl/sglang.env",
    ]
    assert "User=sparkctl-sglang" in lines and "Group=sparkctl-sglang" in lines
    assert _execstart("\n".join(lines))[:4] == [
        "/opt/sparkctl/sglang-venv/bin/python3",
        LAUNCHER_PATH,
        "--secrets-file",
        SECRETS,
    ]
    root = _render("sparkctl-sglang.service.j2", _unit_context("venv", user="")).splitlines()
    assert not [ln for ln in root if ln.startswith(("User=", "Group="))]
    assert "docker" not in "\n".join(lines)


def test_unit_template_names_its_group_only_when_there_are_several() -> None:
    one = _render("sparkctl-sglang.service.j2", _unit_context("container", SIM_NODES, 2))
    assert "Description=SGLang TP=4 node rank 2 (sparkctl)" in one.splitlines()
    assert "# SGLang tensor-parallel rank 2 of 4 (container)." in one.splitlines()
    assert "group" not in one.replace("readable by group", "")
    unit = _render(
        "sparkctl-sglang.service.j2", _unit_context("container", TWO_GROUPS, 3, tp_size=2, nnodes=2)
    )
    lines = unit.splitlines()
    assert "Description=SGLang group b TP=2 node rank 1 (sparkctl)" in lines
    assert "# SGLang tensor-parallel rank 1 of 2 in group b, head spark3 (container)." in lines
    args = args_f.sglang_server_args(_execstart(unit))
    assert (
        _opt(args, "--tp-size"),
        _opt(args, "--nnodes"),
        _opt(args, "--node-rank"),
        _opt(args, "--dist-init-addr"),
        _opt(args, "--host"),
    ) == ("2", "2", "1", "192.168.100.13:50000", "127.0.0.1")


def test_secrets_template_holds_only_the_key() -> None:
    text = _render(
        "sglang-secrets.env.j2",
        {
            "_sglang_group_name": "sparkctl-sglang",
            "_sglang_launcher_path": LAUNCHER_PATH,
            "sglang_api_key": "lab-0123456789abcdef",
        },
    )
    assert args_f.sglang_parse_env(text) == {"SGLANG_API_KEY": "lab-0123456789abcdef"}


# --- verify: one judgement of the probe's reading --------------------------------

_ENV = {"SGLANG_HOST_IP": "192.168.100.12", "GLOO_SOCKET_IFNAME": "fab0"}
_VERSION = {"SGLANG_IMPL": "container", "SGLANG_VERSION": "0.5.17", "SGLANG_IMAGE": IMAGE}


def _env_text(env: dict[str, str]) -> str:
    return "# Managed by sparkctl\n" + "".join(f"{k}={v}\n" for k, v in sorted(env.items()))


def _reading() -> dict[str, Any]:
    root = {"exists": True, "owner": "root", "group": "root", "mode": "0644", "isreg": True}
    return {
        "files": {
            "/etc/sparkctl/sglang.env": {**root, "content": _env_text(_ENV)},
            "/etc/sparkctl/sglang-version.env": {**root, "content": _env_text(_VERSION)},
            "/etc/systemd/system/sparkctl-sglang.service": dict(root),
            SECRETS: {**root, "group": "sparkctl-sglang", "mode": "0640"},
            "/usr/bin/docker": {**root, "mode": "0755"},
            LAUNCHER_PATH: dict(root),
        },
        "commands": {
            "show": {"rc": 0, "stdout": SPARK2_SHOW, "stderr": ""},
            "execstart": {"rc": 0, "stdout": SPARK2_EXECSTART + "\n", "stderr": ""},
            "help": {
                "rc": 0,
                "stdout": "usage: --dist-init-addr --node-rank --nnodes --enable-metrics",
                "stderr": "",
            },
        },
    }


def _want() -> dict[str, Any]:
    argv = args_f.sglang_parse_execstart(SPARK2_EXECSTART)
    return {
        "unit": "sparkctl-sglang.service",
        "unit_path": "/etc/systemd/system/sparkctl-sglang.service",
        "env_files": [],
        "restart_sec": 30,
        "start_limit_burst": 3,
        "start_limit_interval": 600,
        "argv": argv,
        "node_rank": 1,
        "env_file": "/etc/sparkctl/sglang.env",
        "env": _ENV,
        "version_file": "/etc/sparkctl/sglang-version.env",
        "version": _VERSION,
        "secrets_file": SECRETS,
        "secrets_group": "sparkctl-sglang",
        "installed": ["/usr/bin/docker", LAUNCHER_PATH],
        "launcher": [
            "/usr/bin/docker",
            "run",
            "--rm",
            "--pull",
            "never",
            "--gpus",
            "all",
            IMAGE,
            "python3",
        ],
        "method": "container",
    }


def test_verify_problems_none_on_a_node_as_the_lab_left_it() -> None:
    assert args_f.sglang_verify_problems(_reading(), _want()) == []


def test_verify_holds_the_units_enablement_to_start_on_boot() -> None:
    """Off, the unit must be disabled (serve starts it); on, enabled, and the engine's
    service enabled with it (or static: started only as the unit's dependency)."""
    enabled = _reading()
    enabled["commands"]["show"]["stdout"] = SPARK2_SHOW.replace(
        "UnitFileState=disabled", "UnitFileState=enabled"
    )
    [off] = args_f.sglang_verify_problems(enabled, _want())
    assert "UnitFileState=enabled (want disabled: `sparkctl serve` starts it)" in off
    on = {**_want(), "start_on_boot": True, "engine_service": "docker.service"}
    for state, ok in (("enabled", True), ("static", True), ("disabled", False)):
        enabled["commands"]["engine_unit"] = {"rc": 0, "stdout": f"UnitFileState={state}\n"}
        problems = args_f.sglang_verify_problems(enabled, on)
        assert problems == (
            []
            if ok
            else [
                "docker.service is disabled at boot; want enabled: sparkctl-sglang.service starts "
                "at boot (sglang_start_on_boot) and needs it"
            ]
        ), problems
    [still_disabled] = args_f.sglang_verify_problems(_reading(), {**on, "engine_service": ""})
    assert "UnitFileState=disabled (want enabled: sglang_start_on_boot" in still_disabled


def test_verify_compares_the_rank_within_the_group() -> None:
    """spark4 of sim-two-groups.ini runs --node-rank 1: verify wants its group rank."""
    args = args_f.sglang_launch_args(TWO_GROUPS, 3, **TWO_LAUNCH)
    argv = args_f.sglang_exec_argv(args, "container", image=IMAGE)
    execstart = SPARK2_EXECSTART.replace(
        SPARK2_EXECSTART[
            SPARK2_EXECSTART.index("argv[]=") + 7 : SPARK2_EXECSTART.index(" ; ignore_errors")
        ],
        " ".join(argv),
    )
    reading = _reading()
    reading["commands"]["execstart"]["stdout"] = execstart
    want = {**_want(), "argv": argv, "node_rank": 1}
    assert args_f.sglang_verify_problems(reading, want) == []
    problems = args_f.sglang_verify_problems(reading, {**want, "node_rank": 3})
    assert len(problems) == 1 and "ExecStart of sparkctl-sglang.service runs" in problems[0]
    (task,) = [t for t in _yaml(ROLE / "tasks" / "verify.yml") if "Unit, command" in t["name"]]
    assert "'node_rank': _sglang_group.rank" in task["vars"]["__sglang_problems"]


def _spoil(path: list[str], value: Any) -> dict[str, Any]:
    reading = _reading()
    node = reading
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return reading


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (
            ["commands", "show", "stdout"],
            SPARK2_SHOW.replace("UnitFileState=disabled", "UnitFileState=enabled"),
            "UnitFileState=enabled (want disabled",
        ),
        (
            ["commands", "show", "stdout"],
            SPARK2_SHOW.replace("RestartUSec=30s", "RestartUSec=100ms"),
            "RestartUSec=100ms",
        ),
        (
            ["commands", "show", "stdout"],
            SPARK2_SHOW + "EnvironmentFiles=/etc/sparkctl/sglang-secrets.env (ignore_errors=no)\n",
            "environment files ['/etc/sparkctl/sglang-secrets.env'] (want [])",
        ),
        (
            ["commands", "execstart", "stdout"],
            SPARK2_EXECSTART.replace("--node-rank 1", "--node-rank 2"),
            "ExecStart of sparkctl-sglang.service runs",
        ),
        (["commands", "execstart", "stdout"], "", "no argv[] in ExecStart"),
        (
            ["files", "/etc/sparkctl/sglang.env", "content"],
            _env_text({**_ENV, "GLOO_SOCKET_IFNAME": "eth0"}),
            "/etc/sparkctl/sglang.env: GLOO_SOCKET_IFNAME='eth0', expected 'fab0'",
        ),
        (
            ["files", "/etc/sparkctl/sglang-version.env", "content"],
            "not an env file\n",
            "/etc/sparkctl/sglang-version.env: line 1 is not KEY=VALUE",
        ),
        (
            ["files", SECRETS, "mode"],
            "0644",
            f"{SECRETS} is root:sparkctl-sglang mode 0644; want root:sparkctl-sglang 0640",
        ),
        (
            ["files", SECRETS, "group"],
            "root",
            f"{SECRETS} is root:root mode 0640; want root:sparkctl-sglang 0640",
        ),
        (
            ["files", LAUNCHER_PATH],
            {"exists": False},
            "sglang-launcher.py is missing (container installation)",
        ),
        (
            ["commands", "help"],
            {"rc": 1, "stdout": "", "stderr": "ModuleNotFoundError: No module named 'torch'"},
            "--help: rc 1, ModuleNotFoundError",
        ),
    ],
)
def test_verify_problems_names_each_fault(path: list[str], value: Any, expected: str) -> None:
    problems = args_f.sglang_verify_problems(_spoil(path, value), _want())
    assert len(problems) == 1, problems
    assert expected in problems[0]


# ------------------------------------------------------- --mem-fraction-static
PROFILES = _yaml(
    REPO
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "cluster_defaults"
    / "vars"
    / "main.yml"
)["_cluster_defaults_hw_profiles"]


def test_every_profile_gives_a_memory_and_a_mem_fraction_the_role_passes() -> None:
    """The fraction is data of the hardware profile (0.75 on a Spark, NVIDIA's SGLang
    playbook for Spark), read by the role's default and passed on every rank's argv."""
    defaults = _yaml(ROLE / "defaults" / "main.yml")
    assert defaults["sglang_mem_fraction_static"] == "{{ cluster_hw.sglang_mem_fraction_static }}"
    assert PROFILES["dgx_spark"]["sglang_mem_fraction_static"] == 0.75
    assert PROFILES["dgx_spark"]["gpu_memory_gib"] == 119.7
    for name, profile in PROFILES.items():
        assert 0 < profile["sglang_mem_fraction_static"] < 1, name
        assert profile["gpu_memory_gib"] > 0, name
    launch = _yaml(ROLE / "vars" / "main.yml")["_sglang_launch_args"]
    assert "mem_fraction_static=sglang_mem_fraction_static" in launch


def test_the_launch_command_carries_the_mem_fraction() -> None:
    head = args_f.sglang_launch_args(SIM_NODES, 0, **LAUNCH, mem_fraction_static=0.75)
    at = head.index("--mem-fraction-static")
    assert head[at + 1] == "0.75"
    assert head[at - 2 : at] == ["--dist-timeout", "3600"]
    # Ansible may hand the templated default over as text.
    worker = args_f.sglang_launch_args(SIM_NODES, 1, **LAUNCH, mem_fraction_static="0.8")
    assert worker[worker.index("--mem-fraction-static") + 1] == "0.8"
    for bad in (0, 1, 1.5, -0.1, "x", True):
        with pytest.raises(args_f.AnsibleFilterError, match="sglang_mem_fraction_static"):
            args_f.sglang_launch_args(SIM_NODES, 0, **LAUNCH, mem_fraction_static=bad)


def test_the_inventory_may_not_set_the_fraction_through_extra_args() -> None:
    assert "--mem-fraction-static" in relations.SGLANG_DERIVED_FLAGS
    assert relations._flag_problem("--mem-fraction-static=0.9") is not None
    assert relations._flag_problem("--mem-frac") is not None


def _weights_argv(model: Path) -> list[str]:
    """vars/main.yml's _sglang_weights_command for ``model`` (its one template)."""
    raw = _yaml(ROLE / "vars" / "main.yml")["_sglang_weights_command"]
    return [str(word).replace("{{ sglang_model_path }}", str(model)) for word in raw]


def test_preflight_reads_the_weights_through_the_model_link(tmp_path: Path) -> None:
    """The command the preflight runs (find -L ... -printf '%s\\n'), run here on a hub-like
    layout: the model path is a link, each weight file a link to a blob; only
    *.safetensors count."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    snap = tmp_path / "snapshots" / "abc"
    snap.mkdir(parents=True)
    for i, size in enumerate((3000, 5000)):
        (blobs / f"b{i}").write_bytes(b"\0" * size)
        (snap / f"model-0000{i + 1}-of-00002.safetensors").symlink_to(blobs / f"b{i}")
    (snap / "config.json").write_text("{}")
    (tmp_path / "current").symlink_to(snap)
    argv = _weights_argv(tmp_path / "current")
    assert argv[0] == "find"
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert sorted(int(x) for x in out.split()) == [3000, 5000]
    missing = subprocess.run(
        _weights_argv(tmp_path / "none"), capture_output=True, text=True, check=False
    )
    assert missing.returncode != 0  # the preflight then judges nothing


def test_memory_check_refuses_weights_that_leave_no_kv_cache() -> None:
    gib = 1 << 30
    fits = f"{150 * gib}\n{150 * gib}\n"  # 300 GiB / tp 4 = 75 GiB + 2 <= 0.75 x 119.7
    assert args_f.sglang_memory_problems(fits, 4, 0.75, 119.7, 2) == []
    too_big = f"{180 * gib}\n{180 * gib}\n"  # 90 GiB per rank
    assert args_f.sglang_memory_problems(too_big, "4", "0.75", 119.7, 2) == [
        "weights 90.0 GiB per rank + minimum KV 2 GiB > 89.8 GiB (0.75 of 119.7 GiB) at tp 4 "
        "(360.0 GiB of weights): serve a smaller or more quantized model, use more Sparks in "
        "the group (sglang_tp_size), or raise sglang_mem_fraction_static if the node has "
        "room (lower sglang_min_kv_cache_gib only to start with a smaller KV cache); "
        "`sparkctl model plan INVENTORY` shows every layout"
    ]
    # The minimum KV cache counts: 88 GiB per rank fits 89.8 alone, not with 2 more.
    edge = f"{352 * gib}\n"
    assert args_f.sglang_memory_problems(edge, 4, 0.75, 119.7, 0) == []
    assert args_f.sglang_memory_problems(edge, 4, 0.75, 119.7, 2) != []
    # No model on the node yet: nothing to judge.
    assert args_f.sglang_memory_problems("", 4, 0.75, 119.7, 2) == []


def test_memory_check_splits_by_the_models_own_shape_when_its_config_is_read() -> None:
    """Llama-3.3-70B in bf16 (141.1 GB; tests/fixtures/model_configs): at TP 2 each rank
    holds 65.7 GiB of weights, and 0.75 x 119.7 GiB leaves 24.1 GiB of KV cache. With its
    config and index read, the filter takes the model's own split; 25 GiB of least KV
    cache do not fit, 2 do, and a config that is not JSON is the check's problem."""
    config = (
        REPO / "tests" / "fixtures" / "model_configs" / "Llama-3.3-70B-Instruct.json"
    ).read_text()
    total = 70_553_706_496 * 2
    index = json.dumps({"metadata": {"total_size": total}, "weight_map": {}})
    sizes = f"{total}\n"
    assert (
        args_f.sglang_memory_problems(
            sizes, 2, 0.75, 119.7, 2, config_text=config, index_text=index
        )
        == []
    )
    (problem,) = args_f.sglang_memory_problems(
        sizes, 2, 0.75, 119.7, 25, config_text=config, index_text=index
    )
    assert problem.startswith("weights 65.7 GiB per rank + minimum KV 25 GiB > 89.8 GiB")
    (bad,) = args_f.sglang_memory_problems(
        sizes, 2, 0.75, 119.7, 2, config_text="{", index_text=index
    )
    assert bad.startswith("the model's config.json is not JSON (")


# ------------------------------------------- the served image's local tag (install, verify)
SERVED_TAG = _yaml(ROLE / "vars" / "main.yml")["_sglang_served_tag"]


def test_the_served_tag_is_local_and_never_a_public_registrys() -> None:
    """distribution/reference normalize.go (splitDockerDomain): a first component
    `localhost` is always a registry domain, never a Docker Hub namespace."""
    domain, _, rest = SERVED_TAG.partition("/")
    assert domain == "localhost" and rest.count(":") == 1, SERVED_TAG
    container = [
        t for t in _yaml(ROLE / "tasks" / "install_container.yml") if "import_tasks" in str(t)
    ]
    assert [t["ansible.builtin.import_tasks"] for t in container] == ["install_served_tag.yml"]
    (task,) = [t for t in _yaml(ROLE / "tasks" / "verify.yml") if "Unit, command" in t["name"]]
    assert "'served_tag': _sglang_served_tag if _sglang_method == 'container'" in str(task["vars"])
    commands = _yaml(ROLE / "vars" / "main.yml")["_sglang_verify_commands"]
    assert "'served': [_sglang_engine.path, 'image', 'inspect'" in commands


def _node_with_pinned_image(tmp_path: Path) -> tuple[Any, Path, str, str]:
    """A docker data root of the lab's stand-in holding IMAGE@digest, pulled as a pinned
    image is; (the stand-in node, an engine path for the role, the reference, its id)."""
    from sparkctl_lab import registry  # noqa: PLC0415
    from tests.unit import test_lab_docker as lab_docker  # noqa: PLC0415

    if os.geteuid() != 0:
        pytest.skip("the docker stand-in's pull needs root (it keeps the layer's owners)")
    node = lab_docker.make_node(tmp_path / "node")
    digest = registry.read_index(node.registry)[registry.ImageRef.parse(lab_docker.IMAGE).key]
    pinned = f"{lab_docker.IMAGE}@{digest}"
    assert node.docker("pull", pinned).returncode == 0
    image_id = node.docker("image", "inspect", "--format", "{{.Id}}", pinned).stdout.strip()
    engine = tmp_path / "docker"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in node.env.items())
    engine.write_text(
        f"#!/bin/sh\n{exports}exec {shlex.quote(sys.executable)} "
        f'{shlex.quote(str(lab_docker.DOCKER_PY))} "$@"\n'
    )
    engine.chmod(0o755)
    return node, engine, pinned, image_id


def _play_served_tag(tmp_path: Path, engine: Path, image_ref: str, *, check: bool = False) -> int:
    """Runs roles/sglang/tasks/install_served_tag.yml with ansible-playbook on this host;
    returns how many tasks changed."""
    from tests.unit.pathload import ansible_playbook  # noqa: PLC0415

    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The served image's local tag",
                    "hosts": "localhost",
                    "gather_facts": False,
                    "vars": {
                        "_sglang_engine": {"path": str(engine)},
                        "_sglang_image_ref": image_ref,
                        "_sglang_served_tag": SERVED_TAG,
                    },
                    "tasks": [
                        {
                            "name": "The role's tasks",
                            "ansible.builtin.include_tasks": str(
                                ROLE / "tasks" / "install_served_tag.yml"
                            ),
                        }
                    ],
                }
            ]
        )
    )
    # The project's ansible.cfg enables profile_tasks, which would print into the JSON.
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\nstdout_callback = ansible.builtin.json\n")
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
    }
    proc = subprocess.run(
        [str(ansible_playbook()), "-i", "localhost,", "-c", "local", str(play)]
        + (["--check"] if check else []),
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    stats = json.loads(proc.stdout)["stats"]["localhost"]
    assert stats["failures"] == 0, proc.stdout[-4000:]
    return int(stats["changed"])


def _tag_reading(node: Any, image_ref: str) -> dict[str, Any]:
    """verify's two reads (vars/main.yml _sglang_verify_commands: image, served), as the
    stand-in answers them, in sparkctl_probe's shape."""
    commands = {}
    for name, ref in (("image", image_ref), ("served", SERVED_TAG)):
        done = node.docker("image", "inspect", "--format", "{{.Id}}", ref)
        commands[name] = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    return commands


def _tag_problems(node: Any, image_ref: str) -> list[str]:
    reading = _reading()
    reading["commands"].update(_tag_reading(node, image_ref))
    want = {**_want(), "served_tag": SERVED_TAG, "image_ref": image_ref}
    return list(args_f.sglang_verify_problems(reading, want))


def test_verify_without_the_served_image_names_it_missing() -> None:
    reading = _reading()
    gone = {
        "rc": 1,
        "stdout": "",
        "stderr": f"Error response from daemon: No such image: {IMAGE}\n",
    }
    reading["commands"].update({"image": gone, "served": gone})
    problems = args_f.sglang_verify_problems(
        reading, {**_want(), "served_tag": SERVED_TAG, "image_ref": IMAGE}
    )
    assert problems == [
        f"{SERVED_TAG} is missing (Error response from daemon: No such image: {IMAGE}), but the "
        f"unit runs {IMAGE}, which is missing (Error response from daemon: No such image: "
        f"{IMAGE}): without the tag on that image `docker image prune` deletes it while the "
        "service is down (sparkctl provision tags it)"
    ]
