"""The rehearsal lab: four simulated Sparks and a switch in local containers.

The lab is described by an inventory (``inventory/sim.ini``): the same file
``provision``/``validate``/``serve`` use. ``up`` builds (or reuses) the node
image, starts one systemd container per host on a podman bridge with the
inventory's management addresses, cables every twin to its switch port,
shapes the ports, makes each node look like a Spark to the tools the roles use
and records SSH trust. An nft table on the host (:mod:`sparkctl_lab.egress`)
keeps the nodes' traffic out of the controller's own network. ``down`` removes
what ``up`` created and nothing else.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkctl import inventory as inv_mod
from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import facts_dir, state_dir
from sparkctl.proc import require_tool, run
from sparkctl_lab import egress, fabric, sshtrust, standins
from sparkctl_lab.hardware import LabHardware
from sparkctl_lab.image import ensure_image
from sparkctl_lab.podman import Podman

log = logging.getLogger(__name__)

LABEL = "io.sparkctl.lab"
NETWORK = "sparkctl-lab"
MGMT_IF = "enP7s7"  # the Spark's onboard management NIC (docs/reference.md, "The network")
HW_FILE = "/etc/sparkctl-lab/hardware.json"
# A Spark's memory is its own; a lab node's would be the controller's, which every
# node and the controller share (/proc/meminfo shows the host's). A memory limit on
# each Spark's container gives it memory of its own: its cgroup shows the limit, which
# validate's memory reading honours (sparkctl.tool_output.memory_cgroup), so a lab node
# can be nearly full - a model loaded - without the controller being. 3 GiB holds a
# serving rank, nccl-tests' ranks and the lab's validate_mem_headroom_mb (2 GiB) with
# room; nodes take only what they use (a few hundred MiB).
NODE_MEMORY = "3g"
Progress = Callable[[str], None]


def mgmt_mac(address: str) -> str:
    """The fixed MAC of a lab host's management NIC, or of the lab's bridge: locally
    administered (02:...), then the four bytes of its IPv4 address, so one address
    always has one MAC.

    A Spark keeps its NIC's MAC across reboots, and its neighbours' ARP caches stay
    right. netavark gives a container a new random MAC each time its network is set up
    (``podman init`` after ``lab reboot``) and does not announce it (arp_notify is 0 in
    the container), so the controller would keep sending to the old MAC until its
    neighbour entry expires: tens of seconds in which SSH to the rebooted node hangs
    (seen: an SSH right after ``lab reboot`` timed out after 60 s). podman's
    ``--network NAME:mac=MAC`` keeps it fixed (podman-run(1), "--network")."""
    return "02:73:" + ":".join(f"{b:02x}" for b in ipaddress.IPv4Address(address).packed)


@dataclass(frozen=True)
class LabHost:
    name: str
    mgmt_ip: str
    role: str  # "spark" or "switch"

    @property
    def mgmt_mac(self) -> str:
        return mgmt_mac(self.mgmt_ip)


@dataclass(frozen=True)
class LabSpec:
    """Everything ``lab up`` needs, derived from the inventory and options."""

    inventory: Path
    hosts: tuple[LabHost, ...]
    switch: str
    cables: tuple[fabric.Cable, ...]
    mgmt_subnet: str
    rate_mbit: int
    hardware: LabHardware
    cluster: str = "lab"
    # The inventory's fabric subnets (and addresses): they exist only on the lab
    # switch's bridges, so nothing addressed to them may leave through the host.
    fabric_networks: tuple[str, ...] = ()

    @property
    def sparks(self) -> tuple[LabHost, ...]:
        return tuple(h for h in self.hosts if h.role == "spark")

    @property
    def gateway(self) -> str:
        """The controller's address on the management network: the subnet's first."""
        return str(next(ipaddress.IPv4Network(self.mgmt_subnet).hosts()))

    @classmethod
    def from_inventory(
        cls, path: Path, *, rate_mbit: int | None = None, driver_version: str | None = None
    ) -> LabSpec:
        inv = inv_mod.validate(path)
        if inv.switch is None:
            raise inv_mod.bad_input(path, None, None, "the lab needs a host in [switches]")
        if inv.switch.os != "linux":
            raise inv_mod.bad_input(
                path,
                inv.switch.name,
                "switch_os",
                f"the lab switch is a Linux bridge; got '{inv.switch.os}'",
            )
        subnet_raw = inv.cluster_var("lab_mgmt_subnet")
        try:
            subnet = ipaddress.IPv4Network(str(subnet_raw))
        except ValueError as exc:
            raise inv_mod.bad_input(
                path, None, "lab_mgmt_subnet", f"{subnet_raw!r} is not an IPv4 network"
            ) from exc
        gateway = next(subnet.hosts())
        hosts = [LabHost(n.name, n.mgmt_ip, "spark") for n in inv.nodes]
        hosts.append(LabHost(inv.switch.name, inv.switch.mgmt_ip, "switch"))
        seen: dict[str, str] = {}
        for h in hosts:
            addr = ipaddress.IPv4Address(h.mgmt_ip)
            if addr not in subnet or addr in {
                gateway,
                subnet.network_address,
                subnet.broadcast_address,
            }:
                raise inv_mod.bad_input(
                    path,
                    h.name,
                    "ansible_host",
                    f"{h.mgmt_ip} is not a usable address of "
                    f"lab_mgmt_subnet {subnet} (.1 is the gateway)",
                )
            if h.mgmt_ip in seen:
                raise inv_mod.bad_input(
                    path,
                    h.name,
                    "ansible_host",
                    f"{h.mgmt_ip} is also the address of {seen[h.mgmt_ip]}",
                )
            seen[h.mgmt_ip] = h.name
        cables = _cables(inv)
        rate = rate_mbit if rate_mbit is not None else inv.cluster_var("lab_link_rate_mbit", 1000)
        if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
            raise inv_mod.bad_input(
                path, None, "lab_link_rate_mbit", f"{rate!r} is not a positive integer (Mbit/s)"
            )
        _check_line_rate(path, inv, rate, overridden=rate_mbit is not None)
        hw = LabHardware(
            gpu_name="NVIDIA GB10",
            driver_version=driver_version
            or str(inv.cluster_var("lab_gpu_driver_version", "580.95.05")),
            cuda_version=str(inv.cluster_var("lab_cuda_version", "13.0")),
            link_rate_mbit=rate,
        )
        return cls(
            inventory=path,
            hosts=tuple(hosts),
            switch=inv.switch.name,
            cables=tuple(cables),
            mgmt_subnet=str(subnet),
            rate_mbit=rate,
            hardware=hw,
            cluster=inv.cluster,
            fabric_networks=_fabric_networks(inv),
        )


def _fabric_networks(inv: inv_mod.Inventory) -> tuple[str, ...]:
    """fabric_a_subnet, fabric_b_subnet (validated as IPv4 networks, roles/cluster_defaults
    /meta/constraints.yml) and every node's fabric address, as disjoint networks."""
    nets = [
        ipaddress.IPv4Network(str(raw))
        for raw in (inv.cluster_var(f"fabric_{twin}_subnet") for twin in ("a", "b"))
        if raw is not None
    ]
    for node in inv.nodes:
        nets += [ipaddress.IPv4Network(ip) for ip in node.fabric_ips.values()]
    return tuple(str(n) for n in ipaddress.collapse_addresses(nets))


