"""The NCCL bandwidth gate's runs: launch nccl-tests from the head, one run or pairs.

One rank per node, launched by Open MPI's ``mpirun`` on the head over SSH as
the cluster user, with every variable of the node's NCCL environment file
exported to every rank (``-x``), as NVIDIA's Spark switch guide runs it
(NVIDIA/dgx-spark-playbooks nvidia/multi-sparks-through-switch/README.md,
step 7). The largest size of the sweep is derived from
the memory actually available on the nodes: a fixed ``-e 16G`` used about
32 GB per node and froze a Spark (dgx-spark-playbooks #102). When the
all-node run fails, pairwise runs (two ranks) over disjoint pairs, round by
round, are what :func:`sparkctl.validate.nccl_judge.localise` judges.

Each run's log is parsed by :mod:`sparkctl.nccl_parse` and judged by
:mod:`sparkctl.validate.nccl_judge`; the judge's names that ``validate``
calls through this module are re-exported here (``__all__``).
"""

from __future__ import annotations

import math
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkctl import nccl_parse
from sparkctl.collection import tool_output
from sparkctl.errors import SparkctlError
from sparkctl.remote.ssh import Runner
from sparkctl.report.model import NcclRun, Thresholds
from sparkctl.validate.nccl_judge import (
    PROGRAMS,
    consistency,
    judge,
    settle,
)

__all__ = [
    "BUFFERS",
    "PROGRAMS",
    "Launch",
    "Runner",
    "pair_rounds",
    "run",
    "run_pairs",
    "sweep_max",
]

BUFFERS = 3  # send, receive and (with -c 1) the expected result


def sweep_max(mem_available: Sequence[int], fraction: float, cap: int, floor: int) -> int:
    """The largest buffer: a power of two within ``fraction`` of the tightest node's
    available memory over the test's three buffers, at most ``cap``, at least ``floor``."""
    if not mem_available:
        return max(floor, 1)
    room = min(mem_available) * fraction / BUFFERS
    size = 1 << math.floor(math.log2(max(room, 1.0)))
    return max(floor, min(cap, size))


@dataclass(frozen=True)
class Launch:
    """How to start nccl-tests on a set of nodes (the first one runs mpirun)."""

    collective: str
    hosts: tuple[str, ...]  # node names, the launcher first
    addresses: tuple[str, ...]  # their socket-interface (fabric a) addresses, same order
    tests_dir: str
    env_file: str
    env_keys: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    iters: int
    warmup: int
    timeout: int
    as_root: bool
    nccl_home: str | None = None  # a real build's NCCL (LD_LIBRARY_PATH); None in the lab

    def program_argv(self) -> list[str]:
        return [
            f"{self.tests_dir}/{PROGRAMS[self.collective]}",
            "-b",
            str(self.min_bytes),
            "-e",
            str(self.max_bytes),
            "-f",
            "2",
            "-g",
            "1",
            "-c",
            "1",
            "-n",
            str(self.iters),
            "-w",
            str(self.warmup),
        ]

    def mpirun_argv(self) -> list[str]:
        argv = [
            "mpirun",
            "-np",
            str(len(self.hosts)),
            "-H",
            ",".join(f"{a}:1" for a in self.addresses),
            # mpirun reaches the other nodes with the cluster key; never a new host key.
            "--mca",
            "plm_rsh_args",
            "-o BatchMode=yes -o StrictHostKeyChecking=yes",
        ]
        if self.as_root:
            argv.append("--allow-run-as-root")
        for key in self.env_keys:
            argv += ["-x", key]
        if self.nccl_home:
            # nccl-tests is linked against the pinned NCCL build, not DGX OS's libnccl2
            # (two 2.28.9 builds behaved differently: vllm-project/vllm #42354, #41725).
            argv += ["-x", "LD_LIBRARY_PATH"]
        return argv + self.program_argv()

    def read_env_command(self) -> str:
        """Prints the env file the nccl role wrote; the controller reads it with the one
        parser (tool_output.env_file). No shell ever sources it: a line in it is data."""
        return f"cat -- {shlex.quote(self.env_file)}"

    def remote_command(self, env: Mapping[str, str]) -> str:
        """What the launcher runs: mpirun bounded by a timeout, the env file's variables
        given to ``env`` by name, each one quoted word."""
        lib = (
            f"LD_LIBRARY_PATH={shlex.quote(self.nccl_home)}/lib"
            "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; export LD_LIBRARY_PATH; "
            if self.nccl_home
            else ""
        )
        assigns = shlex.join(f"{key}={value}" for key, value in env.items())
        inner = (
            f"{lib}exec env {assigns}{' ' if assigns else ''}"
            f"timeout --kill-after=10 {self.timeout} {shlex.join(self.mpirun_argv())}"
        )
        return f"sh -c {shlex.quote(inner)}"


