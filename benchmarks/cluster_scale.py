#!/usr/bin/env python3
"""What a cluster of N lab Sparks costs, per node, and how much of it is the controller's.

For each N of ``--nodes`` (default 4,8) this writes an inventory like
inventory/sim.ini with spark1..N (its group_vars/sim a copy of the project's,
with switch ports swp1..swp2N for the N nodes' twins), brings the lab up from it
(``sparkctl lab up -i``), and times, in order: the first ``provision``, ``--runs``
no-change provisions and one ``validate``. For each command it records the wall
time and the CPU seconds of the controller's own process tree (sparkctl,
ansible-playbook, its forks and ssh clients, all children of this process:
``RUSAGE_CHILDREN``); the nodes are containers under conmon, not children, so
their CPU is not in that figure. The machine's total CPU over the same span
(/proc/stat) is recorded beside it, so the controller's share is
``controller_cpu_s / machine_cpu_s``.

Per-node figures are the command's figures divided by N. What grows faster than
N is the part of the cost that is not per node: with both figures, a controller
CPU per node that stays flat while the wall per node grows points at the
shared cores, one that grows at the controller (templating over all hosts,
serial steps, batches of forks).

The lab the benchmark started is taken down at the end (``sparkctl lab down``),
as is any lab that was up before it (it needs the addresses). Results go to
benchmarks/results/cluster-scale-<time>.json and stdout. Timings are recorded,
never asserted. Usage:

    .venv/bin/python benchmarks/cluster_scale.py [--nodes 4,8] [--runs 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
SPARKCTL = Path(sys.executable).parent / "sparkctl"
MGMT, FABRIC_A, FABRIC_B = "10.77.0.", "192.168.100.", "192.168.101."


def write_inventory(directory: Path, nodes: int) -> Path:
    """sim.ini's form with spark1..nodes (addresses .11 up, as sim.ini's), beside a
    copy of its group_vars whose switch ports name every node's two twins."""
    if not 1 <= nodes <= 40:
        raise SystemExit(f"--nodes: {nodes} is outside 1..40 (the lab's address plan)")
    shutil.copytree(REPO / "inventory" / "group_vars", directory / "group_vars")
    cluster = directory / "group_vars" / "sim" / "cluster.yml"
    data = yaml.safe_load(cluster.read_text())
    data["switch_ports"] = {
        f"swp{2 * i + 1 + t}": {"node": f"spark{i + 1}", "twin": twin}
        for i in range(nodes)
        for t, twin in enumerate("ab")
    }
    cluster.write_text(yaml.safe_dump(data, sort_keys=False))
    lines = ["[sparks]"]
    for i in range(nodes):
        host = 11 + i
        lines.append(
            f"spark{i + 1} ansible_host={MGMT}{host} node_rank={i} "
            f"fabric_a_ip={FABRIC_A}{host} fabric_b_ip={FABRIC_B}{host}"
        )
    lines += [
        "",
        "[switches]",
        f"lab-switch ansible_host={MGMT}2 switch_os=linux",
        "",
        "[sim:children]",
        "sparks",
        "switches",
        "",
    ]
    path = directory / f"sim{nodes}.ini"
    path.write_text("\n".join(lines))
    return path


def _machine_cpu() -> float:
    """CPU seconds every core has spent busy since boot (user..steal of /proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def timed(*args: str, check: bool = True) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine = _machine_cpu()
    begun = time.monotonic()
    proc = subprocess.run(
        [str(SPARKCTL), *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
        cwd=REPO,
    )
    wall = time.monotonic() - begun
    machine = _machine_cpu() - machine
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if check and proc.returncode != 0:
        raise SystemExit(
            f"sparkctl {' '.join(args)} failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": round(wall, 1),
        "controller_cpu_s": round(cpu, 1),
        "machine_cpu_s": round(machine, 1),
        "rc": proc.returncode,
    }


def one_size(nodes: int, runs: int, work: Path) -> dict[str, Any]:
    directory = work / f"n{nodes}"
    directory.mkdir()
    inv = write_inventory(directory, nodes)
    timed("lab", "down")
    up = timed("lab", "up", "-i", str(inv))
    row: dict[str, Any] = {
        "nodes": nodes,
        "lab_up": up,
        "first_provision": timed("provision", str(inv), "--json"),
    }
    row["noop_provision"] = [timed("provision", str(inv), "--json") for _ in range(runs)]
    row["validate"] = timed("validate", str(inv), check=False)
    noop = min(r["wall_s"] for r in row["noop_provision"])
    noop_cpu = min(r["controller_cpu_s"] for r in row["noop_provision"])
    row["per_node"] = {
        "first_provision_s": round(row["first_provision"]["wall_s"] / nodes, 1),
        "noop_provision_s": round(noop / nodes, 1),
        "noop_controller_cpu_s": round(noop_cpu / nodes, 1),
        "validate_s": round(row["validate"]["wall_s"] / nodes, 1),
    }
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="4,8", help="cluster sizes, comma-separated")
    parser.add_argument("--runs", type=int, default=2, help="no-change provisions per size")
    args = parser.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="sparkctl-scale-"))
    try:
        rows = [one_size(n, max(1, args.runs), work) for n in sizes]
    finally:
        timed("lab", "down", check=False)
        shutil.rmtree(work, ignore_errors=True)
    record = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
        },
        "sizes": rows,
    }
    out = REPO / "benchmarks" / "results" / f"cluster-scale-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(
        "nodes  first provision  no-change provision (controller CPU)  validate   per node: "
        "first / no-change / controller CPU / validate"
    )
    for row in rows:
        noop = min(row["noop_provision"], key=lambda r: r["wall_s"])
        per = row["per_node"]
        print(
            f"{row['nodes']:5d}  {row['first_provision']['wall_s']:13.1f} s  "
            f"{noop['wall_s']:11.1f} s ({noop['controller_cpu_s']:6.1f} CPU-s of "
            f"{noop['machine_cpu_s']:6.1f})  {row['validate']['wall_s']:8.1f} s   "
            f"{per['first_provision_s']} / {per['noop_provision_s']} / "
            f"{per['noop_controller_cpu_s']} / {per['validate_s']} s"
        )
    print(f"written to {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
