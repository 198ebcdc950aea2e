"""One sparkctl run per inventory at a time.

Two runs against the same cluster would interleave network changes and
collective tests. The lock is an ``flock`` on a file under the state
directory, keyed by the inventory's real path; the kernel releases it when
the process dies, so a crash never leaves a stale lock. The file records who
holds it, for the "already running" message.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sparkctl.errors import ExitCode, SparkctlError
from sparkctl.paths import state_dir


def lock_path(inventory: Path) -> Path:
    key = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:16]
    return state_dir() / "locks" / f"{inventory.stem}-{key}.lock"


@contextmanager
def inventory_lock(inventory: Path, command: str) -> Iterator[None]:
    path = lock_path(inventory)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(path)
            raise SparkctlError(
                f"another sparkctl run is using {inventory}: {holder}", ExitCode.LOCKED,
                hint="wait for it to finish; the lock goes away when that process ends",
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "command": command,
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode())
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _read_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "already running"
    return (f"already running ({info.get('command', 'sparkctl')}, pid {info.get('pid', '?')}, "
            f"since {info.get('since', '?')})")