def _cables(inv: inv_mod.Inventory) -> list[fabric.Cable]:
    """One cable per node twin, from ``switch_ports``; every twin must be cabled."""
    path = inv.path
    netdevs = {
        "a": str(inv.cluster_var("fabric_a_netdev", "enp1s0f1np1")),
        "b": str(inv.cluster_var("fabric_b_netdev", "enP2p1s0f1np1")),
    }
    node_names = {n.name for n in inv.nodes}
    cables = []
    for port in inv.ports:
        if len(port.name) > fabric.MAX_PORT_NAME:
            raise inv_mod.bad_input(
                path,
                None,
                f"switch_ports.{port.name}",
                f"lab switch ports become netdevs (and ifb-{port.name}): "
                f"names of at most {fabric.MAX_PORT_NAME} characters",
            )
        if port.node not in node_names:
            raise inv_mod.bad_input(
                path,
                None,
                f"switch_ports.{port.name}.node",
                f"'{port.node}' is not a host in [sparks]",
            )
        if port.twin not in netdevs:
            raise inv_mod.bad_input(
                path,
                None,
                f"switch_ports.{port.name}.twin",
                "the lab cables each twin to its own port: use a or b",
            )
        cables.append(fabric.Cable(port.node, netdevs[port.twin], port.name, port.twin))
    for n in inv.nodes:
        for twin in netdevs:
            if not any(c.node == n.name and c.domain == twin for c in cables):
                raise inv_mod.bad_input(
                    path, n.name, "switch_ports", f"no switch port is cabled to twin {twin}"
                )
    return cables


