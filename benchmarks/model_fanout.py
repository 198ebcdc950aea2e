#!/usr/bin/env python3
"""Model fan-out on the lab: sparkctl's chain against the lower bound and parallel rsync.

On a running, provisioned lab (`sparkctl lab up`, `sparkctl provision
inventory/sim.ini`), with every fabric switch port shaped to RATE Mbit/s in
both directions:

(a) `sparkctl model sync` of a synthetic model of SIZE bytes from the head to
    the three other nodes (the chain over fabric_a): the transfer's own time
    (the sender's progress file, first byte to last node done) and the whole
    command's wall time (Ansible included) are both reported;
(b) the lower bound SIZE / RATE: one link's transfer time;
(c) the baseline of tools in this space: the head copies to the three workers
    in parallel with plain rsync over ssh (the same fabric addresses and the
    same cluster key), so its one link carries three copies.

Prints a/b and a/c, writes benchmarks/results/model-fanout-<time>.json, and
restores the port rates. Nothing is asserted: these are measurements.

    .venv/bin/python benchmarks/model_fanout.py [--size 1GiB] [--rate 100] [--files 8]

With ``--loopback`` (no lab needed) it runs the real relay chain on this
machine without shaping, and reports what limits a real Spark, the CPU (see
benchmarks/_fanout_loopback.py); ``--json`` prints one object:

    .venv/bin/python benchmarks/model_fanout.py --loopback [--size 1GiB] [--json]
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._fanout_loopback import loopback  # noqa: E402
from sparkctl import inventory  # noqa: E402
from sparkctl_lab.cli import parse_size  # noqa: E402
from tests.labhost import ssh  # noqa: E402

SPARKCTL = [sys.executable, "-m", "sparkctl"]
MODEL_DIR = "/srv/sparkctl-model/bench"
COPY = "/var/lib/sparkctl/models/bench"
META = "/var/lib/sparkctl/models/.sparkctl"
RSYNC_DEST = "/var/lib/sparkctl/bench-rsync"  # on the lab nodes


def run(*args: str, timeout: float = 7200) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n"
            f"{proc.stderr[-4000:]}"
        )
    return proc


def port_rates() -> dict[str, int]:
    status = json.loads(run(*SPARKCTL, "lab", "status", "--json").stdout)
    switch = next(h for h in status["hosts"] if h["role"] == "switch")
    return {ln["name"]: int(ln["rate_mbit"]) for ln in switch["links"] if "rate_mbit" in ln}


def shape(rates: dict[str, int]) -> None:
    for port, rate in rates.items():
        run(*SPARKCTL, "lab", "port", port, "--rate", str(rate))


def clean(nodes: list[Any]) -> None:
    for node in nodes[1:]:
        ssh(node.mgmt_ip, f"rm -rf {COPY} {META}/bench.* {RSYNC_DEST}", check=False)


def chain(inv_path: Path, head: Any) -> dict[str, float]:
    started = time.monotonic()
    run(
        *SPARKCTL,
        "model",
        "sync",
        str(inv_path),
        "--json",
        "-e",
        "model_cache_source=head",
        "-e",
        f"model_cache_head_dir={MODEL_DIR}",
    )
    wall = time.monotonic() - started
    board = json.loads(ssh(head.mgmt_ip, f"cat {META}/progress.json").stdout)
    if board.get("error") or not board.get("finished"):
        raise SystemExit(f"the chain did not finish cleanly: {board}")
    return {"transfer_s": float(board["elapsed_s"]), "command_s": round(wall, 2)}


def parallel_rsync(head: Any, workers: list[Any]) -> float:
    """The head rsyncs the model to every worker at once, over fabric_a, as the cluster user."""
    ssh(
        head.mgmt_ip,
        "command -v rsync >/dev/null || (apt-get update -qq && "
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null)",
        timeout=600,
    )
    for node in workers:
        ssh(
            node.mgmt_ip,
            "command -v rsync >/dev/null || (apt-get update -qq && "
            "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync "
            f">/dev/null); rm -rf {RSYNC_DEST}",
            timeout=600,
        )
    copies = " ".join(
        f"rsync -a --whole-file {MODEL_DIR}/ {n.fabric_ips['a']}:{RSYNC_DEST}/ &" for n in workers
    )
    script = f'start=$(date +%s.%N); {copies} wait; end=$(date +%s.%N); echo "$start $end"'
    out = ssh(head.mgmt_ip, script, timeout=7200).stdout.split()
    for node in workers:  # every copy complete, or the timing means nothing
        listing = ssh(node.mgmt_ip, f"cd {RSYNC_DEST} && sha256sum * | sort").stdout
        want = ssh(head.mgmt_ip, f"cd {MODEL_DIR} && sha256sum * | sort").stdout
        if listing != want:
            raise SystemExit(f"rsync to {node.name} is incomplete")
    return float(out[1]) - float(out[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inventory", nargs="?", default=str(REPO / "inventory" / "sim.ini"))
    parser.add_argument("--size", default="1GiB", help="model size (default 1GiB)")
    parser.add_argument("--rate", type=int, default=100, help="port rate, Mbit/s (default 100)")
    parser.add_argument("--files", type=int, default=8, help="weight shards (default 8)")
    parser.add_argument(
        "--loopback", action="store_true", help="the relay chain on this machine, unshaped (no lab)"
    )
    parser.add_argument(
        "--hops", default="1,3", help="--loopback: hop counts, comma-separated (default 1,3)"
    )
    parser.add_argument(
        "--max-streams",
        type=int,
        default=0,
        help="--loopback: streams 1..N (default: twice the cores, at most 8)",
    )
    parser.add_argument(
        "--transport",
        default="ssh",
        help="--loopback: ssh (bytes on the hop's pipe, as inside ssh), tcp, "
        "or both comma-separated",
    )
    parser.add_argument("--json", action="store_true", help="--loopback: print one JSON object")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="--loopback: runs of each row, the median reported (default 3)",
    )
    parser.add_argument(
        "--relay",
        type=Path,
        default=None,
        help="--loopback: another sparkctl_model_relay.py (an older commit's, "
        "for a before/after; streams 1 and ssh only if it has no --streams)",
    )
    args = parser.parse_args()
    if args.loopback:
        return run_loopback(args)
    inv_path = Path(args.inventory)
    inv = inventory.load(inv_path)
    nodes = list(inv.nodes)
    head, workers = nodes[0], nodes[1:]
    size = parse_size(args.size)
    before = port_rates()
    results: dict[str, Any] = {}
    try:
        shape(dict.fromkeys(before, args.rate))
        run(
            *SPARKCTL,
            "lab",
            "model",
            "-i",
            str(inv_path),
            "--size",
            str(size),
            "--files",
            str(args.files),
            "--dir",
            MODEL_DIR,
        )
        clean(nodes)
        results["chain"] = chain(inv_path, head)
        results["rsync_parallel_s"] = round(parallel_rsync(head, workers), 2)
    finally:
        clean(nodes)
        ssh(head.mgmt_ip, f"rm -rf {MODEL_DIR} {META}/bench.*", check=False)
        shape(before)
    bound = size * 8 / (args.rate * 1e6)
    a = results["chain"]["transfer_s"]
    record = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
        },
        "size_bytes": size,
        "rate_mbit": args.rate,
        "files": args.files,
        "nodes": len(nodes),
        "a_chain_transfer_s": a,
        "a_chain_command_s": results["chain"]["command_s"],
        "b_lower_bound_s": round(bound, 2),
        "c_rsync_parallel_s": results["rsync_parallel_s"],
        "a_over_b": round(a / bound, 3),
        "a_over_c": round(a / results["rsync_parallel_s"], 3),
    }
    out = REPO / "benchmarks" / "results" / f"model-fanout-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"model {size / 2**30:.2f} GiB in {args.files} files, {len(workers)} receivers, "
        f"ports shaped to {args.rate} Mbit/s"
    )
    print(
        f"  (a) sparkctl chain, transfer     {a:8.1f} s   (whole `model sync`: "
        f"{results['chain']['command_s']:.1f} s)"
    )
    print(f"  (b) lower bound S/B              {bound:8.1f} s")
    print(f"  (c) parallel rsync from the head {results['rsync_parallel_s']:8.1f} s")
    print(f"  a/b = {record['a_over_b']:.2f}   a/c = {record['a_over_c']:.2f}")
    print(f"written to {out.relative_to(REPO)}")
    return 0


def run_loopback(args: argparse.Namespace) -> int:
    size = parse_size(args.size)
    cores = os.cpu_count() or 1
    max_streams = args.max_streams or min(8, 2 * cores)
    result = loopback(
        size,
        args.files,
        [int(h) for h in args.hops.split(",")],
        max_streams,
        transports=args.transport.split(","),
        repeat=max(1, args.repeat),
        **({"relay": args.relay.resolve()} if args.relay else {}),
    )
    record = {
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": cores,
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
            "cpu": _cpu_model(),
        },
        "relay": str(args.relay or "this checkout"),
        **result,
    }
    out = (
        REPO
        / "benchmarks"
        / "results"
        / f"model-fanout-loopback-{time.strftime('%Y%m%d-%H%M%S')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    if args.json:
        print(json.dumps(result))
        return 0
    sha = result["sha256_cpu_s_per_gib"]
    print(f"loopback, {size / 2**30:.2f} GiB in {args.files} files on tmpfs, {cores} cores")
    print(f"  tar | tar pipe              {result['pipe_mb_s']:8.1f} MB/s")
    print(f"  sha256, one core            {result['sha256_mb_s']:8.1f} MB/s ({sha:.3f} CPU-s/GiB)")
    ssh_text = (
        "not measured (no sshd installed)"
        if result["ssh_mb_s"] is None
        else f"{result['ssh_mb_s']:8.1f} MB/s ({result['ssh_client_cpu_s_per_gib']:.3f} "
        "CPU-s/GiB, client side)"
    )
    print(f"  ssh, one stream             {ssh_text}")
    floor = sha + result["copy_cpu_s_per_gib"]
    print(
        f"  writing the bytes to files  {result['write_cpu_s_per_gib']:.3f} CPU-s/GiB from a "
        f"buffer, {result['copy_cpu_s_per_gib']:.3f} copied from the files' pages"
    )
    print(f"  sha256 + copy               {floor:.3f} CPU-s/GiB (a receiving hop's floor)")
    print(f"  starting the relay          {result['relay_start_cpu_s']:.3f} CPU-s per process")
    print(f"  relay chain (the median of {result['repeat']} runs each; CPU also its least):")
    print(
        "               transport hops streams   MB/s per hop   CPU-s/GiB/hop (least)"
        "   x sha256 (least)   x floor"
    )
    for row in result["streams"]:
        cpu, least = row["cpu_s_per_gib_per_hop"], row["min_cpu_s_per_gib_per_hop"]
        print(
            f"               {row['transport']:9s} {row['hops']:4d} {row['k']:7d} "
            f"{row['mb_s_per_hop']:14.1f} {cpu:13.3f} ({least:.3f}) "
            f"{cpu / sha:10.2f} ({least / sha:.2f}) {cpu / floor:9.2f}"
        )
    print(f"written to {out.relative_to(REPO)}")
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


if __name__ == "__main__":
    sys.exit(main())
