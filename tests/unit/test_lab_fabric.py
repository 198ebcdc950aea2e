"""sparkctl_lab.fabric: tc/ip command builders, names, parsing of tc's JSON.

The pure functions are checked against literal expectations; one test runs
the generated commands for real in throwaway network namespaces (root only)
and reads the result back with ``tc -j``, so the commands are known to be
accepted by this kernel and iproute2, not just well-formed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl_lab import fabric
from sparkctl_lab.fabric import Cable

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
IFNAMSIZ = 16  # include/uapi/linux/if.h: names are at most 15 characters plus NUL
KIB = 1024

# `tc -j qdisc show` captured on this controller (iproute2 6.1.0, Debian 12) with:
#   ip netns add t2
#   ip -n t2 link add swp1 type veth peer name p1
#   ip -n t2 link set swp1 up; ip -n t2 link set p1 up
#   ip -n t2 link add ifb-swp1 type ifb; ip -n t2 link set ifb-swp1 up
#   ip netns exec t2 tc qdisc add dev swp1 handle ffff: ingress
#   ip netns exec t2 tc qdisc replace dev swp1 root tbf rate 1000mbit burst 131072 latency 25ms
#   ip netns exec t2 tc qdisc replace dev ifb-swp1 root tbf rate 250mbit burst 131072 latency 25ms
#   ip netns exec t2 tc -j qdisc show
#   ip netns del t2
# tc reports the tbf rate in BYTES per second (1000 Mbit/s -> 125000000).
TC_QDISC_JSON = (
    '[{"kind":"noqueue","handle":"0:","dev":"p1","root":true,"refcnt":2,"options":{}},'
    '{"kind":"tbf","handle":"8013:","dev":"swp1","root":true,"refcnt":3,'
    '"options":{"rate":125000000,"burst":131000,"lat":25000}},'
    '{"kind":"ingress","handle":"ffff:","dev":"swp1","parent":"ffff:fff1","options":{}},'
    '{"kind":"tbf","handle":"8014:","dev":"ifb-swp1","root":true,"refcnt":2,'
    '"options":{"rate":31250000,"burst":131062,"lat":25000}}]'
)
# A single-device capture, made with:
#   ip netns add t1; ip -n t1 link add d0 type ifb; ip -n t1 link set d0 up
#   ip netns exec t1 tc qdisc add dev d0 root tbf rate 250mbit burst 131072 latency 25ms
#   ip netns exec t1 tc -j qdisc show; ip netns del t1
TC_QDISC_JSON_IFB = (
    '[{"kind":"tbf","handle":"8012:","dev":"d0","root":true,"refcnt":2,'
    '"options":{"rate":31250000,"burst":131062,"lat":25000}}]'
)


def _burst(cmd: list[str]) -> int:
    return int(cmd[cmd.index("burst") + 1])


# ----------------------------------------------------------- rate_commands
def test_rate_commands_literal() -> None:
    tbf = ["tbf", "rate", "250mbit", "burst", "131072", "latency", "25ms"]
    assert fabric.rate_commands("swp3", "ifb-swp3", 250) == [
        ["tc", "qdisc", "replace", "dev", "swp3", "root", *tbf],
        ["tc", "qdisc", "replace", "dev", "ifb-swp3", "root", *tbf],
    ]


@pytest.mark.parametrize("rate", [1, 100, 250, 1000, 10_000, 200_000])
def test_rate_commands_shape_both_directions(rate: int) -> None:
    cmds = fabric.rate_commands("swp1", "ifb-swp1", rate)
    # Egress on the port, ingress on the ifb its ingress is redirected to.
    assert [c[c.index("dev") + 1] for c in cmds] == ["swp1", "ifb-swp1"]
    for cmd in cmds:
        assert cmd[:3] == ["tc", "qdisc", "replace"]  # replace: also changes a live port
        assert cmd[cmd.index("rate") + 1] == f"{rate}mbit"
        assert _burst(cmd) >= 128 * KIB
        # At least 4 ms worth of tokens at the rate (rate bits/s / 8 * 0.004 s).
        assert _burst(cmd) >= rate * 1_000_000 // 8 * 4 // 1000


def test_burst_for_10_gbit() -> None:
    burst = _burst(fabric.rate_commands("swp1", "ifb-swp1", 10_000)[0])
    assert burst >= 128 * KIB
    assert burst >= 5_000_000  # 4 ms of 10 Gbit/s = 10e9 / 8 * 0.004 bytes
    assert fabric.burst_bytes(10_000) == 5_000_000


def test_burst_floor_for_slow_links() -> None:
    # Below ~262 Mbit/s, 4 ms of tokens is less than 128 KiB: the floor applies.
    assert fabric.burst_bytes(1) == 131072
    assert fabric.burst_bytes(250) == 131072  # 4 ms = 125000 bytes
    assert fabric.burst_bytes(1000) == 500_000  # 4 ms of 1 Gbit/s


@pytest.mark.parametrize("rate", [0, -1, -1000])
def test_rate_commands_reject_non_positive(rate: int) -> None:
    with pytest.raises(SparkctlError) as info:
        fabric.rate_commands("swp1", "ifb-swp1", rate)
    assert info.value.code == ExitCode.BAD_INPUT
    assert str(rate) in info.value.message


# ------------------------------------------------- ingress_redirect_commands
def test_ingress_redirect_commands_literal() -> None:
    assert fabric.ingress_redirect_commands("swp3", "ifb-swp3") == [
        ["ip", "link", "add", "ifb-swp3", "type", "ifb"],
        ["ip", "link", "set", "ifb-swp3", "mtu", "65535", "up"],
        ["tc", "qdisc", "add", "dev", "swp3", "handle", "ffff:", "ingress"],
        [
            "tc",
            "filter",
            "add",
            "dev",
            "swp3",
            "parent",
            "ffff:",
            "protocol",
            "all",
            "prio",
            "1",
            "u32",
            "match",
            "u32",
            "0",
            "0",
            "action",
            "mirred",
            "egress",
            "redirect",
            "dev",
            "ifb-swp3",
        ],
    ]


def test_ingress_redirect_creates_ifb_before_using_it() -> None:
    cmds = fabric.ingress_redirect_commands("swp5", "ifb-swp5")
    joined = [" ".join(c) for c in cmds]
    create = next(i for i, c in enumerate(joined) if c.startswith("ip link add ifb-swp5"))
    qdisc = next(i for i, c in enumerate(joined) if "ingress" in c.split())
    filt = next(i for i, c in enumerate(joined) if c.startswith("tc filter"))
    assert create < filt
    assert qdisc < filt  # the filter hangs off the ingress qdisc
    assert "redirect dev ifb-swp5" in joined[filt]
    assert "protocol all" in joined[filt]  # ARP and IPv6 are shaped too


# ------------------------------------------------------------ Cable names
def test_cable_names() -> None:
    cable = Cable(node="spark2", node_if="enP2p1s0f1np1", port="swp4", domain="b")
    assert cable.bridge == "br-b"
    assert cable.ifb == "ifb-swp4"


def test_cable_ifb_name_fits_ifnamsiz_for_the_longest_allowed_port() -> None:
    from sparkctl_lab.fabric import MAX_PORT_NAME  # noqa: PLC0415

    cable = Cable(node="spark1", node_if="enp1s0f1np1", port="E" * MAX_PORT_NAME, domain="a")
    assert len(cable.ifb) == IFNAMSIZ - 1
    assert cable.ifb == "ifb-" + "E" * MAX_PORT_NAME  # not truncated: no two ports share one


def test_sim_names_fit_ifnamsiz_and_are_unique() -> None:
    from sparkctl_lab.lab import LabSpec  # noqa: PLC0415

    cables = LabSpec.from_inventory(ROOT / "inventory" / "sim.ini").cables
    names = [n for c in cables for n in (c.node_if, c.port, c.ifb, c.bridge)]
    assert all(0 < len(n) <= IFNAMSIZ - 1 for n in names), names
    assert len({c.ifb for c in cables}) == len(cables)
    assert len({c.port for c in cables}) == len(cables)
    assert {c.bridge for c in cables} == {"br-a", "br-b"}
    for name in fabric.UNCABLED_PAIR:
        assert len(name) <= IFNAMSIZ - 1


def test_nsenter_wraps_command() -> None:
    assert fabric.nsenter(4242, ["ip", "-j", "addr"]) == [
        "nsenter",
        "-t",
        "4242",
        "-n",
        "ip",
        "-j",
        "addr",
    ]


# ------------------------------------------------------------- interfaces
FIXTURES = ROOT / "tests" / "fixtures" / "ip"  # real `ip -j` outputs (SOURCES.md there)


def test_interfaces_of_a_real_ip_j_addr_through_the_one_parser() -> None:
    # What `lab status` shows per link, read with tool_output's ip parser, not its own.
    links = fabric.interfaces((FIXTURES / "build-host-ip-j-addr.json").read_text())
    by_name = {link["name"]: link for link in links}
    assert [link["name"] for link in links][:4] == ["lo", "ifb0", "ifb1", "eth0"]  # ip's order
    assert by_name["eth0"] == {
        "name": "eth0",
        "state": "UP",
        "mtu": 1400,
        "addresses": ["192.0.2.2/24"],
    }  # IPv6 fd00::2 left out
    assert by_name["lo"] == {
        "name": "lo",
        "state": "UNKNOWN",
        "mtu": 65536,
        "addresses": ["127.0.0.1/8"],
    }
    assert by_name["ifb0"] == {"name": "ifb0", "state": "DOWN", "mtu": 1500, "addresses": []}
    assert by_name["veth0"]["addresses"] == []  # IPv6 link-local only


def test_interfaces_refuse_what_ip_does_not_print() -> None:
    assert fabric.interfaces("") == []
    with pytest.raises(ValueError, match="ip -j addr printed no JSON"):
        fabric.interfaces("Cannot open netlink socket: Operation not permitted\n")


# -------------------------------------------------------- parse_tbf_rates
def test_parse_tbf_rates_captured_sample() -> None:
    # Egress tbf on the port and the ingress tbf on its ifb; noqueue and
    # ingress qdiscs carry no rate and are ignored.
    assert fabric.parse_tbf_rates(json.loads(TC_QDISC_JSON)) == {"swp1": 1000, "ifb-swp1": 250}


def test_parse_tbf_rates_single_ifb_capture() -> None:
    assert fabric.parse_tbf_rates(json.loads(TC_QDISC_JSON_IFB)) == {"d0": 250}


def test_parse_tbf_rates_ignores_odd_entries() -> None:
    qdiscs: list[dict[str, Any]] = [
        {},
        {"kind": "tbf", "dev": "swp1"},  # no options
        {"kind": "tbf", "dev": "swp2", "options": "x"},
        {"kind": "tbf", "dev": "swp3", "options": {"rate": "31250000"}},  # not a number
        {"kind": "htb", "dev": "swp4", "options": {"rate": 31250000}},
        {"kind": "tbf", "dev": "swp5", "options": {"rate": 25_000_000_000}},  # 200 Gbit/s
    ]
    assert fabric.parse_tbf_rates(qdiscs) == {"swp5": 200_000}
    assert fabric.parse_tbf_rates([]) == {}


# ------------------------------------------- the commands on a real kernel
def _ip_netns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", *args], capture_output=True, text=True, check=False, timeout=30
    )


def _in_ns(ns: str, cmd: list[str]) -> str:
    proc = subprocess.run(
        ["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, check=False, timeout=30
    )
    assert proc.returncode == 0, f"{' '.join(cmd)} in {ns}: {proc.stderr.strip()}"
    return proc.stdout


def test_generated_commands_run_in_a_network_namespace() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("needs iproute2 (ip, tc)")
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    sw, node = f"sparkctl-unit-sw-{tag}", f"sparkctl-unit-node-{tag}"
    created: list[str] = []
    try:
        for ns in (sw, node):
            proc = _ip_netns("add", ns)
            if proc.returncode != 0:
                pytest.skip(f"cannot create a network namespace: {proc.stderr.strip()}")
            created.append(ns)
        cable = Cable(node="spark1", node_if="enp1s0f1np1", port="swp1", domain="a")
        # One cable, as fabric.wire makes it: a veth with an end in each namespace.
        subprocess.run(
            [
                "ip",
                "link",
                "add",
                cable.port,
                "netns",
                sw,
                "type",
                "veth",
                "peer",
                "name",
                cable.node_if,
                "netns",
                node,
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
        for cmd in [
            *fabric.ingress_redirect_commands(cable.port, cable.ifb),
            *fabric.rate_commands(cable.port, cable.ifb, 250),
        ]:
            _in_ns(sw, cmd)

        qdiscs = json.loads(_in_ns(sw, ["tc", "-j", "qdisc", "show"]))
        assert fabric.parse_tbf_rates(qdiscs) == {"swp1": 250, "ifb-swp1": 250}
        filters = json.loads(_in_ns(sw, ["tc", "-j", "filter", "show", "dev", "swp1", "ingress"]))
        redirects = [
            (a.get("mirred_action"), a.get("to_dev"))
            for f in filters
            for a in f.get("options", {}).get("actions", [])
            if a.get("kind") == "mirred"
        ]
        assert redirects == [("redirect", "ifb-swp1")]  # moved, not copied: all of it is shaped

        # Traffic arriving on the port really goes through the ifb's shaper.
        _in_ns(sw, ["ip", "addr", "add", "10.254.0.1/30", "dev", "swp1"])
        _in_ns(node, ["ip", "addr", "add", "10.254.0.2/30", "dev", "enp1s0f1np1"])
        _in_ns(sw, ["ip", "link", "set", "swp1", "up"])
        _in_ns(node, ["ip", "link", "set", "enp1s0f1np1", "up"])
        _in_ns(
            node,
            [
                sys.executable,
                "-c",
                "import socket, time\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "for _ in range(5):\n"
                "    s.sendto(b'x' * 100, ('10.254.0.1', 9)); time.sleep(0.02)\n",
            ],
        )
        stats = json.loads(_in_ns(sw, ["tc", "-j", "-s", "qdisc", "show", "dev", "ifb-swp1"]))
        shaped = [q for q in stats if q.get("kind") == "tbf"]
        assert len(shaped) == 1
        assert shaped[0]["packets"] >= 5

        # A live rate change (what `lab port --rate` does) replaces both shapers.
        for cmd in fabric.rate_commands(cable.port, cable.ifb, 40):
            _in_ns(sw, cmd)
        qdiscs = json.loads(_in_ns(sw, ["tc", "-j", "qdisc", "show"]))
        assert fabric.parse_tbf_rates(qdiscs) == {"swp1": 40, "ifb-swp1": 40}
    finally:
        for ns in created:
            _ip_netns("delete", ns)
    assert not {sw, node} & set(_ip_netns("list").stdout.split())


def _holder(ns: str) -> subprocess.Popen[bytes]:
    """A process in namespace ``ns``: what a lab container's PID is to plug/nsenter."""
    return subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "600"], stdin=subprocess.DEVNULL)


