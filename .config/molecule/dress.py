"""Make molecule instances look like the rehearsal lab's Sparks and switch.

Run on the controller, as root, by prepare.yml with one JSON argument (see
``main``). It reuses the lab's own code, so a molecule instance is dressed
exactly as ``sparkctl lab up`` dresses a node:

- ``/proc/sys/net`` (and only it) writable in each instance
  (``Lab._writable_net_sysctls``: never all of /proc/sys, which would let a
  container write host-wide sysctls);
- the fabric: with a switch, every twin cabled to its switch port from
  ``switch_ports``, bridged per twin and shaped (``sparkctl_lab.fabric.wire``);
  without one, two Sparks cabled back to back (twin a to twin a, b to b) and a
  lone Spark's twins cabled to each other; every Spark also gets the uncabled
  port-0 pair, left down;
- on every Spark: everything ``sparkctl_lab.standins.PLACEMENTS`` lists
  (``/etc/sparkctl-lab/hardware.json``, ``/etc/dgx-release``, nvidia-smi,
  ibdev2netdev, show_gids, docker and docker.service, the nccl-tests
  binaries, the image registry), by the lab's own ``standins.dress``;
- for instances Ansible reaches over SSH: an authorised client key and the
  recorded host keys, host key checking strict (``sparkctl_lab.sshtrust``).

Prints ``{"changed": ..., ...}``; a second run changes nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sparkctl.errors import SparkctlError  # noqa: E402
from sparkctl.proc import run  # noqa: E402
from sparkctl_lab import (  # noqa: E402
    fabric,
    sshtrust,
    standins,
)
from sparkctl_lab.hardware import HARDWARE_JSON_PATH, LabHardware  # noqa: E402
from sparkctl_lab.lab import Lab, LabHost  # noqa: E402
from sparkctl_lab.podman import Podman  # noqa: E402


@dataclass
class _Spec:
    hosts: tuple[LabHost, ...]


@dataclass
class Instances:
    """The attributes of :class:`sparkctl_lab.lab.Lab` that the reused lab code reads."""

    hosts: tuple[LabHost, ...]
    podman: Podman = field(default_factory=Podman)

    @property
    def spec(self) -> _Spec:
        return _Spec(self.hosts)

    def progress(self, message: str) -> None:
        print(message, file=sys.stderr)


def _net_is_writable(pid: int) -> bool:
    proc = run(
        ["nsenter", "-t", str(pid), "-m", "findmnt", "-no", "OPTIONS", "/proc/sys/net"], check=False
    )
    return proc.returncode == 0 and proc.stdout.strip().startswith("rw")


def _has_link(pid: int, dev: str) -> bool:
    return run(fabric.nsenter(pid, ["ip", "link", "show", "dev", dev]), check=False).returncode == 0


def _veth(pid_a: int, name_a: str, pid_b: int, name_b: str) -> None:
    run(
        [
            "ip",
            "link",
            "add",
            name_a,
            "netns",
            str(pid_a),
            "type",
            "veth",
            "peer",
            "name",
            name_b,
            "netns",
            str(pid_b),
        ],
        what=f"veth {name_a} -- {name_b}",
    )


def wire_without_switch(
    sparks: list[str], pids: dict[str, int], netdevs: dict[str, str]
) -> list[str]:
    """Two Sparks back to back, or one Spark's twins to each other; port 0 uncabled."""
    if len(sparks) == 2:
        one, two = sparks
        for dev in netdevs.values():
            _veth(pids[one], dev, pids[two], dev)
        cables = [f"{one}:{dev} -- {two}:{dev}" for dev in netdevs.values()]
    elif len(sparks) == 1:
        (one,) = sparks
        _veth(pids[one], netdevs["a"], pids[one], netdevs["b"])
        cables = [f"{one}:{netdevs['a']} -- {one}:{netdevs['b']}"]
    else:
        raise SystemExit(
            f"{len(sparks)} Sparks without a switch: add a host in group "
            "`switches` and switch_ports to the scenario"
        )
    for node in sparks:
        for dev in netdevs.values():
            fabric.ns_run(pids[node], ["ip", "link", "set", dev, "up"])
        _veth(pids[node], fabric.UNCABLED_PAIR[0], pids[node], fabric.UNCABLED_PAIR[1])
    return cables