def run(
    launch: Launch,
    runner: Runner,
    th: Thresholds,
    log_path: Path,
    scope: str = "all",
    *,
    rdma_expected: bool = False,
    pinned_nccl: str | None = None,
) -> NcclRun:
    """Start one nccl-tests run, keep its log, parse and judge it."""
    start = time.monotonic()
    common: dict[str, Any] = {
        "collective": launch.collective,
        "scope": scope,
        "hosts": list(launch.hosts),
        "command": launch.mpirun_argv(),
        "log": log_path.name,
    }
    rc, text = runner(launch.hosts[0], launch.read_env_command(), 30)
    why = f"exit status {rc}: {text.strip()[-200:]}"
    try:
        env = tool_output.env_file(text) if rc == 0 else None
    except tool_output.ToolOutputError as exc:
        env, why = None, str(exc)
    if env is None:
        log_path.write_text(text)
        return NcclRun(
            outcome="failed",
            duration_s=time.monotonic() - start,
            message=f"{launch.env_file} on {launch.hosts[0]} could not be read "
            f"({why}): provision writes it (the nccl role)",
            **common,
        )
    rc, output = runner(launch.hosts[0], launch.remote_command(env), launch.timeout)
    log_path.write_text(output)
    try:
        rep = nccl_parse.parse(output, str(log_path))
    except SparkctlError as exc:
        reason = _failure_reason(output, rc)
        message = reason or (f"exit status {rc}: {exc.message}" if rc else exc.message)
        return NcclRun(
            outcome="failed", duration_s=time.monotonic() - start, message=message, **common
        )
    outcome, message, judged, model = judge(rep, launch.collective, len(launch.hosts), th)
    outcome, message = settle(
        outcome,
        message,
        rep.transport,
        rdma_expected,
        consistency(rep, len(launch.hosts), pinned_nccl),
    )
    if rc != 0 and outcome == "passed":
        outcome, message = "failed", f"exit status {rc} after a complete log: {message}"
    return NcclRun(
        outcome=outcome,
        message=message,
        report=rep.to_dict(),
        judged=judged,
        fit=model,
        duration_s=time.monotonic() - start,
        **common,
    )


_REASONS = (
    (
        re.compile(r"no answer from|timeout|timed out", re.I),
        "no result within the time limit (a hang: a link or interface that drops traffic?)",
    ),
    (re.compile(r"No route to host|Connection refused|unreachable", re.I), None),
    (re.compile(r"Host key verification failed|Permission denied", re.I), None),
)


def _failure_reason(output: str, rc: int) -> str | None:
    """The line that says why a run produced no complete log; None leaves it to the parser,
    whose message names the first failure line of the log."""
    for pattern, text in _REASONS:
        for line in output.splitlines():
            if pattern.search(line):
                return text or line.strip()[:300]
    if rc == 124:
        return _REASONS[0][1]
    if rc == 137:
        return (
            "killed (exit 137): the time limit ran out, or the kernel's out-of-memory killer "
            "stopped a rank (see the node's journal)"
        )
    return None


# ------------------------------------------------------------------ localisation
def pair_rounds(nodes: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Every pair once, grouped in rounds of disjoint pairs (circle method)."""
    items: list[str | None] = list(nodes)
    if len(items) % 2:
        items.append(None)
    n = len(items)
    rounds = []
    for _ in range(n - 1):
        pairs = [(items[i], items[n - 1 - i]) for i in range(n // 2)]
        rounds.append([(a, b) for a, b in pairs if a is not None and b is not None])
        items = [items[0], items[-1], *items[1:-1]]
    return rounds


def run_pairs(
    make: Callable[[tuple[str, str]], Launch],
    runner: Runner,
    th: Thresholds,
    run_dir: Path,
    nodes: Sequence[str],
    *,
    rdma_expected: bool = False,
    pinned_nccl: str | None = None,
) -> list[NcclRun]:
    """Each round's pairs at once (disjoint pairs share no port), rounds one after another."""
    results: list[NcclRun] = []
    for round_ in pair_rounds(nodes):
        with ThreadPoolExecutor(max_workers=max(1, len(round_))) as pool:
            launches = [make(pair) for pair in round_]
            futures = [
                pool.submit(
                    run,
                    launch,
                    runner,
                    th,
                    run_dir / (f"nccl-{launch.collective}-{'-'.join(launch.hosts)}.log"),
                    "pair",
                    rdma_expected=rdma_expected,
                    pinned_nccl=pinned_nccl,
                )
                for launch in launches
            ]
            results += [f.result() for f in futures]
    return results
