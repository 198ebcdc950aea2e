"""sparkctl_lab.egress: the plan of what lab nodes may reach, and its nft rules on a real kernel.

The plan is checked against literal expectations for the lab's own networks
and mirrors; one test loads the generated ruleset into a throwaway network
namespace that routes between a "lab" and an "outside" namespace, as the host
routes between podman's bridge and the user's network, and checks that the
kernel refuses and lets through exactly what :meth:`EgressPlan.verdict` says.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkctl.errors import SparkctlError
from sparkctl_lab import egress
from sparkctl_lab.egress import EgressPlan, Endpoint
from sparkctl_lab.image import AptSources, _apt_sources
from sparkctl_lab.lab import LabSpec

pytestmark = pytest.mark.filterwarnings(
    "ignore:AnsibleCollectionFinder has already been configured:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]
A = ipaddress.IPv4Address
N = ipaddress.IPv4Network

# /etc/resolv.conf as podman (netavark with aardvark-dns) writes it into a lab node,
# read on this controller with `podman exec spark1 cat /etc/resolv.conf`: the lab
# network's own DNS first, then the host's resolver.
PODMAN_RESOLV_CONF = "search dns.podman\nnameserver 10.77.0.1\nnameserver 10.255.255.53\n"

MIRROR = Endpoint(A("203.0.113.80"), 80)
SITE_CACHE = Endpoint(A("192.168.1.5"), 3142)  # a caching proxy on the user's own LAN


def _plan(**overrides: object) -> EgressPlan:
    base: dict[str, object] = {
        "bridge": "podman1",
        "lab_network": N("10.77.0.0/24"),
        "fabric_networks": (N("192.168.100.0/24"), N("192.168.101.0/24")),
        "resolvers": (A("10.77.0.1"), A("10.255.255.53")),
        "mirrors": (MIRROR,),
    }
    base.update(overrides)
    return EgressPlan(**base)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the plan
@pytest.mark.parametrize(
    ("destination", "port", "protocol", "expected"),
    [
        # what leaked: SSH of the model relay chain to fabric addresses, out through the NAT
        ("192.168.100.12", 22, "tcp", "reject"),
        ("192.168.101.12", 22, "tcp", "reject"),
        # the fabric and the user's networks stay closed on the web ports too
        ("192.168.101.12", 443, "tcp", "reject"),
        ("10.1.2.3", 80, "tcp", "reject"),
        ("172.20.0.1", 443, "tcp", "reject"),
        ("100.64.0.1", 443, "tcp", "reject"),  # CGNAT
        ("169.254.169.254", 80, "tcp", "reject"),  # link-local (a cloud's metadata service)
        ("127.0.0.1", 80, "tcp", "reject"),
        # the lab's own management network
        ("10.77.0.12", 22, "tcp", "accept"),
        ("10.77.0.1", 22, "tcp", "accept"),
        # the nodes' resolvers, for DNS only
        ("10.255.255.53", 53, "udp", "accept"),
        ("10.255.255.53", 53, "tcp", "accept"),
        ("10.255.255.53", 22, "tcp", "reject"),
        # the apt mirror, on its port
        ("203.0.113.80", 80, "tcp", "accept"),
        # public addresses: HTTP(S) only (package indexes), nothing else
        ("1.1.1.1", 443, "tcp", "accept"),
        ("1.1.1.1", 22, "tcp", "reject"),
        ("1.1.1.1", 53, "udp", "reject"),
        ("203.0.113.80", 22, "tcp", "reject"),
        ("2001:db8::1", 443, "tcp", "reject"),  # the lab has no IPv6 way out
    ],
)
def test_verdicts_for_the_lab_networks(
    destination: str, port: int, protocol: str, expected: str
) -> None:
    assert _plan().verdict(destination, port, protocol) == expected


def test_a_mirror_on_the_users_lan_is_reachable_on_its_port_only() -> None:
    plan = _plan(mirrors=(MIRROR, SITE_CACHE))
    assert plan.verdict("192.168.1.5", 3142) == "accept"
    assert plan.verdict("192.168.1.5", 22) == "reject"
    assert plan.verdict("192.168.1.5", 80) == "reject"
    assert plan.verdict("192.168.1.6", 3142) == "reject"
    assert _plan().verdict("192.168.1.5", 3142) == "reject"


def test_fabric_subnets_are_closed_even_in_public_ranges() -> None:
    plan = _plan(fabric_networks=(N("198.51.100.0/24"),))
    assert plan.verdict("198.51.100.7", 443) == "reject"
    assert plan.verdict("198.51.101.7", 443) == "accept"
    assert N("198.51.100.0/24") in plan.closed


def test_closed_ranges_do_not_overlap() -> None:
    # nft refuses overlapping elements in an interval set: the plan hands it disjoint ones
    closed = _plan().closed
    assert all(not a.overlaps(b) for i, a in enumerate(closed) for b in closed[i + 1 :])
    for net in ("10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12"):
        assert any(N(net).subnet_of(c) for c in closed), net


def test_ruleset_names_the_bridge_and_every_element() -> None:
    text = _plan(mirrors=(MIRROR, SITE_CACHE)).ruleset()
    assert 'iifname != "podman1" accept' in text
    assert "203.0.113.80 . 80" in text
    assert "192.168.1.5 . 3142" in text
    assert "10.255.255.53" in text
    assert "ip daddr 10.77.0.0/24 accept" in text
    # replaced in one transaction, never merged into an old table
    assert text.startswith("table inet sparkctl_lab {}\ndelete table inet sparkctl_lab\n")


def test_a_bridge_name_that_is_not_an_interface_is_refused() -> None:
    with pytest.raises(SparkctlError, match="not a network interface name"):
        _plan(bridge='podman1" accept; #')


def test_sim_inventory_fabric_networks() -> None:
    spec = LabSpec.from_inventory(ROOT / "inventory" / "sim.ini")
    # fabric_a_subnet and fabric_b_subnet, adjacent: one closed range
    assert spec.fabric_networks == ("192.168.100.0/23",)
    assert spec.mgmt_subnet == "10.77.0.0/24"


# ---------------------------------------------------------------- inputs
def test_apt_uris_of_the_sources_list_the_image_writes() -> None:
    text = _apt_sources(AptSources("http://mirror.example/debian/"))
    assert egress.apt_uris(text) == [
        "http://mirror.example/debian",
        "http://mirror.example/debian-security",
    ]
    assert egress.apt_uris("# deb http://x.example/ bookworm main\n") == []
    assert egress.apt_uris(
        "deb [arch=arm64 trusted=yes] https://y.example:8443/d bookworm main\n"
    ) == ["https://y.example:8443/d"]


def test_apt_uris_of_deb822_sources() -> None:
    # the form of Debian 12's /etc/apt/sources.list.d/debian.sources (sources.list(5))
    text = (
        "Types: deb\n"
        "URIs: http://mirror.example/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "\n"
        "Types: deb\n"
        "URIs: http://mirror.example/debian-security https://mirror2.example/ds\n"
        "Suites: bookworm-security\n"
        "Components: main\n"
    )
    assert egress.apt_uris(text) == [
        "http://mirror.example/debian",
        "http://mirror.example/debian-security",
        "https://mirror2.example/ds",
    ]


def test_resolvers_of_a_podman_resolv_conf() -> None:
    assert egress.resolvers(PODMAN_RESOLV_CONF) == [A("10.77.0.1"), A("10.255.255.53")]
    assert egress.resolvers("nameserver fd00::1\nnameserver 9.9.9.9\n") == [A("9.9.9.9")]


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("http://mirror.example/debian", ("mirror.example", 80)),
        ("https://mirror.example/debian", ("mirror.example", 443)),
        ("http://192.168.1.5:3142/debian", ("192.168.1.5", 3142)),
    ],
)
def test_url_target(url: str, target: tuple[str, int]) -> None:
    assert egress.url_target(url) == target


@pytest.mark.parametrize("url", ["ftp://mirror.example/debian", "file:///srv/debian", "mirror"])
def test_url_target_refuses_what_the_nodes_cannot_fetch_through_the_guard(url: str) -> None:
    with pytest.raises(SparkctlError, match="http or https only"):
        egress.url_target(url)


def test_mirror_endpoints_resolve_here() -> None:
    # a literal address resolves to itself, without DNS
    assert egress.mirror_endpoints(["http://192.168.1.5:3142/debian"]) == (SITE_CACHE,)


def test_a_mirror_that_does_not_resolve_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    # .invalid never resolves (RFC 2606 2): an offline lab still comes up, sealed
    assert egress.mirror_endpoints(["http://mirror.invalid/debian"]) == ()
    assert "mirror.invalid does not resolve" in caplog.text


# ------------------------------------------------ the rules on a real kernel
_SERVE = r"""
import json, selectors, socket, sys
ports = json.loads(sys.argv[1])
sel = selectors.DefaultSelector()
for port in ports:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    sel.register(s, selectors.EVENT_READ)
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        conn, _ = key.fileobj.accept()
        conn.close()
