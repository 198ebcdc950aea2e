"""``sparkctl render``: every file provisioning installs, from the inventory alone.

The real command (``sparkctl.render.render``, i.e. playbooks/render.yml through
ansible-runner, every task on the controller) runs once per inventory for the
session (tests/conftest.py ``rendered_inventory``): ``inventory/sim.ini`` (the
lab: linux switch, stand-in SGLang) with NO API key in the environment, and
``inventory/lab.ini`` (the real cluster's example: NVUE switch, SGLang
container) with a sentinel API key exported, which must not appear in any
rendered file. Every expectation is computed from the inventory (sparkctl's
own loader) and the roles' defaults, never copied from the rendered output.
"""

from __future__ import annotations

import ipaddress
import re
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkctl.inventory import Node
from tests.conftest import SENTINEL_KEY, Rendered
from tests.unit.pathload import load_file

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
ROLES = ROOT / "ansible_collections" / "sparkctl" / "spark" / "roles"
NCCL_ENV = load_file("nccl_env_filters", ROLES.parent / "plugins" / "filter" / "nccl_env.py")


def role_default(role: str, name: str) -> Any:
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())[name]


# Each inventory is rendered once per session (tests/conftest.py rendered_inventory),
# in the environment described there; the contract suite reads the same output.
@pytest.fixture
def sim(rendered_inventory: Callable[[str], Rendered]) -> Rendered:
    """The lab's inventory, rendered with no API key set at all."""
    return rendered_inventory("sim")


@pytest.fixture
def lab(rendered_inventory: Callable[[str], Rendered]) -> Rendered:
    """The real cluster's example inventory, rendered with a sentinel API key exported."""
    return rendered_inventory("lab")


@pytest.fixture
def two_groups(rendered_inventory: Callable[[str], Rendered]) -> Rendered:
    """inventory/sim-two-groups.ini: the lab's hosts as two SGLang TP groups of two."""
    return rendered_inventory("sim-two-groups")


@pytest.fixture(params=["sim", "lab"])
def rendered(request: pytest.FixtureRequest) -> Iterator[Rendered]:
    yield request.getfixturevalue(request.param)


def _nodes(r: Rendered) -> tuple[Node, ...]:
    assert len(r.inv.nodes) == 4, r.inv.nodes
    return r.inv.nodes


def test_one_directory_per_node_and_for_the_switch(rendered: Rendered) -> None:
    assert rendered.inv.switch is not None
    hosts = {p.name for p in rendered.out.iterdir()}
    assert hosts == {n.name for n in rendered.inv.nodes} | {rendered.inv.switch.name}


def test_netplan_addresses_and_mtu_follow_the_inventory(rendered: Rendered) -> None:
    netplan_file = role_default("roce_fabric", "roce_fabric_netplan_file")
    mtu = rendered.inv.cluster_var(
        "roce_fabric_mtu", role_default("roce_fabric", "roce_fabric_mtu")
    )
    for node in _nodes(rendered):
        ethernets = yaml.safe_load(rendered.read(node.name, netplan_file))["network"]["ethernets"]
        for twin in ("a", "b"):
            netdev = rendered.inv.hostvars[node.name][f"fabric_{twin}_netdev"]
            prefix = ipaddress.ip_network(
                rendered.inv.hostvars[node.name][f"fabric_{twin}_subnet"]
            ).prefixlen
            assert ethernets[netdev]["addresses"] == [f"{node.fabric_ips[twin]}/{prefix}"], node
            assert ethernets[netdev]["mtu"] == mtu, node
        assert set(ethernets) == {
            rendered.inv.hostvars[node.name]["fabric_a_netdev"],
            rendered.inv.hostvars[node.name]["fabric_b_netdev"],
        }


def test_nccl_files_name_both_twins_and_the_socket_interface(rendered: Rendered) -> None:
    conf_file = role_default("nccl", "nccl_conf_file")
    env_file = role_default("nccl", "nccl_env_file")
    for node in _nodes(rendered):
        a_netdev = rendered.inv.hostvars[node.name]["fabric_a_netdev"]
        conf = rendered.env(node.name, conf_file)
        env = rendered.env(node.name, env_file)
        # Both twins of port 1 (rocep1s0f1 and roceP2p1s0f1), as the defaults list them:
        # the RoCE devices roce_fabric addresses, and no port-0 device it never does.
        assert conf["NCCL_IB_HCA"].split(",") == role_default("nccl", "nccl_ib_hca"), node
        assert conf["NCCL_IB_HCA"].split(",") == [
            role_default("roce_fabric", "roce_fabric_ibdev_a"),
            role_default("roce_fabric", "roce_fabric_ibdev_b"),
        ], node
        assert conf["NCCL_SOCKET_IFNAME"] == a_netdev, node
        # nccl.conf is the NCCL_* part of the environment file, value for value.
        assert conf == {k: v for k, v in env.items() if k.startswith("NCCL_")}, node
        for var in (
            "GLOO_SOCKET_IFNAME",
            "TP_SOCKET_IFNAME",
            "UCX_NET_DEVICES",
            "OMPI_MCA_btl_tcp_if_include",
        ):
            assert env[var] == a_netdev, (node, var)


