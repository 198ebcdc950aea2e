#!/usr/bin/env python3
"""What a sparkctl command costs before it contacts anything: `sparkctl inventory check`,
as a whole process, at two revisions in turn (A B A B ...).

Each revision is checked out into a temporary git worktree and run there (its directory
first on sys.path, then PYTHONPATH) with this checkout's .venv. Every command that takes
an inventory starts with this check (provision, validate, serve, render), so its time is
their start-up.
Per run: wall time and the child's CPU (user + system, from its rusage). Results:
benchmarks/results/cli-check-<time>.json and stdout; medians are the figures to quote.
Timings are recorded, never asserted. Usage:

    .venv/bin/python benchmarks/cli_check.py REV_A REV_B [--runs 9] [--inventory inventory/sim.ini]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"


def once(tree: Path, inventory: str, state: Path) -> tuple[float, float, int]:
    env = {**os.environ, "PYTHONPATH": str(tree), "SPARKCTL_STATE_DIR": str(state)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    begun = time.monotonic()
    proc = subprocess.run(
        [str(PYTHON), "-m", "sparkctl", "inventory", "check", str(tree / inventory)],
        env=env,
        cwd=tree,
        capture_output=True,
        check=False,
    )
    wall = time.monotonic() - begun
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev_a")
    parser.add_argument("rev_b")
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--inventory", default="inventory/sim.ini")
    args = parser.parse_args()
    samples: dict[str, list[tuple[float, float, int]]] = {args.rev_a: [], args.rev_b: []}
    commits: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees: dict[str, Path] = {}
        for rev in samples:
            tree = Path(tmp) / f"tree-{len(trees)}"
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
                check=True,
                capture_output=True,
            )
            trees[rev] = tree
            commits[rev] = subprocess.run(
                ["git", "-C", str(tree), "rev-parse", "HEAD"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        try:
            for tree in trees.values():  # warm-up: the page cache, not counted
                once(tree, args.inventory, Path(tmp) / "state")
            for _ in range(args.runs):
                for rev, tree in trees.items():
                    samples[rev].append(once(tree, args.inventory, Path(tmp) / "state"))
        finally:
            for tree in trees.values():
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                    check=False,
                    capture_output=True,
                )

    def spread(values: list[float]) -> dict[str, float]:
        return {
            "min": round(min(values), 3),
            "median": round(statistics.median(values), 3),
            "max": round(max(values), 3),
        }

    def figures(rows: list[tuple[float, float, int]]) -> dict[str, Any]:
        return {
            "exit_codes": sorted({r[2] for r in rows}),
            "wall_s": spread([r[0] for r in rows]),
            "cpu_s": spread([r[1] for r in rows]),
        }

    report = {
        "benchmark": "cli-check",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "command": f"sparkctl inventory check {args.inventory}",
        "runs": args.runs,
        "revisions": {
            rev: {"commit": commits[rev], **figures(rows)} for rev, rows in samples.items()
        },
    }
    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"cli-check-{dt.datetime.now(dt.UTC).strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    for rev, data in report["revisions"].items():
        print(
            f"{rev} ({data['commit'][:7]}): wall {data['wall_s']['median']} s, "
            f"CPU {data['cpu_s']['median']} s (median of {args.runs}), exit {data['exit_codes']}"
        )
    print(out)


if __name__ == "__main__":
    main()
