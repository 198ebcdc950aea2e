"""roles/sglang on two addressed Sparks (hw_profile sim): the state it leaves.

The sim profile takes the install path of a real Spark: the pinned image by its
digest through docker (the lab's docker stand-in, whose image holds the lab's
SGLang stand-in), the launcher, the server's own user.

Each test is one case per Spark (and per variable, port or path); expected
values come from the scenario's inventory and the role's defaults. The
firewall is also tested by behaviour: connections to the head from the other
rank (over both twins and the management network) and from the controller.
"""

# testinfra tests assert; pyproject's per-file-ignores cover tests/** only.
# ruff: noqa: S101

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from verify_helpers import (
    DEFAULTS,
    HEAD,
    HOSTVARS,
    MGMT,
    SPARKS,
    assert_running,
    collection_plugin,
    instance,
    name_of,
    podman,
    read_env,
    role_yaml,
)

ARGS_FILTERS = collection_plugin("filter", "sglang_args")
(WORKER,) = [n for n in SPARKS if n != HEAD]
testinfra_hosts = [podman(name) for name in SPARKS]

UNIT = "sparkctl-sglang.service"
FW_UNIT = "sparkctl-sglang-firewall.service"
ENV_FILE = DEFAULTS["sglang_env_file"]
SECRETS = DEFAULTS["sglang_secrets_file"]
NCCL_ENV = DEFAULTS["sglang_nccl_env_file"]
LAUNCHER = "/usr/local/lib/sparkctl/sglang-launcher.py"
VERSION_FILE = DEFAULTS["sglang_version_file"]
USER, UID = DEFAULTS["sglang_user"], DEFAULTS["sglang_uid"]
DIST_PORT = DEFAULTS["sglang_dist_port"]
API_PORT = DEFAULTS["sglang_port"]


def exec_start(host: Any) -> list[str]:
    """argv of the unit's ExecStart as systemd loaded it, read back by the role's own filter."""
    show = host.check_output("systemctl show -p ExecStart --value %s", UNIT)
    return list(ARGS_FILTERS.sglang_parse_execstart(show))


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_environment_pins_the_fabric(host: Any) -> None:
    hv = HOSTVARS[name_of(host)]
    assert read_env(host, ENV_FILE) == {
        "SGLANG_HOST_IP": hv["fabric_a_ip"],
        "GLOO_SOCKET_IFNAME": hv["fabric_a_netdev"],
        "NCCL_SOCKET_IFNAME": hv["fabric_a_netdev"],
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "HOME": DEFAULTS["sglang_home"],
    }


def test_the_server_has_its_own_system_user(host: Any) -> None:
    user = host.user(USER)
    assert (user.exists, user.uid, user.gid, user.shell) == (True, UID, UID, "/usr/sbin/nologin")
    home = host.file(DEFAULTS["sglang_home"])
    assert (home.is_directory, home.user, home.mode) == (True, USER, 0o750)


def test_api_key_is_readable_by_the_server_only(host: Any) -> None:
    secrets = host.file(SECRETS)
    assert (secrets.user, secrets.group, secrets.mode) == ("root", USER, 0o640)
    assert read_env(host, SECRETS) == {"SGLANG_API_KEY": HOSTVARS[name_of(host)]["sglang_api_key"]}


def test_unit_is_installed_disabled_and_not_started(host: Any) -> None:
    props = host.service(UNIT).systemd_properties
    assert props["LoadState"] == "loaded"
    assert props["UnitFileState"] == "disabled"
    assert props["ActiveState"] == "inactive"
    assert props["Restart"] == "on-failure"


def test_the_container_gets_nccl_then_its_own_environment_and_no_key(host: Any) -> None:
    lines = host.file(f"/etc/systemd/system/{UNIT}").content_string.splitlines()
    assert not [line for line in lines if line.startswith("EnvironmentFile=")]
    argv = exec_start(host)
    assert [argv[i + 1] for i, w in enumerate(argv) if w == "--env-file"] == [NCCL_ENV, ENV_FILE]
    assert f"{SECRETS}:{SECRETS}:ro" in argv and option(argv, "--user") == f"{UID}:{UID}"


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--tp-size", str(len(SPARKS))),
        ("--nnodes", str(len(SPARKS))),
        ("--dist-init-addr", f"{HOSTVARS[HEAD]['fabric_a_ip']}:{DIST_PORT}"),
        ("--port", str(API_PORT)),
        ("--model-path", DEFAULTS["sglang_model_path"]),
    ],
)
def test_launch_argument(host: Any, flag: str, expected: str) -> None:
    assert option(ARGS_FILTERS.sglang_server_args(exec_start(host)), flag) == expected


def test_rank_and_bind_address(host: Any) -> None:
    argv = exec_start(host)
    # The key is required: the launcher reads it from the mounted secrets file and runs
    # sglang.launch_server; no key and no ${SGLANG_API_KEY} on the command line.
    assert argv[:2] == ["/usr/bin/docker", "run"]
    image = argv.index("python3")
    assert argv[image + 1 : image + 5] == [LAUNCHER, "--secrets-file", SECRETS, "--"]
    assert "--api-key" not in argv and not any("SGLANG_API_KEY" in a for a in argv)
    assert HOSTVARS[name_of(host)]["sglang_api_key"] not in " ".join(argv)
    argv = ARGS_FILTERS.sglang_server_args(argv)
    assert option(argv, "--node-rank") == str(HOSTVARS[name_of(host)]["node_rank"])
    # Only the head serves the HTTP API beyond loopback.
    expected = DEFAULTS["sglang_host"] if name_of(host) == HEAD else DEFAULTS["sglang_worker_host"]
    assert option(argv, "--host") == expected