"""

_PROBE = r"""
import errno, json, socket, sys
out = []
for addr, port in json.loads(sys.argv[1]):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((addr, port))
        out.append("connected")
    except socket.timeout:
        out.append("timeout")
    except OSError as exc:
        out.append(errno.errorcode.get(exc.errno, str(exc.errno)))
    finally:
        s.close()
print(json.dumps(out))
"""

PROBES = [
    ("192.168.100.12", 22),  # the leak: a fabric address over the management side
    ("192.168.101.12", 443),
    ("10.255.255.53", 22),  # the user's network
    ("172.31.255.2", 22),  # the outside router itself (the controller's real gateway)
    ("1.1.1.1", 22),  # a public address, not a web port
    ("1.1.1.1", 443),  # a public address, HTTPS: a package index
    ("203.0.113.80", 80),  # the apt mirror
    ("192.168.1.5", 3142),  # a site cache on the LAN, named as the mirror
    ("192.168.1.5", 80),  # the same host, another port
]
SERVED_PORTS = sorted({port for _, port in PROBES})
OUTSIDE_ADDRESSES = sorted({addr for addr, _ in PROBES} - {"172.31.255.2"})


def _sh(*cmd: str, ns: str | None = None, input_text: str | None = None) -> str:
    full = ["ip", "netns", "exec", ns, *cmd] if ns else list(cmd)
    proc = subprocess.run(
        full, capture_output=True, text=True, check=False, timeout=60, input=input_text, cwd=ROOT
    )
    assert proc.returncode == 0, f"{' '.join(full)}: {proc.stderr.strip()}"
    return proc.stdout


@pytest.fixture
def routed_lab() -> Iterator[tuple[str, str, str]]:
    """Three namespaces: ``lab`` (a node, 10.77.0.11 behind its gateway 10.77.0.1),
    ``host`` (forwards between the lab's bridge ``labbr0`` and the outside, as the
    controller does) and ``outside`` (every other address, answering on every probed
    port). No NAT is needed: ``outside`` routes the lab network back to ``host``."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces")
    if shutil.which("ip") is None or shutil.which("nft") is None:
        pytest.skip("needs iproute2 and nftables")
    tag = uuid.uuid4().hex[:6]
    lab, host, outside = (f"sparkctl-unit-{n}-{tag}" for n in ("lab", "host", "out"))
    created: list[str] = []
    server: subprocess.Popen[str] | None = None
    try:
        for ns in (lab, host, outside):
            proc = subprocess.run(
                ["ip", "netns", "add", ns], capture_output=True, text=True, check=False
            )
            if proc.returncode != 0:
                pytest.skip(f"cannot create a network namespace: {proc.stderr.strip()}")
            created.append(ns)
        _sh("ip", "link", "add", "labbr0", "netns", host, "type", "veth", "peer", "name", "eth0",
            "netns", lab)  # fmt: skip
        _sh("ip", "link", "add", "up0", "netns", host, "type", "veth", "peer", "name", "eth0",
            "netns", outside)  # fmt: skip
        for ns in created:
            _sh("ip", "link", "set", "lo", "up", ns=ns)
        _sh("ip", "addr", "add", "10.77.0.11/24", "dev", "eth0", ns=lab)
        _sh("ip", "link", "set", "eth0", "up", ns=lab)
        _sh("ip", "route", "add", "default", "via", "10.77.0.1", ns=lab)
        _sh("ip", "addr", "add", "10.77.0.1/24", "dev", "labbr0", ns=host)
        _sh("ip", "addr", "add", "172.31.255.1/30", "dev", "up0", ns=host)
        for dev in ("labbr0", "up0"):
            _sh("ip", "link", "set", dev, "up", ns=host)
        _sh("ip", "route", "add", "default", "via", "172.31.255.2", ns=host)
        _sh("sysctl", "-qw", "net.ipv4.ip_forward=1", ns=host)
        _sh("ip", "addr", "add", "172.31.255.2/30", "dev", "eth0", ns=outside)
        _sh("ip", "link", "set", "eth0", "up", ns=outside)
        _sh("ip", "route", "add", "10.77.0.0/24", "via", "172.31.255.1", ns=outside)
        for addr in OUTSIDE_ADDRESSES:
            _sh("ip", "addr", "add", f"{addr}/32", "dev", "lo", ns=outside)
        server = subprocess.Popen(
            ["ip", "netns", "exec", outside, sys.executable, "-c", _SERVE,
             json.dumps(SERVED_PORTS)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        yield lab, host, outside
    finally:
        if server is not None:
            server.kill()
            server.wait(timeout=30)
        for ns in created:
            subprocess.run(["ip", "netns", "delete", ns], check=False, capture_output=True)


def _probe(lab: str) -> list[str]:
    out = _sh(sys.executable, "-c", _PROBE, json.dumps(PROBES), ns=lab)
    result: list[str] = json.loads(out)
    return result


def test_the_kernel_decides_as_the_plan_says(routed_lab: tuple[str, str, str]) -> None:
    lab, host, _ = routed_lab
    plan = _plan(bridge="labbr0", mirrors=(MIRROR, SITE_CACHE))
    # Unguarded, everything gets through: the probes can see a leak.
    assert _probe(lab) == ["connected"] * len(PROBES)

    _sh("nft", "-f", "-", ns=host, input_text=plan.ruleset())
    guarded = _probe(lab)
    for (addr, port), got in zip(PROBES, guarded, strict=True):
        if plan.verdict(addr, port) == "accept":
            assert got == "connected", (addr, port, got)
        else:
            # refused at once ("No route to host"), not left to time out
            assert got == errno.errorcode[errno.EHOSTUNREACH], (addr, port, got)
    assert "connected" in guarded
    assert errno.errorcode[errno.EHOSTUNREACH] in guarded

    # Applied again (lab up on a running lab): replaced, not doubled.
    _sh("nft", "-f", "-", ns=host, input_text=_plan(bridge="labbr0").ruleset())
    tables = _sh("nft", "list", "tables", ns=host).split("\n")
    assert tables.count("table inet sparkctl_lab") == 1
    assert _probe(lab)[PROBES.index(("192.168.1.5", 3142))] == "EHOSTUNREACH"


def test_remove_takes_the_guard_away(routed_lab: tuple[str, str, str]) -> None:
    """egress.remove and egress.installed, run in the host namespace as lab down runs them."""
    lab, host, _ = routed_lab
    _sh("nft", "-f", "-", ns=host, input_text=_plan(bridge="labbr0").ruleset())
    assert _probe(lab)[0] == "EHOSTUNREACH"
    code = (
        "from sparkctl_lab import egress; "
        "print(egress.installed(), egress.remove(), egress.installed(), egress.remove())"
    )
    out = _sh(sys.executable, "-c", code, ns=host)
    assert out.split() == ["True", "True", "False", "False"]
    assert "sparkctl_lab" not in _sh("nft", "list", "tables", ns=host)
    assert _probe(lab)[0] == "connected"


# ---------------------------------------------------------------- lab status
@pytest.mark.parametrize(("guard", "warned"), [(True, False), (False, True)])
def test_lab_status_says_when_the_guard_is_missing(
    guard: bool, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparkctl_lab import cli as lab  # noqa: PLC0415 -- the click layer, only here

    lab.show_status({"up": True, "rate_mbit": 1000, "egress_guard": guard, "hosts": []})
    out = capsys.readouterr().out
    assert "ports shaped to 1000 Mbit/s" in out
    assert ("NO egress guard" in out) is warned


def _sim_copy(tmp_path: Path, edits: dict[str, tuple[str, str]]) -> Path:
    inv_dir = tmp_path / "inventory"
    inv_dir.mkdir()
    shutil.copy(ROOT / "inventory" / "sim.ini", inv_dir / "sim.ini")
    shutil.copytree(ROOT / "inventory" / "group_vars" / "sim", inv_dir / "group_vars" / "sim")
    for name, (old, new) in edits.items():
        path = inv_dir / name
        text = path.read_text()
        assert text.count(old) >= 1, old
        path.write_text(text.replace(old, new))
    return inv_dir / "sim.ini"


def test_a_public_fabric_subnet_is_closed(tmp_path: Path) -> None:
    inv = _sim_copy(
        tmp_path,
        {
            "group_vars/sim/cluster.yml": (
                "fabric_b_subnet: 192.168.101.0/24",
                "fabric_b_subnet: 198.51.100.0/24",
            ),
            "sim.ini": ("fabric_b_ip=192.168.101.", "fabric_b_ip=198.51.100."),
        },
    )
    nets = [N(n) for n in LabSpec.from_inventory(inv).fabric_networks]
    assert nets == [N("192.168.100.0/24"), N("198.51.100.0/24")]
