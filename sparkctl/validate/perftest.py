"""RDMA write bandwidth per twin between node pairs (perftest's ``ib_write_bw``).

Real Sparks only: it needs RDMA devices, which the lab has none of (no
soft-RoCE in its kernel), so there the report says "not available". Each
pair of the first round of disjoint pairs (every node in one pair) runs both
twins at once, as NVIDIA's benchmarking guide measured them: 92.57 + 97.28 =
189.85 Gb/s on one 200 Gb/s port (NVIDIA/dgx-spark-playbooks
nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md). The sum
of the two twins is judged against the port's line rate with the same
fraction as the NCCL gate.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sparkctl.collection import tool_output
from sparkctl.plan import Plan
from sparkctl.remote import Runner
from sparkctl.report.model import Check, Outcome, Thresholds
from sparkctl.validate.nccl_run import pair_rounds

BASE_PORT = 18515  # perftest's default port; one per twin
SECONDS = 5


def _gid(runner: Runner, host: str, record_file: str) -> str | None:
    rc, out = runner(host, f"cat {shlex.quote(record_file)}", 30)
    try:
        value = tool_output.env_file(out).get("ROCE_GID_INDEX", "") if rc == 0 else ""
    except tool_output.ToolOutputError:
        return None
    return value if value.isdigit() else None


def _argv(ibdev: str, gid: str, port: int, server: str | None) -> str:
    argv = [
        "timeout",
        str(SECONDS + 30),
        "ib_write_bw",
        "-d",
        ibdev,
        "-x",
        gid,
        "-p",
        str(port),
        "--report_gbits",
        "-D",
        str(SECONDS),
        "-F",
    ]
    return shlex.join([*argv, *([server] if server else [])])


def run_pair(plan: Plan, a: str, b: str, runner: Runner, *, th: Thresholds, run_dir: Path) -> Check:
    """Both twins from ``a`` to ``b`` at once; one check with the sum."""
    start = time.monotonic()
    twins = plan.node(a).roce_fabric.twins
    record = plan.node(a).roce_fabric.record_file
    gid_a, gid_b = _gid(runner, a, record), _gid(runner, b, record)
    subject = f"-> {b} (both twins)"
    if gid_a is None or gid_b is None:
        return Check(
            "rdma_write",
            a,
            subject,
            "error",
            f"no ROCE_GID_INDEX in {record} on {a if gid_a is None else b}",
        )
    jobs = []
    with ThreadPoolExecutor(max_workers=2 * len(twins)) as pool:
        for i, twin in enumerate(twins):
            jobs.append(
                pool.submit(runner, b, _argv(twin.ibdev, gid_b, BASE_PORT + i, None), SECONDS + 40)
            )
        time.sleep(2)  # the servers listen before the clients connect
        clients = [
            pool.submit(
                runner,
                a,
                _argv(twin.ibdev, gid_a, BASE_PORT + i, plan.node(b).fabric_ip(twin.twin)),
                SECONDS + 40,
            )
            for i, twin in enumerate(twins)
        ]
        results = [c.result() for c in clients]
        _ = [j.result() for j in jobs]
    rates = []
    for twin, (rc, out) in zip(twins, results, strict=True):
        (run_dir / f"ib_write_bw-{a}-{b}-{twin.twin}.log").write_text(out)
        try:
            rates.append(float(tool_output.ib_write_bw(out)["average_gbps"]))
        except ValueError:
            tail = [ln for ln in out.splitlines() if ln.strip()][-1:] or ["no output"]
            return Check(
                "rdma_write",
                a,
                subject,
                "failed",
                f"{twin.ibdev} to {b}: exit {rc}: {tail[0][:200]}",
                time.monotonic() - start,
            )
    total, line = sum(rates), th.line_rate_gbytes * 8
    parts = " + ".join(f"{r:.2f}" for r in rates)
    outcome: Outcome = "passed" if total >= th.min_fraction * line else "failed"
    return Check(
        "rdma_write",
        a,
        subject,
        outcome,
        f"{parts} = {total:.2f} Gb/s, {total / line:.0%} of the {line:g} Gb/s port "
        f"(threshold {th.min_fraction:.0%})",
        time.monotonic() - start,
    )


def run_all(
    plan: Plan, nodes: Sequence[str], runner: Runner, th: Thresholds, run_dir: Path
) -> list[Check]:
    """The first round of disjoint pairs: every node in one pair, the pairs at once."""
    rounds = pair_rounds(nodes)
    if not rounds:
        return []
    with ThreadPoolExecutor(max_workers=len(rounds[0])) as pool:
        futures = [
            pool.submit(run_pair, plan, a, b, runner, th=th, run_dir=run_dir) for a, b in rounds[0]
        ]
        return [f.result() for f in futures]