def test_the_unit_runs_the_image_this_node_pulled_by_its_digest(host: Any) -> None:
    record = read_env(host, VERSION_FILE)["SGLANG_IMAGE"]
    name, _, digest = record.partition("@")
    assert name == DEFAULTS["sglang_image"] and digest.startswith("sha256:")
    argv = exec_start(host)
    assert argv[argv.index("python3") - 1] == record
    pulled = host.check_output("docker image inspect --format '{{json .RepoDigests}}' %s", name)
    assert f"{name.rsplit(':', 1)[0]}@{digest}" in pulled


def test_a_routine_image_prune_keeps_the_image_the_unit_runs(host: Any) -> None:
    """The image pulled by its digest has no tag of its own: the role's local tag
    (tasks/install_served_tag.yml) keeps `docker image prune` from deleting it."""
    image = read_env(host, VERSION_FILE)["SGLANG_IMAGE"]
    tag = role_yaml("vars")["_sglang_served_tag"]
    ids = [
        host.check_output("docker image inspect --format '{{.Id}}' %s", ref) for ref in (image, tag)
    ]
    assert ids[0] == ids[1] and ids[0].startswith("sha256:"), ids
    host.check_output("docker image prune -f")
    assert host.check_output("docker image inspect --format '{{.Id}}' %s", image) == ids[0]


def test_the_server_in_the_image_loads(host: Any) -> None:
    image = read_env(host, VERSION_FILE)["SGLANG_IMAGE"]
    usage = host.run(
        "docker run --rm --pull never --gpus all %s python3 -m sglang.launch_server --help", image
    )
    assert usage.rc == 0, usage.stderr
    for flag in ("--dist-init-addr", "--node-rank", "--nnodes", "--enable-metrics", "--tp-size"):
        assert flag in usage.stdout


def test_firewall_unit_is_active_and_enabled(host: Any) -> None:
    assert_running(host, FW_UNIT)  # oneshot, RemainAfterExit: active (exited)


def test_firewall_accepts_the_fabric_subnets(host: Any) -> None:
    table = host.check_output("nft list set inet sparkctl sglang_fabric_v4")
    hv = HOSTVARS[name_of(host)]
    assert f"elements = {{ {hv['fabric_a_subnet']}, {hv['fabric_b_subnet']} }}" in table


def test_firewall_accepts_the_sparks_management_addresses(host: Any) -> None:
    table = host.check_output("nft list set inet sparkctl sglang_peers_v4")
    assert f"elements = {{ {', '.join(MGMT[n] for n in SPARKS)} }}" in table


@pytest.fixture(scope="module")
def listeners() -> Iterator[None]:
    """TCP listeners on the head's rendezvous and API ports, as the server would open."""
    head = instance(HEAD)
    for port in (DIST_PORT, API_PORT):
        head.run_test(
            "systemd-run --unit=mol-listen-%s python3 -m http.server %s", str(port), str(port)
        )
    for port in (DIST_PORT, API_PORT):
        head.run_test(
            "for i in $(seq 50); do ss -Hltn 'sport = :%s' | grep -q . && exit 0; "
            "sleep 0.1; done; exit 1",
            str(port),
        )
    yield
    for port in (DIST_PORT, API_PORT):
        head.run("systemctl stop mol-listen-%s", str(port))


def connect(source: str, address: str, port: int) -> tuple[bool, str]:
    """TCP connect from ``source`` (a Spark, or "controller": this host) -> (ok, error)."""
    if source == "controller":
        try:
            socket.create_connection((address, port), timeout=3).close()
        except OSError as exc:
            return False, str(exc) or type(exc).__name__
        return True, ""
    probe = instance(source).run(
        "python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])),"
        " timeout=3)' %s %s",
        address,
        str(port),
    )
    return probe.rc == 0, probe.stderr


# The rendezvous ports accept the fabric subnets and the Sparks' management
# addresses (sglang_firewall_peer_cidrs: Open MPI's out-of-band channel), and
# drop anyone else - here the controller, on the scenario network's gateway;
# the API port accepts the Sparks' management network (sglang_api_allowed_cidrs'
# default, where the controller is) and drops the rest (a fabric address).
@pytest.mark.parametrize(
    ("port", "source", "via", "reachable"),
    [
        (DIST_PORT, WORKER, "fabric_a_ip", True),
        (DIST_PORT, WORKER, "fabric_b_ip", True),
        (DIST_PORT, WORKER, "management", True),
        (DIST_PORT, "controller", "management", False),
        (API_PORT, "controller", "management", True),
        (API_PORT, WORKER, "fabric_a_ip", False),
    ],
    ids=[
        "dist-from-peer-fabric-a",
        "dist-from-peer-fabric-b",
        "dist-from-peer-management",
        "dist-from-controller",
        "api-from-controller",
        "api-from-outside-the-management-net",
    ],
)
def test_head_port_reachable_only_as_the_firewall_says(
    listeners: None, port: int, source: str, via: str, reachable: bool
) -> None:
    address = MGMT[HEAD] if via == "management" else HOSTVARS[HEAD][via]
    ok, error = connect(source, address, port)
    if reachable:
        assert ok, error
    else:
        assert not ok
        assert "timed out" in error  # dropped, not refused: the firewall, not the port
