#!/usr/bin/env python3
"""Where the test suite's wall time goes, read from a pytest log.

Reads the log of a full run (``scripts/test.sh`` or ``.ci/run`` with
``PYTEST_ADDOPTS=--durations=0`` so that every test's setup, call and
teardown is listed) and sums the durations per phase: unit, contract, lab,
molecule. Because the molecule scenarios run on a background thread beside
the unit tests (tests/molecule/conftest.py), a molecule test's "call" is how
long it *waited* for its scenario after the lab was done, not the scenario's
own time; the scenarios' own wall times are in the log's "molecule test wall
times" section, read here too. The sum of the phases can therefore be less
than the sum of the scenario times: that difference is the overlap.

Timings are recorded, never asserted. Usage:

    PYTEST_ADDOPTS=--durations=0 .ci/run > ci.log 2>&1
    .venv/bin/python benchmarks/suite_phases.py ci.log [--wall SECONDS]

Results go to benchmarks/results/suite-phases-<time>.json and stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
from collections import defaultdict
from pathlib import Path

DURATION = re.compile(r"^\s*([\d.]+)s (setup|call|teardown)\s+tests/(\w+)/(\S+)")
SCENARIO = re.compile(r"^\s{2}(\w+)\s+(\d+) s\s+(.+)$")
SUMMARY = re.compile(r"=+ (.*) in ([\d.]+)s")


def phases(text: str) -> dict[str, object]:
    per_phase: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for line in text.splitlines():
        m = DURATION.match(line)
        if m:
            per_phase[m.group(3)] += float(m.group(1))
            count[m.group(3)] += 1
    scenarios: dict[str, dict[str, int | str]] = {}
    if "molecule test wall times" in text:
        section = text.split("molecule test wall times", 1)[1].splitlines()[1:]
        for line in section:
            m = SCENARIO.match(line)
            if not m:
                break
            scenarios[m.group(1)] = {"wall_s": int(m.group(2)), "outcome": m.group(3).strip()}
    summary = SUMMARY.findall(text)
    return {
        "phases_s": {k: round(v, 1) for k, v in sorted(per_phase.items())},
        "durations_listed": dict(sorted(count.items())),
        "molecule_scenarios": scenarios,
        "molecule_scenarios_total_s": sum(int(s["wall_s"]) for s in scenarios.values()),
        # Every pytest run of the log, in the order printed: scripts/test.sh prints the
        # lab pass first when the first pass ran beside it, the first pass after it.
        "pytest": [{"result": r, "wall_s": float(w)} for r, w in summary],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--wall", type=float, help="the whole CI run's wall time, if measured")
    args = ap.parse_args()
    result = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
        },
        "log": args.log.name,  # a path of this machine says nothing elsewhere
        "ci_wall_s": args.wall,
        **phases(args.log.read_text(errors="replace")),
    }
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    (out / f"suite-phases-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