def wire_switch(
    sparks: list[str],
    switch: str,
    ports: dict[str, Any],
    *,
    pids: dict[str, int],
    netdevs: dict[str, str],
    rate_mbit: int,
) -> list[str]:
    """The lab's own wiring: one veth per twin to its switch port, bridged per twin."""
    cables = []
    for port, spec in ports.items():
        if spec.get("twin") not in netdevs or spec.get("node") not in sparks:
            raise SystemExit(
                f"switch_ports.{port}: {spec} - the lab cables one twin (a or b) "
                f"of a Spark in this scenario ({', '.join(sparks)}) per port"
            )
        cables.append(fabric.Cable(spec["node"], netdevs[spec["twin"]], port, spec["twin"]))
    fabric.wire(cables, {n: pids[n] for n in sparks}, pids[switch], rate_mbit)
    return [f"{c.node}:{c.node_if} -- {switch}:{c.port} ({c.bridge})" for c in cables]


def dress_spark(
    podman: Podman, name: str, hardware: LabHardware, settings: standins.NodeSettings | None = None
) -> None:
    """Dress one instance as ``sparkctl lab up`` dresses a Spark (the same table,
    sparkctl_lab.standins.PLACEMENTS). ``settings`` default to the roles'
    defaults (nccl_tests_dir, sglang_image)."""
    standins.dress(podman, name, hardware, settings or standins.NodeSettings.from_values())


def main(argv: list[str]) -> int:
    """argv[1]: JSON {sparks: [names], switch: name|null, switch_ports: {port: {node, twin}},
    netdevs: {a, b}, link_rate_mbit, gpu_driver_version, cuda_version,
    ssh: {dir, hosts: [{name, address}]}|null}."""
    spec = json.loads(argv[1])
    sparks: list[str] = list(spec["sparks"])
    switch: str | None = spec.get("switch")
    netdevs: dict[str, str] = dict(spec["netdevs"])
    everyone = sparks + ([switch] if switch else [])
    instances = Instances(
        tuple(LabHost(n, "", "spark" if n in sparks else "switch") for n in everyone)
    )
    podman = instances.podman
    pids = {n: podman.pid(n) for n in everyone}
    changed: list[str] = []

    for name in everyone:
        if not _net_is_writable(pids[name]):
            Lab._writable_net_sysctls(instances, name)  # type: ignore[arg-type]
            changed.append(f"{name}: /proc/sys/net writable")

    cables: list[str] = []
    if sparks and not _has_link(pids[sparks[0]], netdevs["a"]):
        if switch and spec.get("switch_ports"):
            cables = wire_switch(
                sparks,
                switch,
                spec["switch_ports"],
                pids=pids,
                netdevs=netdevs,
                rate_mbit=int(spec["link_rate_mbit"]),
            )
        else:
            cables = wire_without_switch(sparks, pids, netdevs)
        changed.append(f"fabric cabled: {len(cables)} cables")

    hardware = LabHardware(
        driver_version=str(spec["gpu_driver_version"]),
        cuda_version=str(spec["cuda_version"]),
        link_rate_mbit=int(spec["link_rate_mbit"]),
    )
    for name in sparks:
        current = podman.exec(name, ["cat", HARDWARE_JSON_PATH], check=False)
        if current.returncode != 0 or current.stdout != hardware.to_json(name):
            dress_spark(podman, name, hardware)
            changed.append(f"{name}: dressed as a DGX Spark")

    ssh = spec.get("ssh")
    if ssh and ssh["hosts"]:
        ssh_dir = Path(ssh["dir"])
        trusted = Instances(
            tuple(LabHost(h["name"], h["address"], "spark") for h in ssh["hosts"]), podman
        )
        # Always read the instances' keys: the ephemeral directory (and its
        # known_hosts) outlives the containers of an earlier run of the scenario.
        if sshtrust.record(trusted, ssh_dir):
            changed.append(f"SSH trust recorded in {ssh_dir}")

    print(json.dumps({"changed": bool(changed), "changes": changed, "cables": cables}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (SparkctlError, subprocess.SubprocessError) as exc:
        sys.exit(f"dress.py: {exc}")
