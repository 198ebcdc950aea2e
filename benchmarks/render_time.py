#!/usr/bin/env python3
"""How long `sparkctl render` takes, and where the time goes.

Renders INVENTORY RUNS times, each into a fresh output and state directory,
in the environment tests/conftest.py renders it in (RENDER_API_KEYS: lab.ini
with the sentinel key exported, the lab's inventories with none), and for each
run reports the wall time, the CPU seconds of the whole process tree, the
number of files, and from ansible-runner's job events the seconds of the
preflight play and of each role, split into tasks that wrote a file
("writes": template, copy, file or sparkctl_render_file) and the rest. Right
before each render, `sparkctl inventory check` of the same inventory is timed
the same way, so the render's multiple of it (the goal is 3x at most)
is measured in the same minute, under the same load.
``--checkout DIR`` runs the sparkctl, playbooks and roles of another tree (a
`git worktree` of an older commit, say) with this venv, so a before and an
after are measured the same way. Results go to
benchmarks/results/render-time-<time>.json and stdout.

Timings are recorded, never asserted: they depend on the machine and its
load (quote medians). Usage:

    .venv/bin/python benchmarks/render_time.py [inventory/sim.ini] [--runs 3] [--checkout DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# The same sentinel and choice of environment as tests/conftest.py (RENDER_API_KEYS).
SENTINEL_KEY = "sentinel-api-key-5f0c2d9b7e"
API_KEYS: dict[str, str | None] = {"lab": SENTINEL_KEY}
WRITES = ("template", "copy", "file", "sparkctl_render_file")
# `sparkctl render` as the CLI runs it, from the tree in the working directory.
MAIN = "import sys; from sparkctl.cli import main; sys.argv[0] = 'sparkctl'; main()"


def _when(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp)


def phases(events_dir: Path) -> dict[str, dict[str, float]]:
    """play or role -> {tasks, write_tasks, write_s, other_s} from job event files."""
    events = sorted(
        (json.loads(p.read_text()) for p in events_dir.glob("*.json")), key=lambda e: e["counter"]
    )
    marks: list[tuple[str, dt.datetime, str]] = []  # where, time, action ("" = no task)
    play = ""
    for event in events:
        data = event.get("event_data", {})
        if event["event"] == "playbook_on_play_start":
            play = str(data.get("play", ""))
            marks.append(("", _when(event["created"]), ""))
        elif event["event"] == "playbook_on_task_start":
            where = "preflight play" if play == "Preflight" else (data.get("role") or play)
            marks.append((where, _when(event["created"]), str(data.get("task_action", ""))))
        elif event["event"] == "playbook_on_stats":
            marks.append(("", _when(event["created"]), ""))
    out: dict[str, dict[str, float]] = defaultdict(
        lambda: {"tasks": 0, "write_tasks": 0, "write_s": 0.0, "other_s": 0.0}
    )
    for (where, begun, action), (_, ended, _) in pairwise(marks):
        if not where:
            continue
        row = out[where]
        write = action.rsplit(".", 1)[-1] in WRITES
        row["tasks"] += 1
        row["write_tasks"] += int(write)
        row["write_s" if write else "other_s"] += (ended - begun).total_seconds()
    return {k: {f: round(v, 2) for f, v in row.items()} for k, row in out.items()}


def _timed(args: list[str], checkout: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (the process and its children) of `sparkctl ARGS`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begun = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", MAIN, *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=checkout,
        env=env,
    )
    wall = time.monotonic() - begun
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(
            f"sparkctl {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}"
        )
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def one_run(inventory: Path, checkout: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="render-time-") as tmp:
        # The tree's own sparkctl in ansible-playbook too (the preflight filter imports
        # sparkctl.rules), not the one the venv's editable install points at.
        env = {
            **os.environ,
            "SPARKCTL_STATE_DIR": f"{tmp}/state",
            "PYTHONPATH": str(checkout),
        }
        env.pop("SPARKCTL_SGLANG_API_KEY", None)
        key = API_KEYS.get(inventory.stem)
        if key is not None:
            env["SPARKCTL_SGLANG_API_KEY"] = key
        check_wall, check_cpu = _timed(["inventory", "check", str(inventory)], checkout, env)
        wall, cpu = _timed(["render", str(inventory), "--out", f"{tmp}/out"], checkout, env)
        files = sum(1 for p in Path(tmp, "out").rglob("*") if p.is_file())
        (events,) = Path(tmp, "state").glob("results/*/*-render/artifacts/run/job_events")
        return {
            "check_wall_s": round(check_wall, 2),
            "check_cpu_s": round(check_cpu, 2),
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1),
            "files": files,
            "phases": phases(events),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", nargs="?", default="inventory/sim.ini", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--checkout",
        type=Path,
        default=REPO,
        help="the tree whose sparkctl, playbooks and roles run (default: this one)",
    )
    args = parser.parse_args()
    checkout = args.checkout.resolve()
    commit = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    runs = [one_run(args.inventory, checkout) for _ in range(args.runs)]
    report = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
        },
        "inventory": str(args.inventory),
        "commit": commit or None,
        "median_wall_s": statistics.median(r["wall_s"] for r in runs),
        "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "median_check_wall_s": statistics.median(r["check_wall_s"] for r in runs),
        "median_check_cpu_s": statistics.median(r["check_cpu_s"] for r in runs),
        "median_render_over_check": statistics.median(
            r["wall_s"] / r["check_wall_s"] for r in runs
        ),
        "runs": runs,
    }
    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"render-time-{dt.datetime.now():%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    for i, run in enumerate(runs, 1):
        print(
            f"run {i}: {run['wall_s']} s wall, {run['cpu_s']} s CPU, {run['files']} files "
            f"(inventory check: {run['check_wall_s']} s wall, {run['check_cpu_s']} s CPU)"
        )
        for where, row in sorted(
            run["phases"].items(), key=lambda kv: -(kv[1]["write_s"] + kv[1]["other_s"])
        ):
            print(
                f"  {where:18} {row['tasks']:3.0f} tasks ({row['write_tasks']:3.0f} writing)"
                f"  writing {row['write_s']:6.1f} s  other {row['other_s']:6.1f} s"
            )
    print(
        f"median {report['median_wall_s']} s wall, {report['median_cpu_s']} s CPU; "
        f"inventory check {report['median_check_wall_s']} s wall, "
        f"{report['median_check_cpu_s']} s CPU; render / check "
        f"{report['median_render_over_check']:.1f}x; written to {out.relative_to(REPO)}"
    )


if __name__ == "__main__":
    main()
