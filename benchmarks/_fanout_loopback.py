"""The relay chain on this machine, without shaping: what a hop costs in CPU.

The real ``sparkctl-model-relay`` (roles/model_cache/files) runs here as it
runs on the nodes: one ``send``, then one ``recv`` per hop and stream, each
hop a directory on tmpfs. Hops are reached through ``hop_rusage.py`` instead
of ssh (the lab and the unit tests use ``sh -c``): it runs the hop's command
and logs the CPU time of what it ran (``wait4``), so each hop's own CPU is its
subtree's less the next hop's. ssh's cost is measured apart, as a single
stream through a private sshd on loopback when one is installed.

Reported side by side (MB = 10^6 bytes): a ``tar | tar`` pipe, single-core
``hashlib.sha256``, ssh's single stream, and for each number of hops and
streams the rate every hop received at and the CPU-seconds per GiB per hop.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RELAY = (
    REPO
    / "ansible_collections"
    / "sparkctl"
    / "spark"
    / "roles"
    / "model_cache"
    / "files"
    / "sparkctl_model_relay.py"
)
HOP = Path(__file__).resolve().with_name("hop_rusage.py")
GIB = 1 << 30
CIPHER = "aes128-gcm@openssh.com"  # the model_cache role's default


def make_model(root: Path, size: int, files: int) -> None:
    root.mkdir(parents=True)
    per = size // files
    for i in range(files):
        with (root / f"model-{i + 1:05d}-of-{files:05d}.safetensors").open("wb") as out:
            left = per if i < files - 1 else size - per * (files - 1)
            while left:
                block = os.urandom(min(left, 64 << 20))
                out.write(block)
                left -= len(block)


def sha256_rate(root: Path) -> tuple[float, float]:
    """Single-core SHA-256 over the model already in memory: (MB/s, CPU-s per GiB)."""
    total = cpu = 0.0
    for path in sorted(root.iterdir()):
        data = path.read_bytes()
        view = memoryview(data)
        start = time.process_time()
        digest = hashlib.sha256()
        for i in range(0, len(data), 1 << 20):
            digest.update(view[i : i + (1 << 20)])
        cpu += time.process_time() - start
        total += len(data)
    return total / cpu / 1e6, cpu / (total / GIB)


def _per_gib(root: Path, work: Path, fill: Callable[[int, int, int], None]) -> float:
    """CPU-s per GiB of ``fill(src_fd, dst_fd, size)`` putting each of the model's files
    into a new file beside them (the same file system as the hops)."""
    total = 0
    cpu = 0.0
    for path in sorted(root.iterdir()):
        size = path.stat().st_size
        out = work / "write-cost"
        src = os.open(path, os.O_RDONLY)
        dst = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        start = time.process_time()
        fill(src, dst, size)
        cpu += time.process_time() - start
        os.close(src)
        os.close(dst)
        out.unlink()
        total += size
    return cpu / (total / GIB)


def write_cost(root: Path, work: Path) -> float:
    """CPU-s per GiB of writing the model's bytes into new files beside it: the other
    per-byte job a receiving hop cannot avoid. The bytes come from a buffer already
    in memory, so this is the write alone."""
    view = memoryview(bytearray(1 << 20))

    def write(_src: int, dst: int, left: int) -> None:
        while left:
            left -= os.write(dst, view[: min(left, len(view))])

    return _per_gib(root, work, write)


def copy_cost(root: Path, work: Path) -> float:
    """CPU-s per GiB of copying the model's files, in the kernel, into new files beside
    them (``copy_file_range``, which on tmpfs copies page by page as a hop's splice
    into its file does): the write of bytes that are not in the CPU's caches, as a
    hop's are when its sender hands it the file's pages (sendfile) in this benchmark."""

    def copy(src: int, dst: int, left: int) -> None:
        while left:
            n = os.copy_file_range(src, dst, left)
            if n == 0:
                break
            left -= n

    return _per_gib(root, work, copy)


def python_start_cost() -> float:
    """CPU-s of starting the relay once (each hop and stream is one process)."""
    before = os.times()
    for _ in range(5):
        subprocess.run([sys.executable, str(RELAY), "--help"], capture_output=True, check=True)
    after = os.times()
    return (
        (after.children_user - before.children_user)
        + (after.children_system - before.children_system)
    ) / 5


def pipe_rate(root: Path, work: Path, size: int) -> float:
    dest = work / "pipe"
    dest.mkdir()
    start = time.monotonic()
    create = subprocess.Popen(["tar", "-C", str(root), "-cf", "-", "."], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-C", str(dest), "-xf", "-"], stdin=create.stdout, check=True)
    if create.wait() != 0:
        raise SystemExit("tar -c failed")
    wall = time.monotonic() - start
    shutil.rmtree(dest)
    return size / wall / 1e6


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def private_sshd(work: Path) -> Iterator[list[str] | None]:
    """ssh argv to a private sshd on 127.0.0.1 (its own host key, key login only), or
    None when no sshd is installed."""
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if Path("/usr/sbin/sshd").exists() else None)
    if sshd is None:
        yield None
        return
    d = work / "sshd"
    d.mkdir()
    for name in ("host", "client"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True
        )
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    (d / "authorized_keys").chmod(0o600)
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {d / 'pid'}\nPermitRootLogin prohibit-password\n"
    )
    (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {(d / 'host.pub').read_text()}")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.DEVNULL
    )
    argv = [
        "ssh",
        "-T",
        "-o",
        "BatchMode=yes",
        "-o",
        "Compression=no",
        "-c",
        CIPHER,
        "-i",
        str(d / "client"),
        "-o",
        f"UserKnownHostsFile={d / 'known_hosts'}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-p",
        str(port),
        "127.0.0.1",
    ]
    try:
        for _ in range(100):
            if subprocess.run([*argv, "true"], capture_output=True, check=False).returncode == 0:
                break
            time.sleep(0.1)
        yield argv
    finally:
        proc.terminate()
        proc.wait()


def ssh_rate(argv: list[str] | None, root: Path) -> tuple[float | None, float | None]:
    """One ssh stream of the model into ``cat > /dev/null``: (MB/s, CPU-s per GiB of
    the client and server together, both ends of one hop)."""
    if argv is None:
        return None, None
    files = sorted(root.iterdir())
    size = sum(f.stat().st_size for f in files)
    before = os.times()
    start = time.monotonic()
    cat = subprocess.Popen(["cat", *map(str, files)], stdout=subprocess.PIPE)
    subprocess.run([*argv, "cat > /dev/null"], stdin=cat.stdout, check=True)
    cat.wait()
    wall = time.monotonic() - start
    after = os.times()
    # The server side runs under sshd, not a child of this process: its CPU is not
    # in os.times(); the figure is the client's (encrypting) side.
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return size / wall / 1e6, cpu / (size / GIB)


def chain_run(
    root: Path,
    work: Path,
    hops: int,
    streams: int,
    *,
    size: int,
    transport: str = "ssh",
    relay: Path = RELAY,
) -> dict[str, Any]:
    """One send along ``hops`` fresh hops with ``streams`` streams, checked complete."""
    manifest = work / "manifest.json"
    log = work / f"rusage-{hops}-{streams}.log"
    log.unlink(missing_ok=True)
    chain: list[dict[str, Any]] = []
    for i in range(hops):
        base = work / f"hop{i}"
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir()
        hop: dict[str, Any] = {
            "host": f"hop{i}",
            "hosts": ["127.0.0.1"],
            "name": f"hop{i}",
            "root": str(base / "model"),
            "manifest": str(manifest),
            "state": str(base / "state.json"),
            "need": str(base / "need"),
            "job": f"b{hops}x{streams}",
            "via": f"{shlex.quote(sys.executable)} {shlex.quote(str(HOP))} "
            f"{shlex.quote(str(log))} hop{i}",
            "relay": f"{shlex.quote(sys.executable)} {shlex.quote(str(relay))}",
        }
        subprocess.run(
            [
                sys.executable,
                str(relay),
                "check",
                hop["root"],
                "--manifest",
                str(manifest),
                "--state",
                hop["state"],
                "--need-out",
                hop["need"],
            ],
            check=True,
            capture_output=True,
        )
        chain.append(hop)
    names = work / "names"
    names.write_text("".join(f"{p.name}\n" for p in sorted(root.iterdir())))
    start = time.monotonic()
    # Flags only where they differ from the defaults: an older relay (--relay) has none.
    flags = ([] if streams == 1 else ["--streams", str(streams)]) + (
        [] if transport == "ssh" else ["--transport", transport]
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(relay),
            "send",
            str(root),
            "--files",
            str(names),
            "--chain",
            json.dumps(chain),
            *flags,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"send failed: {proc.stderr[-2000:]}")
    sent = json.loads(proc.stdout)
    for hop in chain:  # every copy complete, or the timing means nothing
        out = subprocess.run(
            [
                sys.executable,
                str(RELAY),
                "check",
                hop["root"],
                "--manifest",
                str(manifest),
                "--state",
                hop["state"],
                "--read-only",
                "--full",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        if json.loads(out)["need"]:
            raise SystemExit(f"{hop['name']} is incomplete after the chain")
    subtree: dict[str, float] = {}
    wrapper: dict[str, float] = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        subtree[rec["hop"]] = subtree.get(rec["hop"], 0.0) + rec["child_cpu_s"]
        wrapper[rec["hop"]] = wrapper.get(rec["hop"], 0.0) + rec["self_cpu_s"]
    own = []
    for i in range(hops):
        below = subtree.get(f"hop{i + 1}", 0.0) + wrapper.get(f"hop{i + 1}", 0.0)
        own.append(subtree[f"hop{i}"] - below)
    for i in range(hops):
        shutil.rmtree(work / f"hop{i}", ignore_errors=True)
    gib = size / GIB
    return {
        "k": int(sent.get("streams", streams)),
        "hops": hops,
        "transport": transport,
        "wall_s": round(wall, 3),
        "mb_s_per_hop": round(size / wall / 1e6, 1),
        "cpu_s_per_gib_per_hop": round(sum(own) / hops / gib, 3),
        "cpu_s_per_gib_each_hop": [round(c / gib, 3) for c in own],
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median CPU, with every run's rate and CPU beside it: one run alone
    swings by half on a shared VM (a page the host has not backed yet costs several
    times a warm one)."""
    ordered = sorted(runs, key=lambda r: r["cpu_s_per_gib_per_hop"])
    pick = dict(ordered[len(ordered) // 2])
    pick["runs_mb_s_per_hop"] = [r["mb_s_per_hop"] for r in runs]
    pick["runs_cpu_s_per_gib_per_hop"] = [r["cpu_s_per_gib_per_hop"] for r in runs]
    # The least a run cost: what the hop's own work takes, where the median also
    # carries the VM's noise (runs of one row here: 1.17 to 1.83 CPU-s per GiB).
    pick["min_cpu_s_per_gib_per_hop"] = ordered[0]["cpu_s_per_gib_per_hop"]
    return pick


def loopback(
    size: int,
    files: int,
    hop_counts: list[int],
    max_streams: int,
    *,
    transports: list[str],
    relay: Path = RELAY,
    repeat: int = 3,
) -> dict[str, Any]:
    shm = Path("/dev/shm")  # noqa: S108 - tmpfs, so the disk is not what is measured
    work = Path(
        tempfile.mkdtemp(
            prefix="sparkctl-fanout-", dir=shm if shm.is_dir() and os.access(shm, os.W_OK) else None
        )
    )
    try:
        root = work / "src"
        make_model(root, size, files)
        subprocess.run(
            [
                sys.executable,
                str(RELAY),
                "manifest",
                str(root),
                "--out",
                str(work / "manifest.json"),
                "--state",
                str(work / "src-state.json"),
            ],
            check=True,
            capture_output=True,
        )
        sha_mb_s, sha_cpu = sha256_rate(root)
        write_cpu = write_cost(root, work)
        copy_cpu = copy_cost(root, work)
        start_cpu = python_start_cost()
        pipe = pipe_rate(root, work, size)
        with private_sshd(work) as ssh_argv:
            ssh_mb_s, ssh_cpu = ssh_rate(ssh_argv, root)
        # One untimed run first: the first touch of memory a fresh VM has not used yet
        # costs several times what it costs after (seen here: 4.1 against 1.6 CPU-s
        # per GiB for the same hop).
        chain_run(root, work, max(hop_counts), 1, size=size, transport=transports[0], relay=relay)
        rows = [
            median_run(
                [
                    chain_run(root, work, hops, k, size=size, transport=transport, relay=relay)
                    for _ in range(repeat)
                ]
            )
            for transport in transports
            for hops in hop_counts
            for k in range(1, max_streams + 1)
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "cores": os.cpu_count(),
        "size_bytes": size,
        "files": files,
        "pipe_mb_s": round(pipe, 1),
        "sha256_mb_s": round(sha_mb_s, 1),
        "sha256_cpu_s_per_gib": round(sha_cpu, 3),
        "write_cpu_s_per_gib": round(write_cpu, 3),
        "copy_cpu_s_per_gib": round(copy_cpu, 3),
        "repeat": repeat,
        "relay_start_cpu_s": round(start_cpu, 3),
        "ssh_mb_s": None if ssh_mb_s is None else round(ssh_mb_s, 1),
        "ssh_client_cpu_s_per_gib": None if ssh_cpu is None else round(ssh_cpu, 3),
        "streams": rows,
    }