def test_a_rebooted_node_is_cabled_again_with_its_switch_port_as_it_was() -> None:
    """`lab reboot`'s re-wiring, in real namespaces: a node's namespace dies with its cable
    (the ifb stays in the switch), and the new one gets the cable with the port's MTU, rate
    and down state the switch kept, the node's end down for its netplan to bring up."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces")
    if shutil.which("ip") is None or shutil.which("tc") is None or shutil.which("nsenter") is None:
        pytest.skip("needs iproute2 (ip, tc) and nsenter")
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
    sw, node, again = (f"sparkctl-unit-{n}-{tag}" for n in ("sw", "node", "again"))
    cable = Cable(node="spark1", node_if="enp1s0f1np1", port="swp1", domain="a")
    created: list[str] = []
    holders: list[subprocess.Popen[bytes]] = []
    try:
        for ns in (sw, node, again):
            proc = _ip_netns("add", ns)
            if proc.returncode != 0:
                pytest.skip(f"cannot create a network namespace: {proc.stderr.strip()}")
            created.append(ns)
        holders += [_holder(ns) for ns in (sw, node, again)]
        sw_pid, node_pid, again_pid = (h.pid for h in holders)
        _in_ns(sw, ["ip", "link", "add", cable.bridge, "type", "bridge"])
        fabric.plug(cable, node_pid, sw_pid, 1000)
        fabric.set_port(sw_pid, cable, rate_mbit=250, mtu=9000, up=False)
        kept = fabric.port_states(fabric.links(sw_pid), fabric.port_rates(sw_pid), [cable])
        assert kept == {"swp1": fabric.PortState(mtu=9000, rate_mbit=250, up=False)}

        # The node goes away: its namespace, and the veth's two ends with it.
        holders[1].kill()
        holders[1].wait()
        _ip_netns("delete", node)
        created.remove(node)
        assert fabric.unplug_leftovers(sw_pid, [cable]) in (["ifb-swp1"], ["swp1", "ifb-swp1"])
        assert fabric.unplug_leftovers(sw_pid, [cable]) == []

        fabric.plug(cable, again_pid, sw_pid, 1000, port=kept["swp1"], node_up=False)
        port = {link["name"]: link for link in fabric.links(sw_pid)}["swp1"]
        assert (port["mtu"], port["state"]) == (9000, "DOWN")
        assert fabric.port_rates(sw_pid) == {"swp1": 250, "ifb-swp1": 250}
        master = json.loads(_in_ns(sw, ["ip", "-j", "link", "show", "swp1"]))[0]["master"]
        assert master == "br-a"
        end = {link["name"]: link for link in fabric.links(again_pid)}["enp1s0f1np1"]
        assert end["state"] == "DOWN"
    finally:
        for holder in holders:
            holder.kill()
            holder.wait()
        for ns in created:
            _ip_netns("delete", ns)
    assert not {sw, node, again} & set(_ip_netns("list").stdout.split())
