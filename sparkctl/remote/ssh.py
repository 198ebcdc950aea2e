"""Commands on the nodes over SSH, through a per-run ssh_config (:mod:`.sshconfig`).

Every command shares the node's one ControlMaster connection; what a node prints is
bounded, and a node that does not answer within the command's time is named.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

# (host, command, timeout seconds) -> (exit code, stdout then stderr)
Runner = Callable[[str, str, int], tuple[int, str]]


# What sparkctl keeps of one command's output: an nccl-tests log is tens of kilobytes; a
# node that prints without end must not fill the controller's memory.
OUTPUT_LIMIT = 64 << 20


def ssh_runner(ssh_config: Path, limit: int = OUTPUT_LIMIT) -> Runner:
    """Run a command on a node through the run's ssh_config (its ControlMaster); its
    stdout then its stderr, together cut at ``limit`` bytes."""

    def run(host: str, command: str, timeout: int) -> tuple[int, str]:
        deadline = time.monotonic() + timeout + 30
        with subprocess.Popen(
            ["ssh", "-F", str(ssh_config), "--", host, command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        ) as proc:
            out, note = _bounded_read(proc, deadline, limit)
            if note:
                proc.kill()
            code = proc.wait()
        if note == "timeout":
            return 124, out + f"\nsparkctl: no answer from {host} within {timeout + 30} s\n"
        if note == "limit":
            return 125, out + (
                f"\nsparkctl: {host} printed more than {limit >> 20} MiB; the rest was not read\n"
            )
        return code, out

    return run


def _bounded_read(
    proc: subprocess.Popen[bytes], deadline: float, limit: int
) -> tuple[str, str | None]:
    """``proc``'s stdout and stderr (stdout first) until both close, the deadline passes
    ("timeout") or together more than ``limit`` bytes came ("limit")."""
    import selectors  # noqa: PLC0415

    streams = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    note: str | None = None
    with selectors.DefaultSelector() as sel:
        for stream in streams:
            if stream is not None:
                sel.register(stream, selectors.EVENT_READ)
        while sel.get_map() and note is None:
            left = deadline - time.monotonic()
            if left <= 0:
                note = "timeout"
                break
            for key, _ in sel.select(timeout=min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                streams[key.fileobj].extend(chunk)  # type: ignore[index]
                if sum(len(b) for b in streams.values()) > limit:
                    note = "limit"
    out = bytes(streams[proc.stdout])[:limit]
    err = bytes(streams[proc.stderr])[: max(0, limit - len(out))]
    return (out + err).decode(errors="replace"), note
