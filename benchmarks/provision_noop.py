#!/usr/bin/env python3
"""How long a no-change `sparkctl provision` takes, and where the time goes.

Runs `sparkctl provision INVENTORY --json` RUNS times against a running,
already provisioned cluster (the lab: `sparkctl lab up` and one provision
first), and for each run reports the wall time, the changed count per host
(a no-change run must be all zeros) and, from ansible-runner's job events,
the seconds spent per role split into tasks that ran a module on the hosts
("remote") and tasks the controller did alone (assert, set_fact, skipped).
Results go to benchmarks/results/provision-noop-<time>.json and stdout.

Timings are recorded, never asserted: they depend on the machine and its
load. Usage:

    .venv/bin/python benchmarks/provision_noop.py [inventory/sim.ini] [--runs 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SPARKCTL = Path(sys.executable).parent / "sparkctl"
CONTROLLER_ONLY = (
    "assert",
    "set_fact",
    "debug",
    "validate_argument_spec",
    "include_tasks",
    "import_tasks",
    "meta",
    "include_role",
    "import_role",
)


def _when(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp)


def per_role(events_dir: Path) -> dict[str, dict[str, float]]:
    """role -> {tasks, remote_tasks, remote_s, controller_s} from job event files."""
    events = sorted(
        (json.loads(p.read_text()) for p in events_dir.glob("*.json")), key=lambda e: e["counter"]
    )
    starts: list[tuple[str, dt.datetime, str, str]] = []  # uuid, time, role, action
    ran: dict[str, int] = defaultdict(int)
    for event in events:
        data = event.get("event_data", {})
        if event["event"] == "playbook_on_task_start":
            starts.append(
                (
                    data["task_uuid"],
                    _when(event["created"]),
                    data.get("role") or "(play)",
                    data.get("task_action", ""),
                )
            )
        elif event["event"] in ("playbook_on_play_start", "playbook_on_stats"):
            starts.append(("", _when(event["created"]), "", ""))
        elif event["event"] == "runner_on_ok":
            ran[data.get("task_uuid", "")] += 1
    out: dict[str, dict[str, float]] = defaultdict(
        lambda: {"tasks": 0, "remote_tasks": 0, "remote_s": 0.0, "controller_s": 0.0}
    )
    for (uuid, begun, role, action), (_, ended, _, _) in pairwise(starts):
        if not uuid:
            continue
        seconds = (ended - begun).total_seconds()
        row = out[role]
        row["tasks"] += 1
        remote = ran[uuid] > 0 and not action.endswith(CONTROLLER_ONLY)
        row["remote_tasks"] += int(remote)
        row["remote_s" if remote else "controller_s"] += seconds
    return {role: {k: round(v, 1) for k, v in row.items()} for role, row in out.items()}


def one_run(inventory: Path) -> dict[str, Any]:
    begun = time.monotonic()
    proc = subprocess.run(
        [str(SPARKCTL), "provision", str(inventory), "--json"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    wall = time.monotonic() - begun
    try:
        result = json.loads(proc.stdout[proc.stdout.index("{") :])
    except ValueError:
        sys.exit(f"provision printed no JSON (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    if proc.returncode != 0:
        sys.exit(f"provision failed (exit {proc.returncode}): {result.get('failures')}")
    return {
        "wall_s": round(wall, 1),
        "ansible_s": result["duration_s"],
        "changed": {h: s["changed"] for h, s in result["hosts"].items()},
        "roles": per_role(Path(result["artifact_dir"]) / "job_events"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", default="inventory/sim.ini", type=Path)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    runs = [one_run(args.inventory) for _ in range(args.runs)]
    report = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
        },
        "inventory": str(args.inventory),
        "runs": runs,
    }
    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"provision-noop-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    for i, run in enumerate(runs, 1):
        changed = sum(run["changed"].values())
        print(
            f"run {i}: {run['wall_s']} s wall ({run['ansible_s']} s in ansible), changed={changed}"
        )
        for role, row in sorted(
            run["roles"].items(), key=lambda kv: -(kv[1]["remote_s"] + kv[1]["controller_s"])
        ):
            print(
                f"  {role:18} {row['tasks']:4.0f} tasks ({row['remote_tasks']:3.0f} on hosts)"
                f"  hosts {row['remote_s']:6.1f} s  controller {row['controller_s']:6.1f} s"
            )
    print(f"written to {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
