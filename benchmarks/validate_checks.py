#!/usr/bin/env python3
"""The node-check suite as `sparkctl validate` runs it, against the same suite
through testinfra's Ansible backend with --force-ansible, side by side.

- sparkctl: one pytest process per node, all at once, each over one SSH
  connection (testinfra's ssh backend with a ControlMaster) -- the exact code
  path of `sparkctl validate` (sparkctl.validate.run.run_node_checks).
- ansible: the same tests in one pytest process over every node, each command
  one Ansible run (testinfra's `ansible://` backend with force_ansible), the
  way Ansible-centric tools run checks.

Both runs use the same plan (playbooks/validate_plan.yml) and must agree on
every outcome; the benchmark fails if they do not, since then it would not be
comparing the same work. Results: benchmarks/results/validate-checks-<time>.json
and stdout. Timings are recorded, never asserted. Needs a provisioned cluster
(the lab: `sparkctl lab up` then `sparkctl provision inventory/sim.ini`):

    .venv/bin/python benchmarks/validate_checks.py [inventory/sim.ini] [--runs 1]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sparkctl import inventory  # noqa: E402
from sparkctl.paths import data_dir  # noqa: E402
from sparkctl.remote import load_plan, sshconfig  # noqa: E402
from sparkctl.validate import run  # noqa: E402


def sparkctl_way(plan_file: Path, ssh_cfg: Path, nodes: list[str], work: Path) -> tuple[float, Any]:
    start = time.monotonic()
    checks, _, _ = run.run_node_checks(plan_file, ssh_cfg, nodes, work)
    return time.monotonic() - start, checks


def ansible_way(plan_file: Path, inv_path: Path, nodes: list[str], work: Path) -> tuple[float, Any]:
    work.mkdir(parents=True, exist_ok=True)
    out = work / "ansible.json"
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(run.CHECKS_DIR),
        "-c",
        str(run.CHECKS_DIR / "pytest.ini"),
        "--rootdir",
        str(run.CHECKS_DIR),
        "-q",
        "--no-header",
        "-rN",
        "--sparkctl-plan",
        str(plan_file),
        "--sparkctl-backend",
        "ansible",
        "--sparkctl-ansible-inventory",
        str(inv_path),
        "--sparkctl-out",
        str(out),
    ]
    for node in nodes:
        argv += ["--sparkctl-node", node]
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(data_dir() / "ansible.cfg"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    took = time.monotonic() - start
    (work / "ansible.log").write_text(proc.stdout + proc.stderr)
    if not out.is_file():
        raise SystemExit(
            f"the ansible run wrote no results (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        )
    return took, json.loads(out.read_text())["checks"]


def _shown(path: Path) -> str:
    """The inventory as a result records it: relative to the repository when it is
    inside, so that a committed result names no checkout's location."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inventory", nargs="?", default=str(REPO / "inventory" / "sim.ini"))
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    inv = inventory.validate(Path(args.inventory))
    nodes = [n.name for n in inv.nodes]
    with tempfile.TemporaryDirectory(prefix="sparkctl-bench-") as tmp:
        work = Path(tmp)
        plan = load_plan(inv, work)
        plan_file = work / "plan.json"
        ssh_cfg = sshconfig.write(work / "ssh_config", inv.hostvars, nodes)
        rows = []
        for i in range(args.runs):
            fast, fast_checks = sparkctl_way(plan_file, ssh_cfg, nodes, work / f"s{i}")
            slow, slow_checks = ansible_way(plan_file, Path(args.inventory), nodes, work / f"a{i}")
            a = sorted((c.check, c.host, c.subject or "", c.outcome) for c in fast_checks)
            b = sorted(
                (c["check"], c["host"], c["subject"] or "", c["outcome"]) for c in slow_checks
            )
            if a != b:
                diff = sorted(set(a) ^ set(b))[:10]
                raise SystemExit(f"the two runs disagree, not comparable: {diff}")
            rows.append(
                {
                    "sparkctl_s": round(fast, 2),
                    "ansible_s": round(slow, 2),
                    "ratio": round(slow / fast, 1),
                    "checks": len(a),
                    "failed": sum(1 for x in a if x[3] in ("failed", "error")),
                }
            )
            print(
                f"run {i + 1}: {len(a)} checks on {len(nodes)} nodes: sparkctl {fast:.1f} s, "
                f"testinfra ansible backend (--force-ansible) {slow:.1f} s, "
                f"ratio {slow / fast:.1f}x",
                flush=True,
            )
        _ = plan
    result = {
        "benchmark": "validate-checks",
        "when": dt.datetime.now(dt.UTC).isoformat(),
        "inventory": _shown(Path(args.inventory)),
        "nodes": nodes,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": rows,
    }
    out_dir = REPO / "benchmarks" / "results"
    out_dir.mkdir(exist_ok=True)
    path = out_dir / f"validate-checks-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