def lab_dir() -> Path:
    return state_dir() / "lab"


def check_environment() -> None:
    """Root, podman and the wiring tools: fail with the environment exit code otherwise."""
    if os.geteuid() != 0:
        raise SparkctlError(
            "the lab needs root: it wires veth pairs between container network namespaces",
            ExitCode.ENVIRONMENT,
            hint="run it as root, e.g. sudo .venv/bin/sparkctl lab up",
        )
    require_tool("podman", package="podman runc")
    require_tool("runc")
    for tool, pkg in (
        ("ip", "iproute2"),
        ("tc", "iproute2"),
        ("nsenter", "util-linux"),
        ("ssh-keygen", "openssh-client"),
        ("ssh", "openssh-client"),
        ("nft", "nftables"),
    ):
        require_tool(tool, package=pkg)


class Lab:
    def __init__(self, spec: LabSpec, *, progress: Progress = log.info) -> None:
        self.spec = spec
        self.progress = progress
        self.dir = lab_dir()
        self.podman = Podman()

    # ---------------------------------------------------------------- queries
    def containers(self) -> dict[str, dict[str, Any]]:
        return {c["Names"][0]: c for c in self.podman.containers(LABEL)}

    def is_up(self) -> bool:
        running = {n for n, c in self.containers().items() if c.get("State") == "running"}
        return {h.name for h in self.spec.hosts} <= running

    # ------------------------------------------------------------------- up
    def up(self, *, rebuild: bool = False, mirror: str | None = None) -> bool:
        """Bring the lab up. Returns False when it was already up (left as it is)."""
        existing = self.containers()
        if existing:
            if self.is_up() and self.podman.network_exists(NETWORK):
                # A lab brought up before the guard existed, or one whose guard was
                # removed by hand, is sealed again; the nodes are not touched.
                self.guard()
                self.progress("the lab is already up; leaving it as it is (egress guard in place)")
                return False
            raise SparkctlError(
                f"a partial lab exists ({', '.join(sorted(existing))}); not touching it",
                ExitCode.LAB,
                hint="sparkctl lab down, then sparkctl lab up",
            )
        image = ensure_image(
            self.podman,
            work_dir=self.dir / "build",
            mirror=mirror,
            rebuild=rebuild,
            progress=self.progress,
        )
        self.dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            self._create(image)
            self._wire()
            self._dress()
            sshtrust.record(self, self.dir / "ssh")
        except BaseException:
            self.progress("lab up failed; removing what it created")
            self.down(quiet=True)
            raise
        self._write_state(image)
        self.progress(f"lab up in {time.monotonic() - started:.0f} s")
        return True

    def _create(self, image: str) -> None:
        if not self.podman.network_exists(NETWORK):
            self.podman(
                "network",
                "create",
                "--label",
                f"{LABEL}=1",
                "--subnet",
                self.spec.mgmt_subnet,
                "--gateway",
                self.spec.gateway,
                NETWORK,
            )
        # Sealed before any node starts: only lab-internal traffic (and HTTP(S) to
        # public addresses) until the nodes' mirror and resolvers are known.
        egress.apply(self.egress_plan(nodes=False))
        for host in self.spec.hosts:
            self.progress(f"starting {host.name} ({host.mgmt_ip})")
            self.podman(
                "run",
                "-d",
                "--name",
                host.name,
                "--hostname",
                host.name,
                "--label",
                f"{LABEL}=1",
                "--label",
                f"{LABEL}.role={host.role}",
                "--systemd=always",
                *(["--memory", NODE_MEMORY] if host.role == "spark" else []),
                "--cap-add",
                "NET_ADMIN",
                "--cap-add",
                "NET_RAW",
                "--cap-add",
                "AUDIT_WRITE",
                "--cap-add",
                "SYS_PTRACE",
                "--network",
                f"{NETWORK}:ip={host.mgmt_ip},mac={host.mgmt_mac},interface_name={MGMT_IF}",
                "--no-hosts",
                image,
            )
        self._pin_bridge_mac()
        with ThreadPoolExecutor(max_workers=len(self.spec.hosts)) as pool:
            list(pool.map(self._wait_booted, [h.name for h in self.spec.hosts]))
        self.guard()
        for host in self.spec.hosts:
            self._writable_net_sysctls(host.name)

    # ---------------------------------------------------------------- egress
    def egress_plan(self, *, nodes: bool = True) -> egress.EgressPlan:
        """The lab's egress guard (lab/sparkctl_lab/egress.py): its bridge, management and
        fabric networks, and - read from the running nodes when ``nodes`` - the package
        mirror their apt uses and the resolvers they ask."""
        urls: list[str] = []
        resolvers: list[ipaddress.IPv4Address] = []
        if nodes:
            for host in self.spec.hosts:
                # One exec per node; every file the node's apt reads its sources from.
                text = self.podman.exec(
                    host.name,
                    [
                        "sh",
                        "-c",
                        "cat /etc/resolv.conf; echo @@sparkctl@@; "
                        "cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
                        "/etc/apt/sources.list.d/*.sources 2>/dev/null; "
                        "true",
                    ],
                ).stdout
                resolv, _, sources = text.partition("@@sparkctl@@")
                urls += [u for u in egress.apt_uris(sources) if u not in urls]
                resolvers += [r for r in egress.resolvers(resolv) if r not in resolvers]
        return egress.EgressPlan(
            bridge=self.podman.network_interface(NETWORK),
            lab_network=ipaddress.IPv4Network(self.spec.mgmt_subnet),
            fabric_networks=tuple(ipaddress.IPv4Network(n) for n in self.spec.fabric_networks),
            resolvers=tuple(resolvers),
            mirrors=egress.mirror_endpoints(urls),
        )

    def guard(self) -> egress.EgressPlan:
        """Install (or renew) the egress guard for the running lab; returns its plan."""
        plan = self.egress_plan()
        egress.apply(plan)
        return plan

    def _pin_bridge_mac(self) -> None:
        """Give the lab's bridge a MAC of its own, as a switch's gateway has.

        A Linux bridge takes the lowest MAC of its ports unless one was set on it
        (br_stp_recalculate_bridge_id skips a bridge whose address was assigned), so
        while ``lab reboot`` removes and re-adds nodes' veths the controller's MAC would
        change under the nodes' ARP caches. netavark pins it itself from 1.9
        (containers/netavark#833, "bridge: force static mac on bridge interface");
        Debian 12's is 1.4. The bridge exists once a container is attached to it."""
        bridge = self.podman.network_interface(NETWORK)
        run(
            ["ip", "link", "set", "dev", bridge, "address", mgmt_mac(self.spec.gateway)],
            code=ExitCode.LAB,
            what=f"pin the MAC of the lab's bridge {bridge}",
        )

    def _writable_net_sysctls(self, name: str, pid: int | None = None) -> None:
        """Make /proc/sys/net (and only it) writable in the container.

        Roles set per-namespace net.* sysctls as on a real host. podman mounts
        /proc/sys read-only; unmasking all of it would let a container write
        host-wide sysctls such as vm.*, so only the net subtree is re-mounted
        read-write, inside the container's own mount namespace.
        """
        pid = pid or self.podman.pid(name)
        for cmd in (
            ["mount", "--bind", "/proc/sys/net", "/proc/sys/net"],
            ["mount", "-o", "remount,bind,rw", "/proc/sys/net"],
        ):
            run(
                ["nsenter", "-t", str(pid), "-m", *cmd],
                code=ExitCode.LAB,
                what=f"{name}: {' '.join(cmd)}",
            )

    def _wait_booted(self, name: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            proc = self.podman.exec(name, ["systemctl", "is-system-running"], check=False)
            state = proc.stdout.strip()
            if state in {"running", "degraded"}:
                if state == "degraded":
                    failed = self.podman.exec(
                        name, ["systemctl", "--failed", "--no-legend", "--plain"], check=False
                    ).stdout.strip()
                    log.warning("%s booted degraded: %s", name, failed)
                return
            time.sleep(0.5)
        raise SparkctlError(
            f"{name}: systemd did not finish booting in {timeout:.0f} s "
            f"(state: {state or 'unknown'})",
            ExitCode.LAB,
        )

    def _pids(self) -> tuple[dict[str, int], int]:
        nodes = {h.name: self.podman.pid(h.name) for h in self.spec.sparks}
        return nodes, self.podman.pid(self.spec.switch)

    def _wire(self) -> None:
        self.progress(
            f"cabling {len(self.spec.cables)} twins to {self.spec.switch}, "
            f"ports shaped to {self.spec.rate_mbit} Mbit/s"
        )
        node_pids, switch_pid = self._pids()
        fabric.wire(self.spec.cables, node_pids, switch_pid, self.spec.rate_mbit)

    def _dress(self) -> None:
        """Make each node look like a Spark: the hosts file, and on the Sparks every
        stand-in of :data:`sparkctl_lab.standins.PLACEMENTS` (release file,
        hardware.json, GPU/RoCE tools, docker and its image registry, nccl-tests)."""
        hosts_lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        hosts_lines += [f"{h.mgmt_ip} {h.name}" for h in self.spec.hosts]
        hosts_file = "\n".join(hosts_lines) + "\n"
        for host in self.spec.hosts:
            self.podman.write_file(host.name, "/etc/hosts", hosts_file)
        settings = standins.NodeSettings.from_inventory(inv_mod.load(self.spec.inventory))
        for host in self.spec.sparks:
            standins.dress(self.podman, host.name, self.spec.hardware, settings)

    def _write_state(self, image: str) -> None:
        state = {
            "inventory": str(self.spec.inventory.resolve()),
            "image": image,
            "network": NETWORK,
            "rate_mbit": self.spec.rate_mbit,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "hosts": {h.name: h.mgmt_ip for h in self.spec.hosts},
        }
        (self.dir / "lab.json").write_text(json.dumps(state, indent=2) + "\n")

    # --------------------------------------------------------------- reboot
    def reboot(self, names: list[str], *, timeout: float = 300) -> None:
        """Reboot lab Sparks, as close to a Spark's reboot as a container gets.

        Each node shuts down through its own systemd (``systemctl reboot``: every unit
        stopped in order, ExecStop= run). systemd 252 (Debian bookworm) has no
        ``soft-reboot`` (systemd 254), and in a container a reboot ends PID 1; podman has
        no restart policy here, so the container stops, and its network namespace goes
        with its cables. Then the nodes boot again in the order given, each from scratch
        (new /run, every unit started by its boot, nothing by sparkctl): ``podman init``
        makes the container's namespaces before its PID 1 runs, the node's cables are
        plugged into them with the switch port as it was (MTU, rate, up/down; the node's
        end down, for its netplan to bring up), and /proc/sys/net is made writable, as
        ``lab up`` does; only then ``podman start`` runs its systemd. The management
        address, the files and the SSH host keys are the container's and stay."""
        sparks = {h.name for h in self.spec.sparks}
        unknown = [n for n in names if n not in sparks]
        if unknown or not names:
            raise SparkctlError(
                f"not a Spark of the lab: {', '.join(unknown) or '(none given)'}"
                f" (Sparks: {', '.join(sorted(sparks))})",
                ExitCode.BAD_INPUT,
            )
        switch_pid = self.podman.pid(self.spec.switch)
        cables = [c for c in self.spec.cables if c.node in names]
        ports = fabric.port_states(fabric.links(switch_pid), fabric.port_rates(switch_pid), cables)
        for name in names:
            self.podman.pid(name)  # running, or a clear error
            self.progress(f"{name}: systemctl reboot")
            self.podman.exec(name, ["systemctl", "--no-block", "reboot"])
        for name in names:
            self.podman("wait", name, timeout=timeout)
        for name in names:
            pid = self.podman.init(name)
            mine = [c for c in cables if c.node == name]
            fabric.unplug_leftovers(switch_pid, mine)
            for cable in mine:
                fabric.plug(
                    cable,
                    pid,
                    switch_pid,
                    self.spec.rate_mbit,
                    port=ports.get(cable.port),
                    node_up=False,
                )
            fabric.plug_uncabled_pair(name, pid)
            self._writable_net_sysctls(name, pid)
            self.progress(f"{name}: cables plugged in, booting")
            self.podman("start", name)
            self._wait_booted(name, timeout)

    # ----------------------------------------------------------------- down
    def down(self, *, quiet: bool = False) -> list[str]:
        """Remove the lab's containers (their veths, ifbs and qdiscs go with their
        namespaces) and its network. Returns what was removed."""
        removed = []
        names = sorted(self.containers())
        if names:
            self.podman("rm", "-f", "-t", "0", *names, timeout=180)
            removed += [f"container {n}" for n in names]
        if self.podman.network_exists(NETWORK):
            self.podman("network", "rm", "-f", NETWORK)
            removed.append(f"network {NETWORK}")
        if egress.remove():
            removed.append(f"egress guard (nft table {egress.FAMILY} {egress.TABLE})")
        for stale in (self.dir / "lab.json", self.dir / "ssh" / "known_hosts"):
            if stale.exists():
                stale.unlink()
        # Facts cached by the runs against these containers describe machines
        # that no longer exist: the next lab's first run gathers afresh.
        shutil.rmtree(facts_dir(self.spec.cluster), ignore_errors=True)
        if not quiet:
            self.progress("removed: " + (", ".join(removed) if removed else "nothing (no lab)"))
        return removed

    # ---------------------------------------------------------------- status
    def status(self) -> dict[str, Any]:
        containers = self.containers()
        hosts: list[dict[str, Any]] = []
        rates: dict[str, int] = {}
        switch_pid: int | None = None
        if self.spec.switch in containers and containers[self.spec.switch]["State"] == "running":
            switch_pid = self.podman.pid(self.spec.switch)
            rates = fabric.port_rates(switch_pid)
        for h in self.spec.hosts:
            entry: dict[str, Any] = {
                "name": h.name,
                "role": h.role,
                "mgmt_ip": h.mgmt_ip,
                "state": containers.get(h.name, {}).get("State", "absent"),
                "links": [],
            }
            if entry["state"] == "running":
                pid = self.podman.pid(h.name)
                for link in fabric.links(pid):
                    name = link["name"]
                    if name == "lo" or name.startswith("ifb-"):
                        continue
                    entry["links"].append(
                        {
                            **link,
                            **(
                                {"rate_mbit": rates[name]}
                                if h.role == "switch" and name in rates
                                else {}
                            ),
                        }
                    )
            hosts.append(entry)
        up = all(h["state"] == "running" for h in hosts)
        return {
            "up": up,
            "network": NETWORK if self.podman.network_exists(NETWORK) else None,
            "egress_guard": egress.installed(),
            "rate_mbit": self.spec.rate_mbit,
            "inventory": str(self.spec.inventory),
            "hosts": hosts,
            "cables": [
                {"node": c.node, "interface": c.node_if, "port": c.port, "domain": c.domain}
                for c in self.spec.cables
            ],
        }

    # ---------------------------------------------------------------- ports
    def cable(self, ref: str) -> fabric.Cable:
        """A cable by switch port (``swp3``) or by node twin (``spark2:a``)."""
        node, _, twin = ref.partition(":")
        for c in self.spec.cables:
            if c.port == ref or (c.node == node and c.domain == twin):
                return c
        known = ", ".join(f"{c.port} ({c.node}:{c.domain})" for c in self.spec.cables)
        raise SparkctlError(
            f"no switch port or node twin '{ref}' (known: {known})", ExitCode.BAD_INPUT
        )

    def make_model(
        self, node: str, directory: str, size_bytes: int, *, files: int = 4, owner: str = "root"
    ) -> dict[str, Any]:
        """A synthetic model on ``node``: ``files`` shards of random bytes adding up to
        ``size_bytes``, a real model's config.json (:data:`MODEL_CONFIG`) and a safetensors
        index, written inside the container (the lab has no internet and needs no real
        weights to rehearse a transfer or a serving shape). Replaces what was there."""
        if size_bytes < files:
            raise SparkctlError(
                f"a model of {size_bytes} bytes cannot have {files} shards", ExitCode.BAD_INPUT
            )
        if node not in {h.name for h in self.spec.sparks}:
            raise SparkctlError(f"{node} is not a Spark of the lab", ExitCode.BAD_INPUT)
        if not directory.startswith("/"):
            raise SparkctlError(f"{directory} is not absolute", ExitCode.BAD_INPUT)
        self.podman.pid(node)  # running, or a clear error
        proc = self.podman.exec(
            node,
            [
                "python3",
                "-c",
                _MAKE_MODEL,
                directory,
                str(size_bytes),
                str(files),
                owner,
                MODEL_CONFIG.read_text(),
            ],
            timeout=3600,
        )
        made: dict[str, Any] = json.loads(proc.stdout)
        return made

    def set_port(
        self,
        cable: fabric.Cable,
        *,
        rate_mbit: int | None = None,
        mtu: int | None = None,
        up: bool | None = None,
    ) -> None:
        fabric.set_port(
            self.podman.pid(self.spec.switch), cable, rate_mbit=rate_mbit, mtu=mtu, up=up
        )


# The lab model's config.json: Llama-3.2-1B-Instruct's own (meta-llama on Hugging Face,
# revision 4e20de36, as kevinstephano/thunder_model_blocks hf_llama/llama_config.py
# reproduces it), so the stand-in ranks run that shape (16 layers, two all-reduces
# each, 4 KiB of hidden state a token) and model plan reads a real config. The
# weights beside it are random bytes of the size asked for, which model plan notes.
MODEL_CONFIG = Path(__file__).resolve().parent / "assets" / "model-config.json"

# Run inside a lab container by make_model (python3 is in the image): the config (argv),
# the shards and a safetensors index naming them (metadata.total_size: their bytes).
_MAKE_MODEL = r"""
import json, os, shutil, sys
root, size, shards, owner, config = sys.argv[1:6]
size, shards = int(size), int(shards)
shutil.rmtree(root, ignore_errors=True)
os.makedirs(root)
with open(os.path.join(root, "config.json"), "w") as handle:
    handle.write(config)
out = []
for i in range(shards):
    name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
    left = size // shards + (size % shards if i == shards - 1 else 0)
    with open(os.path.join(root, name), "wb") as handle:
        while left:
            block = os.urandom(min(left, 1 << 22))
            handle.write(block)
            left -= len(block)
    out.append(name)
weight_map = {f"model.layers.{i}.weight": n for i, n in enumerate(out)}
index = {"metadata": {"total_size": size}, "weight_map": weight_map}
with open(os.path.join(root, "model.safetensors.index.json"), "w") as handle:
    json.dump(index, handle, indent=1)
for dirpath, _, names in os.walk(root):
    shutil.chown(dirpath, owner)
    for name in names:
        shutil.chown(os.path.join(dirpath, name), owner)
files = ["config.json", "model.safetensors.index.json"] + out
print(json.dumps({"directory": root, "files": files, "size_bytes": size}))
"""


def _check_line_rate(path: Path, inv: Any, rate_mbit: int, *, overridden: bool) -> None:
    """validate gates against the inventory's validate_line_rate_gbytes: in the lab that
    must be the shaped rate in GB/s, or every bandwidth verdict is judged against the
    wrong line. A --rate given on the command line is the operator's own (docs/lab.md)."""
    value = inv.cluster_var("validate_line_rate_gbytes", None)
    if overridden or value is None:
        return
    want = rate_mbit / 8000
    try:
        have = float(value)
    except (TypeError, ValueError):
        have = None
    if have is None or isinstance(value, bool) or abs(have - want) > want * 1e-6:
        raise inv_mod.bad_input(
            path,
            None,
            "validate_line_rate_gbytes",
            f"{value!r} is not lab_link_rate_mbit {rate_mbit} in GB/s ({want:g}): "
            "validate would judge bandwidth against the wrong line rate",
        )