def test_nccl_gid_index_is_a_declared_placeholder_when_detected_on_the_node(
    rendered: Rendered,
) -> None:
    assert role_default("nccl", "nccl_ib_gid_index") == "auto"
    for path in (role_default("nccl", "nccl_conf_file"), role_default("nccl", "nccl_env_file")):
        for node in _nodes(rendered):
            text = rendered.read(node.name, path)
            value = NCCL_ENV.nccl_parse_env(text)["NCCL_IB_GID_INDEX"]
            assert not value.isdigit() and value.startswith("<"), (node, path, value)
            comments = [line for line in text.splitlines() if line.startswith("#")]
            assert any(
                "NCCL_IB_GID_INDEX" in c and "detect" in c and "on the node" in c for c in comments
            ), (node, path, comments)
            # Older NCCL releases read a comment line with "=" as a variable.
            assert not any("=" in c for c in comments), (node, path, comments)


def test_sglang_unit_and_environment_per_rank(rendered: Rendered) -> None:
    dist_port = role_default("sglang", "sglang_dist_port")
    head = next(n for n in _nodes(rendered) if n.rank == 0)
    for node in _nodes(rendered):
        unit = rendered.read(node.name, "/etc/systemd/system/sparkctl-sglang.service")
        (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
        # the key is required: the launcher reads it from the mounted secrets file
        launcher = (
            "python3 /usr/local/lib/sparkctl/sglang-launcher.py --secrets-file "
            f"{role_default('sglang', 'sglang_secrets_file')} -- "
        )
        assert launcher in exec_start, exec_start
        assert f"--node-rank {node.rank} " in exec_start, (node, exec_start)
        assert f"--nnodes {len(rendered.inv.nodes)} " in exec_start, exec_start
        assert f"--dist-init-addr {head.fabric_ips['a']}:{dist_port} " in exec_start, exec_start
        # the container method on every profile: the container's environment is docker's
        # --env-file, never the unit's EnvironmentFile= (docker does not pass that on)
        assert "EnvironmentFile=" not in unit
        assert (
            "--env-file /etc/sparkctl/nccl.env --env-file "
            f"{role_default('sglang', 'sglang_env_file')} "
        ) in exec_start
        # the image by its digest: not pinned in these inventories, so the one provision
        # pulls (render cannot know it and says so)
        image = role_default("sglang", "sglang_image")
        assert f'"{image}@<digest-pulled-at-provision>" python3 ' in exec_start
        assert f"# The image is the digest this node pulled for {image}" in unit
        env = rendered.env(node.name, role_default("sglang", "sglang_env_file"))
        assert env["SGLANG_HOST_IP"] == node.fabric_ips["a"], node
        assert env["GLOO_SOCKET_IFNAME"] == rendered.inv.hostvars[node.name]["fabric_a_netdev"]


def _profile(r: Rendered) -> dict[str, Any]:
    """The inventory's hardware profile, from cluster_defaults' table."""
    profiles = yaml.safe_load((ROLES / "cluster_defaults" / "vars" / "main.yml").read_text())
    name = r.inv.hostvars[r.inv.nodes[0].name]["hw_profile"]
    return dict(profiles["_cluster_defaults_hw_profiles"][name])


def test_nccl_net_is_ib_exactly_where_the_profile_has_rdma(rendered: Rendered) -> None:
    """NCCL_NET=IB (fail instead of a silent fallback to sockets) in the nccl role's files
    and the server's own environment where cluster_hw.rdma; nowhere on the lab's sim."""
    rdma = _profile(rendered)["rdma"]
    for node in _nodes(rendered):
        for path in (
            role_default("nccl", "nccl_conf_file"),
            role_default("nccl", "nccl_env_file"),
            role_default("sglang", "sglang_env_file"),
        ):
            env = rendered.env(node.name, path)
            assert env.get("NCCL_NET") == ("IB" if rdma else None), (node, path)


def test_every_rank_gets_the_profiles_mem_fraction(rendered: Rendered) -> None:
    fraction = _profile(rendered)["sglang_mem_fraction_static"]
    for node in _nodes(rendered):
        unit = rendered.read(node.name, "/etc/systemd/system/sparkctl-sglang.service")
        (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
        assert f" --mem-fraction-static {fraction} " in exec_start + " ", exec_start


def _tp_groups(r: Rendered) -> dict[str, list[Node]]:
    """sglang_group -> its Sparks in rank order (the inventory's, else the role's default)."""
    groups: dict[str, list[Node]] = {}
    for node in r.inv.nodes:
        name = r.inv.hostvars[node.name].get("sglang_group", role_default("sglang", "sglang_group"))
        groups.setdefault(str(name), []).append(node)
    return groups


def test_sglang_two_groups_rank_within_their_group(two_groups: Rendered) -> None:
    dist_port = role_default("sglang", "sglang_dist_port")
    port = role_default("sglang", "sglang_port")
    groups = _tp_groups(two_groups)
    assert {g: [n.name for n in m] for g, m in groups.items()} == {
        "a": ["spark1", "spark2"],
        "b": ["spark3", "spark4"],
    }
    for name, members in groups.items():
        head, size = members[0], len(members)
        for position, node in enumerate(members):
            unit = two_groups.read(node.name, "/etc/systemd/system/sparkctl-sglang.service")
            (exec_start,) = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
            assert (
                f" --tp-size {size} --nnodes {size} --node-rank {position} --dist-init-addr "
                f"{head.fabric_ips['a']}:{dist_port} "
            ) in exec_start, (node, exec_start)
            bind = role_default("sglang", "sglang_host" if position == 0 else "sglang_worker_host")
            assert f" --host {bind} --port {port} " in exec_start, (node, exec_start)
            assert (
                f"Description=SGLang group {name} TP={size} node rank {position} (sparkctl)"
                in unit.splitlines()
            ), unit


def test_sglang_two_groups_change_nothing_but_the_units(
    sim: Rendered, two_groups: Rendered
) -> None:
    """Same hosts and addresses as sim.ini: every other file is the same, byte for byte,
    but the Prometheus configuration of the [monitoring] hosts (one SGLang target a group),
    and on the first head the gateway's unit and its ports in the firewall
    (sim-two-groups.ini, [sparks:vars])."""
    unit = "etc/systemd/system/sparkctl-sglang.service"
    gateway = "spark1/etc/systemd/system/sparkctl-gateway.service"
    files = {f.relative_to(sim.out).as_posix() for f in sim.files}
    assert {f.relative_to(two_groups.out).as_posix() for f in two_groups.files} == files | {gateway}
    differ = sorted(
        f for f in files if (sim.out / f).read_bytes() != (two_groups.out / f).read_bytes()
    )
    prometheus = [f"{h}/etc/prometheus/prometheus.yml" for h in sim.inv.groups["monitoring"]]
    firewall = ["spark1/etc/sparkctl/sglang-firewall.nft"]
    assert differ == sorted([f"{n.name}/{unit}" for n in sim.inv.nodes] + prometheus + firewall), (
        differ
    )


def test_the_gateway_runs_on_the_first_head_with_the_key_from_the_file(
    two_groups: Rendered,
) -> None:
    """smg through the role's launcher (--module smg.launch_router, --secrets-file): no key
    and no placeholder on its command line; its API and metrics ports open to the API's
    sources on its host only."""
    unit = two_groups.read("spark1", "/etc/systemd/system/sparkctl-gateway.service")
    (execstart,) = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    assert execstart.startswith(
        "ExecStart=/opt/sparkctl/smg/bin/python3 /usr/local/lib/sparkctl/sglang-launcher.py "
        "--secrets-file /etc/sparkctl/sglang-secrets.env --module smg.launch_router -- "
    ), execstart
    assert "--api-key" not in execstart and "SPARKCTL_SGLANG_API_KEY" not in unit
    assert "--port 30080" in execstart and "--prometheus-port 29000" in execstart
    assert "BindsTo=sparkctl-sglang-firewall.service" in unit
    rules = two_groups.read("spark1", "/etc/sparkctl/sglang-firewall.nft")
    assert "ip saddr @sglang_api_v4 tcp dport { 29000, 30000, 30080 } accept" in rules
    other = two_groups.read("spark3", "/etc/sparkctl/sglang-firewall.nft")
    assert "ip saddr @sglang_api_v4 tcp dport 30000 accept" in other


def test_sglang_firewall_and_its_unit(rendered: Rendered) -> None:
    for node in _nodes(rendered):
        rules = rendered.read(node.name, "/etc/sparkctl/sglang-firewall.nft")
        subnets = ", ".join(
            [
                rendered.inv.hostvars[node.name]["fabric_a_subnet"],
                rendered.inv.hostvars[node.name]["fabric_b_subnet"],
            ]
        )
        assert f"elements = {{ {subnets} }}" in rules, rules
        peers = ", ".join(f"{n.mgmt_ip}/32" for n in rendered.inv.nodes)
        assert f"elements = {{ {peers} }}" in rules, rules
        unit = rendered.read(node.name, "/etc/systemd/system/sparkctl-sglang-firewall.service")
        assert "ExecStart=/usr/sbin/nft --file /etc/sparkctl/sglang-firewall.nft" in unit


def test_secrets_file_holds_a_placeholder_with_the_mode_provision_gives_it(
    rendered: Rendered,
) -> None:
    """The mode is the one configure writes (the role's one file list): readable by the
    server's group, since the server runs as sglang_user (default sparkctl-sglang)."""
    secrets_file = role_default("sglang", "sglang_secrets_file")
    assert role_default("sglang", "sglang_user") != "root"
    for node in _nodes(rendered):
        env = rendered.env(node.name, secrets_file)
        assert env == {"SGLANG_API_KEY": "<set from SPARKCTL_SGLANG_API_KEY at provision time>"}
        mode = stat.S_IMODE((rendered.out / node.name / secrets_file.lstrip("/")).stat().st_mode)
        assert mode == 0o640, oct(mode)
        # The key is required by default, so the server is started with one, read by the
        # launcher from the file (never expanded into argv, where ps shows it, nor into
        # an environment, which docker inspect shows).
        unit = rendered.read(node.name, "/etc/systemd/system/sparkctl-sglang.service")
        assert f"--secrets-file {secrets_file} -- " in unit
        assert f"--volume {secrets_file}:{secrets_file}:ro " in unit
        assert "SGLANG_API_KEY" not in unit


def test_no_api_key_in_any_rendered_file(lab: Rendered) -> None:
    assert lab.files, "nothing rendered"
    leaked = [str(f) for f in lab.files if SENTINEL_KEY.encode() in f.read_bytes()]
    assert leaked == []


def test_render_leaves_nothing_on_the_controller_but_its_run_record(rendered: Rendered) -> None:
    """No key file or other state is generated: only the ansible-runner artifacts."""
    left = sorted(
        p.relative_to(rendered.state).as_posix()
        for p in rendered.state.rglob("*")
        if p.is_file() and p.relative_to(rendered.state).parts[0] not in {"results"}
    )
    assert left == []


def test_linux_switch_desired_state_and_boot_unit(sim: Rendered) -> None:
    assert sim.inv.switch is not None and sim.inv.switch.os == "linux"
    mtu = role_default("switch_mtu", "switch_mtu_value")
    ports = [p.name for p in sim.inv.ports]
    state = yaml.safe_load(sim.read(sim.inv.switch.name, "/etc/sparkctl/switch-ports.json"))
    assert state == {"mtu": mtu, "ports": sorted(ports, key=lambda p: int(p[3:]))}
    unit = sim.read(sim.inv.switch.name, "/etc/systemd/system/sparkctl-switch-port-mtu.service")
    assert "--state-file /etc/sparkctl/switch-ports.json" in unit
    switch_files = {
        f.relative_to(sim.out / sim.inv.switch.name).as_posix()
        for f in sim.files
        if f.is_relative_to(sim.out / sim.inv.switch.name)
    }
    assert switch_files == {
        "etc/sparkctl/switch-ports.json",
        "etc/systemd/system/sparkctl-switch-port-mtu.service",
    }


def test_nvue_switch_patch_covers_exactly_the_inventory_ports(lab: Rendered) -> None:
    """The nv config patch file holds every inventory port (MTU, the forced
    speed, auto-negotiation off, access in the one VLAN), staged on a clean
    slate, applied with the switch's own rollback, then confirmed."""
    assert lab.inv.switch is not None and lab.inv.switch.os == "nvue"
    switch_dir = lab.out / lab.inv.switch.name
    switch_files = sorted(
        p.relative_to(switch_dir).as_posix() for p in switch_dir.rglob("*") if p.is_file()
    )
    assert switch_files == ["etc/sparkctl/nvue-fabric.yaml", "nvue-commands.txt"]
    defaults = {
        name: role_default("switch_mtu", f"switch_mtu_{name}")
        for name in ("value", "speed", "autoneg", "vlan_id", "bridge")
    }
    (op,) = yaml.safe_load(lab.read(lab.inv.switch.name, "/etc/sparkctl/nvue-fabric.yaml"))
    tree = op["set"]
    assert tree["bridge"] == {
        "domain": {defaults["bridge"]: {"vlan": {str(defaults["vlan_id"]): {}}}}
    }
    assert sorted(tree["interface"]) == sorted(p.name for p in lab.inv.ports)
    for port in tree["interface"].values():
        assert port == {
            "link": {
                "mtu": defaults["value"],
                "speed": defaults["speed"],
                "auto-negotiate": "on" if defaults["autoneg"] else "off",
            },
            "bridge": {"domain": {defaults["bridge"]: {"access": defaults["vlan_id"]}}},
        }
    commands = [
        line
        for line in (switch_dir / "nvue-commands.txt").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    confirm = role_default("switch_mtu", "switch_mtu_confirm_seconds")
    assert commands == [
        "nv config detach",
        "nv config patch /etc/sparkctl/nvue-fabric.yaml",
        f"nv config apply --confirm {confirm}s --assume-yes",
        "nv config apply --confirm-yes",
        "nv config save",
    ]


NVIDIA_HOLD = load_file(
    "nvidia_hold_filters", ROLES.parent / "plugins" / "filter" / "nvidia_hold.py"
)
NVIDIA_VARS = yaml.safe_load((ROLES / "nvidia_driver" / "vars" / "main.yml").read_text())


def _nvidia_hold_set(r: Rendered) -> list[str]:
    """The hold set from the inventory and nvidia_driver's defaults, written out by hand."""

    def var(name: str) -> Any:
        return r.inv.cluster_var(name, role_default("nvidia_driver", name))

    flavour, branch = var("nvidia_driver_kernel_flavour"), var("nvidia_driver_branch")
    driver = [
        f"{name}-{branch}{tail}"
        for name, tails in (
            ("nvidia-driver", ("", "-*")),
            ("nvidia-dkms", ("", "-*")),
            ("nvidia-kernel-common", ("",)),
            ("nvidia-kernel-source", ("", "-*")),
            ("nvidia-utils", ("", "-*")),
            ("nvidia-compute-utils", ("", "-*")),
            ("nvidia-firmware", ("-*",)),
            ("libnvidia-*", ("",)),
            ("xserver-xorg-video-nvidia", ("",)),
            ("cuda-drivers", ("",)),
        )
        for tail in tails
    ]
    return [
        *driver,
        f"cuda-*-{var('nvidia_driver_cuda_package_version')}",
        *var("nvidia_driver_hold_packages"),
        *(
            f"linux-{part}{flavour}"
            for part in ("", "image-", "headers-", "tools-", "modules-nvidia-fs-")
        ),
        f"linux-modules-nvidia-{branch}-open-*",
    ]


def test_nvidia_hold_set_and_unattended_upgrades_blacklist_are_rendered(rendered: Rendered) -> None:
    apt_conf = NVIDIA_VARS["_nvidia_driver_apt_conf"]
    hold_list = NVIDIA_VARS["_nvidia_driver_hold_list"]
    patterns = _nvidia_hold_set(rendered)
    assert "linux-image-nvidia-hwe-24.04" in patterns
    assert "linux-modules-nvidia-580-open-*" in patterns
    for node in _nodes(rendered):
        listed = [
            line
            for line in rendered.read(node.name, hold_list).splitlines()
            if line and not line.startswith("#")
        ]
        assert listed == patterns, node
        conf = rendered.read(node.name, apt_conf)
        block = conf[conf.index("Unattended-Upgrade::Package-Blacklist {") :]
        entries = re.findall(r'^\s+"([^"]*)";$', block[: block.index("};")], re.M)
        assert entries == [NVIDIA_HOLD.nvidia_hold_regex(p) for p in patterns], node
        # As unattended-upgrades reads them (re.match): the kernel moves with the driver.
        for name in (
            "linux-image-nvidia-hwe-24.04",
            "nvidia-kernel-common-580",
            "linux-modules-nvidia-580-open-6.17.0-1014-nvidia",
        ):
            assert any(re.match(e, name) for e in entries), (node, name)
        assert not any(re.match(e, "libnccl2-dbg") for e in entries), node
        # The container toolkit and the repository key keep their updates.
        for name in ("libnvidia-container1", "libnvidia-container-tools", "cuda-keyring"):
            assert not any(re.match(e, name) for e in entries), (node, name)
