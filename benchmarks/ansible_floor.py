#!/usr/bin/env python3
"""The floor under a no-change provision: what bare Ansible round trips cost here.

Generates two throw-away playbooks against the Sparks of an inventory, with the
project's ansible.cfg (pipelining, SSH connection reuse, forks):

- REMOTE trivial remote tasks (``ansible.builtin.stat`` of /etc/hostname), the
  cheapest module round trip to every node;
- LOCAL trivial controller-only tasks (``ansible.builtin.assert: that: true``).

and times each. A provision whose roles need R round trips and L controller
tasks cannot be faster than roughly R x (remote per task) + L x (local per
task) on the same machine, whatever the roles do. Defaults match a no-change
provision of the lab as measured by provision_noop.py (58 and 160).

Results go to benchmarks/results/ansible-floor-<time>.json; nothing is
asserted. Usage (against a running, provisioned lab):

    .venv/bin/python benchmarks/ansible_floor.py [inventory/sim.ini] [--remote 58] [--local 160]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def playbook(kind: str, count: int) -> str:
    lines = ["- name: Floor", "  hosts: sparks", "  gather_facts: false", "  tasks:"]
    for i in range(count):
        if kind == "remote":
            lines += [
                f"    - name: stat {i}",
                "      ansible.builtin.stat:",
                "        path: /etc/hostname",
            ]
        else:
            lines += [
                f"    - name: assert {i}",
                "      ansible.builtin.assert:",
                "        that: true",
                "        quiet: true",
            ]
    return "\n".join(lines) + "\n"


def timed(inventory: Path, kind: str, count: int, work: Path) -> float:
    path = work / f"{kind}.yml"
    path.write_text(playbook(kind, count))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    begun = time.monotonic()
    proc = subprocess.run(
        [str(PLAYBOOK), "-i", str(inventory), str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - begun
    if proc.returncode != 0:
        sys.exit(f"{kind} playbook failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", default="inventory/sim.ini", type=Path)
    parser.add_argument("--remote", type=int, default=58)
    parser.add_argument("--local", type=int, default=160)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        remote = timed(args.inventory.resolve(), "remote", args.remote, Path(tmp))
        local = timed(args.inventory.resolve(), "local", args.local, Path(tmp))
    report = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
        "inventory": str(args.inventory),
        "remote": {
            "tasks": args.remote,
            "seconds": round(remote, 1),
            "per_task": round(remote / max(args.remote, 1), 3),
        },
        "local": {
            "tasks": args.local,
            "seconds": round(local, 1),
            "per_task": round(local / max(args.local, 1), 3),
        },
    }
    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"ansible-floor-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{args.remote} trivial remote tasks: {remote:.1f} s; "
        f"{args.local} trivial controller tasks: {local:.1f} s; "
        f"floor {remote + local:.1f} s -> {out.relative_to(REPO)}"
    )


if __name__ == "__main__":
    main()
