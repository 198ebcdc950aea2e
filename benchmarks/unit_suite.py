#!/usr/bin/env python3
"""Where the unit suite's time goes, per file, at one or more revisions.

Each revision is checked out into a temporary git worktree and its tests/unit run
with this checkout's .venv (``pytest tests/unit -m "not lab"``, the worktree first on
PYTHONPATH so it, not this checkout, is the sparkctl under test; its ``python -m
sparkctl`` and ansible-playbook children inherit that). A plugin
(benchmarks/_pytest_cputime.py) records each test's wall time and CPU time: the pytest
process's own plus the children it reaped. On a shared machine the wall time follows
the load (recorded with each run); the CPU time is what the tests cost.

Revisions run one after the other, in the order given. Results:
benchmarks/results/unit-suite-<time>.json (per revision: the suite's wall time, totals,
per file wall/own/children CPU, the slowest tests) and a table on stdout. Timings are
recorded, never asserted. Usage:

    .venv/bin/python benchmarks/unit_suite.py REV [REV ...] [--deselect-file test_render.py]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"


def run_revision(rev: str, ignore: list[str], work: Path) -> dict[str, Any]:
    tree = work / f"tree-{rev.replace('/', '_')}"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    try:
        commit = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        rows_file = work / f"rows-{commit}.tsv"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tree), str(REPO / "benchmarks")]),
            "SPARKCTL_CPUTIME_OUT": str(rows_file),
        }
        argv = [
            str(PYTHON),
            "-m",
            "pytest",
            "tests/unit",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "_pytest_cputime",
            "-m",
            "not lab",
            *(f"--ignore=tests/unit/{name}" for name in ignore),
        ]
        load = os.getloadavg()[0]
        begun = time.monotonic()
        proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
        wall = time.monotonic() - begun
        summary = (proc.stdout.strip().splitlines() or [""])[-1]
        rows = [line.split("\t") for line in rows_file.read_text().splitlines()]
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            check=False,
            capture_output=True,
        )
    per_file: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    tests = []
    for node, w, own, children in rows:
        entry = per_file[node.split("::")[0]]
        entry[0] += 1
        entry[1] += float(w)
        entry[2] += float(own)
        entry[3] += float(children)
        tests.append((node, float(w), float(own) + float(children)))
    files = {
        name: {
            "tests": int(n),
            "wall_s": round(w, 1),
            "own_cpu_s": round(o, 1),
            "children_cpu_s": round(c, 1),
        }
        for name, (n, w, o, c) in sorted(per_file.items(), key=lambda kv: -kv[1][1])
    }
    return {
        "revision": rev,
        "commit": commit,
        "pytest": summary,
        "exit": proc.returncode,
        "load_avg_1m_at_start": round(load, 2),
        "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
        "wall_s": round(wall, 1),
        "tests_wall_s": round(sum(f["wall_s"] for f in files.values()), 1),
        "cpu_s": round(sum(f["own_cpu_s"] + f["children_cpu_s"] for f in files.values()), 1),
        "files": files,
        "slowest": [
            {"test": n, "wall_s": round(w, 1), "cpu_s": round(c, 1)}
            for n, w, c in sorted(tests, key=lambda t: -t[1])[:25]
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("revisions", nargs="+")
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="FILE",
        help="a tests/unit file to leave out (repeatable), e.g. test_render.py",
    )
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rev in args.revisions:
            print(f"unit suite at {rev} ...", file=sys.stderr, flush=True)
            runs.append(run_revision(rev, args.ignore, Path(tmp)))
    report = {
        "benchmark": "unit-suite",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "ignored": args.ignore,
        "runs": runs,
    }
    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"unit-suite-{dt.datetime.now(dt.UTC).strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    for run in runs:
        print(
            f"{run['revision']} ({run['commit'][:7]}): {run['pytest']}; wall {run['wall_s']} s, "
            f"CPU {run['cpu_s']} s, load {run['load_avg_1m_at_start']}"
        )
    names = sorted(
        {f for run in runs for f in run["files"]},
        key=lambda f: -max(r["files"].get(f, {}).get("wall_s", 0) for r in runs),
    )
    print(f"{'file':45}" + "".join(f"{r['revision'][:12]:>26}" for r in runs))
    for name in names[:25]:
        cells = []
        for run in runs:
            f = run["files"].get(name)
            cells.append(
                f"{f['wall_s']:>9} s {f['own_cpu_s'] + f['children_cpu_s']:>8.1f} cpu"
                if f
                else f"{'-':>26}"
            )
        print(f"{name.removeprefix('tests/unit/'):45}" + "".join(f"{c:>26}" for c in cells))
    print(out)


if __name__ == "__main__":
    main()
